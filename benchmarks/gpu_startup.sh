#!/usr/bin/env bash
# Time to verdict on a 2-GPU machine, before and after, side by side in one run (one campaign per GPU):
# GPU 0: calibration_aa at 6 rounds with --ab-spawn fork, then topk at 6 rounds with --ab-precompile on;
# GPU 1: the same campaigns with --ab-spawn exec and --ab-precompile off.  Run from the repository root;
# figures and roots (without Triton caches) under $OUT.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
ROUNDS=${ROUNDS:-6}
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/env.txt"
nproc | sed 's/^/cpus /' | tee -a "$OUT/env.txt"
mkdir -p /tmp/s
run() {  # run GPU NAME LIMIT_S CAMPAIGN [pytest args]
  local gpu=$1 name=$2 limit=$3 campaign=$4; shift 4
  local start=$(date +%s.%N)
  CUDA_VISIBLE_DEVICES=$gpu timeout "$limit" python3 -m pytest -p pytest_abbench.plugin "$campaign" \
    --ab-rounds "$ROUNDS" --ab-root "/tmp/s/$name" --cell-timeout 600 -p no:cacheprovider "$@" >"/tmp/s/$name.log" 2>&1
  local rc=$?
  echo "$name (GPU $gpu): rc $rc in $(python3 -c "import time; print(f'{time.time() - $start:.1f}')") s" | tee -a "$OUT/env.txt"
}
( run 0 aa_fork 240 campaigns/calibration_aa.py --ab-allow-no-ir-diff --ab-spawn fork --ab-precompile off
  run 0 topk_precompile "${TOPK_LIMIT:-330}" campaigns/topk.py --ab-spawn fork --ab-precompile on ) &
( run 1 aa_exec 240 campaigns/calibration_aa.py --ab-allow-no-ir-diff --ab-spawn exec --ab-precompile off
  run 1 topk_serial_compile "${TOPK_LIMIT:-330}" campaigns/topk.py --ab-spawn fork --ab-precompile off ) &
wait
# A run cut short by its limit has no report.json yet: summary writes it (and gates like the live run).
for r in aa_fork aa_exec topk_precompile topk_serial_compile; do
  python3 -m pytest_abbench.cli summary "/tmp/s/$r" > "$OUT/report_$r.txt" 2>&1
done
python3 benchmarks/startup_figures.py fork=/tmp/s/aa_fork exec=/tmp/s/aa_exec | tee "$OUT/aa_figures.txt"
python3 benchmarks/startup_figures.py precompile=/tmp/s/topk_precompile serial_compile=/tmp/s/topk_serial_compile \
  | tee "$OUT/topk_figures.txt"
grep -h "abbench: round\|^time:\|precompiled" /tmp/s/*.log /tmp/s/topk_precompile/r1_A/topk/run.log > "$OUT/progress.txt" 2>&1
cp /tmp/s/*.log "$OUT/"
tar czf "$OUT/s.tgz" --exclude=cache --exclude=ir -C /tmp s
