#!/usr/bin/env bash
# Time to verdict on a 2-GPU machine, side by side in one run (one campaign per GPU at a time):
# GPU 0: topk at 6 rounds with the fork server and parallel precompile (what `pytest campaigns/topk.py
#        --ab-rounds 6` does now);
# GPU 1: calibration_aa at 6 rounds as it runs now (fork, precompile), then as it ran before
#        (--ab-spawn exec --ab-precompile off).
# Run from the repository root; 6 files come back under $OUT (the roots, without Triton caches, in s.tgz).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
ROUNDS=${ROUNDS:-6}
{ nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  nproc | sed 's/^/cpus /'; } | tee "$OUT/env.txt"
mkdir -p /tmp/s
run() {  # run GPU NAME LIMIT_S CAMPAIGN [pytest args]
  local gpu=$1 name=$2 limit=$3 campaign=$4; shift 4
  local start=$(date +%s.%N)
  CUDA_VISIBLE_DEVICES=$gpu timeout "$limit" python3 -m pytest -p pytest_abbench.plugin "$campaign" \
    --ab-rounds "$ROUNDS" --ab-root "/tmp/s/$name" --cell-timeout 600 -p no:cacheprovider "$@" >"/tmp/s/$name.log" 2>&1
  local rc=$?
  echo "$name (GPU $gpu): rc $rc in $(python3 -c "import time; print(f'{time.time() - $start:.1f}')") s" | tee -a "$OUT/env.txt"
}
( run 0 topk_now "${TOPK_LIMIT:-360}" campaigns/topk.py ) &
( run 1 aa_now 240 campaigns/calibration_aa.py --ab-allow-no-ir-diff
  run 1 aa_before 240 campaigns/calibration_aa.py --ab-allow-no-ir-diff --ab-spawn exec --ab-precompile off
  if [ -n "${THEN_GPU1:-}" ]; then CUDA_VISIBLE_DEVICES=1 bash -c "$THEN_GPU1"; fi ) &  # e.g. another driver
wait
# A run cut short by its limit has no report.json yet: summary writes it (and gates like the live run).
for r in aa_now aa_before topk_now; do
  echo "=== $r"; python3 -m pytest_abbench.cli summary "/tmp/s/$r" 2>&1
done > "$OUT/reports.txt"
python3 benchmarks/figures/startup_figures.py now=/tmp/s/aa_now before=/tmp/s/aa_before | tee "$OUT/aa_figures.txt"
python3 benchmarks/figures/startup_figures.py topk_now=/tmp/s/topk_now | tee "$OUT/topk_figures.txt"
grep -h "abbench: round\|^time:\|precompiled\|passed\|failed" /tmp/s/*.log /tmp/s/*/r1_*/*/run.log > "$OUT/progress.txt" 2>&1
tar czf "$OUT/s.tgz" --exclude=cache --exclude=ir -C /tmp s
