#!/usr/bin/env bash
# FlagGems on one GPU, the parts of time to verdict that need it (needs flag-gems and sqlalchemy importable; on a
# machine without network: wheels in .whl/).  PARTS picks among:
#   probe   whether `import flag_gems` initialises CUDA, and from where (import_cuda_probe.py; also with ARCH set)
#   memory  8 switches in one session: live fork servers and their memory (server_memory.py)
#   aten    campaigns/flaggems_aten.py (ATen on side A, FlagGems on side B: a kernel-variant switch),
#           COLD_ROUNDS rounds cold (a fresh kernel cache), then WARM sessions of ROUNDS rounds on new roots with
#           that cache: each run's status rows (AUTOTUNE_REPLAY_FALLBACK after round 1), A and B cell times,
#           time: line, verdicts; OPS (a -k expression) picks ops
#   gems    campaigns/flaggems.py (DISABLE_MMA_V3=1 on side B) the same way
#   bash benchmarks/gpu/gpu_flaggems_aten.sh
#   PARTS="aten gems" ROUNDS=3 WARM=1 bash benchmarks/gpu/gpu_flaggems_aten.sh
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
PARTS=${PARTS:-probe memory aten}
ROUNDS=${ROUNDS:-3}
COLD_ROUNDS=${COLD_ROUNDS:-$ROUNDS}
OPS=${OPS:-}
WARM=${WARM:-1}
LIMIT=${LIMIT:-280}  # seconds one campaign session may take
S=/tmp/gems-ttv; mkdir -p "$S"
export ABBENCH_KERNEL_CACHE=$S/kernels
python3 -c "import flag_gems, torch, triton; print('flag_gems', flag_gems.__version__, 'torch', torch.__version__, 'triton', triton.__version__)" | tee "$OUT/env.txt"
case " $PARTS " in *" probe "*)
  python3 benchmarks/probes/import_cuda_probe.py flag_gems --env ARCH=sm_90 2>&1 | tee "$OUT/import_probe.txt";; esac
case " $PARTS " in *" memory "*)
  python3 benchmarks/probes/server_memory.py --switches 8 2>&1 | tee "$OUT/server_memory.txt";; esac
campaign() {  # campaign NAME FILE: ROUNDS rounds cold, then WARM sessions on new roots with the same kernel cache
  local name=$1 file=$2 run rounds
  for run in cold $(seq -f "warm%g" 1 "$WARM"); do
    local root=$S/$name-$run start; start=$(date +%s.%N)
    if [ "$run" = cold ]; then rounds=$COLD_ROUNDS; else rounds=$ROUNDS; fi
    timeout "$LIMIT" python3 -m pytest -p pytest_abbench.plugin "$file" ${OPS:+-k "$OPS"} --ab-rounds "$rounds" \
      --ab-root "$root" \
      --cell-timeout 400 -p no:cacheprovider -rs > "$S/$name-$run.log" 2>&1
    echo "== $name $run ($rounds rounds): rc $? wall $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s"
    grep -h "^== \|geomean delta\|autotune:\|^time:\|compile cache\|abbench: round\|abbench: exit\|fork server\|passed\|failed" \
      "$S/$name-$run.log"
    cat "$root/status.tsv" 2>/dev/null
    python3 benchmarks/figures/cell_timing.py "$root" 2>&1 | tail -n +1
  done
}
case " $PARTS " in *" aten "*) campaign aten campaigns/flaggems_aten.py 2>&1 | tee "$OUT/aten.txt";; esac
case " $PARTS " in *" gems "*) campaign gems campaigns/flaggems.py 2>&1 | tee "$OUT/gems.txt";; esac
tar czf "$OUT/logs.tgz" -C "$S" --exclude=kernels --exclude=cache --exclude=code_cache --exclude=ir . 2>/dev/null
