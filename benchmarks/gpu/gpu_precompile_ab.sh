#!/usr/bin/env bash
# Round 1 of `pytest campaigns/topk.py --ab-rounds 6` with and without the parallel precompile, in one
# run on a 2-GPU machine: GPU 0 runs --ab-precompile off, GPU 1 the defaults, started together.
# Without the precompile, side B's round-1 cell alone compiles for longer than one 10-minute device call,
# so that run is started in its own process session and outlives the call that started it:
#   PHASE=start   bash benchmarks/gpu/gpu_precompile_ab.sh   # both runs start; returns after the precompiled run
#   PHASE=collect bash benchmarks/gpu/gpu_precompile_ab.sh   # a later call on the same warm machine: waits for
#                                                          # the other run, then prints the figures
# Both runs share the host's CPUs (the one without precompile compiles on one core at a time).
# Roots (without Triton caches) come back in $OUT/s.tgz.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
PHASE=${PHASE:-start}
ROUNDS=${ROUNDS:-6}
S=/tmp/precompile-ab
run() {  # run GPU NAME [pytest args]: one campaign into $S/NAME; "rc R wall W" into $S/NAME.done
  local gpu=$1 name=$2; shift 2
  local start; start=$(date +%s.%N)
  CUDA_VISIBLE_DEVICES=$gpu python3 -m pytest -p pytest_abbench.plugin campaigns/topk.py --ab-rounds "$ROUNDS" \
    --ab-root "$S/$name" --cell-timeout 1500 -p no:cacheprovider "$@" >"$S/$name.log" 2>&1
  local rc=$?
  echo "rc $rc wall $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')" > "$S/$name.done"
}
if [ "$PHASE" = start ]; then
  rm -rf "$S"; mkdir -p "$S"
  { nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    nproc | sed 's/^/cpus /'; } | tee "$S/env.txt"
  export -f run; export S ROUNDS
  setsid nohup bash -c 'run 0 without --ab-precompile off' >/dev/null 2>&1 < /dev/null &
  run 1 with
  echo "with: $(cat "$S/with.done")"
  grep -h "abbench: round\|precompiled" "$S/with.log" "$S"/with/r1_*/*/run.log
  exit 0
fi
while [ ! -f "$S/without.done" ]; do sleep 5; done
cp "$S/env.txt" "$OUT/env.txt"
for name in with without; do
  echo "== $name: $(cat "$S/$name.done")"
  grep -h "abbench: round\|precompiled\|passed\|failed" "$S/$name.log" "$S"/$name/r1_*/*/run.log
done | tee "$OUT/progress.txt"
python3 benchmarks/figures/startup_figures.py with="$S/with" without="$S/without" | tee "$OUT/figures.txt"
for name in with without; do python3 -m pytest_abbench.cli summary "$S/$name" > "$OUT/report_$name.txt" 2>&1; done
tar czf "$OUT/s.tgz" --exclude=cache --exclude=ir -C /tmp precompile-ab
