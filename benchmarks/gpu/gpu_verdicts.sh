#!/usr/bin/env bash
# The H200 check of the verdict rule and layout shift, on a 2-GPU machine (one campaign per GPU at a time):
# GPU 0: calibration_aa at 6 rounds (default timer); GPU 1: calibration_planted (cells shift their layout), then
# the in-process truth, with one set of buffers and with fresh shifted buffers per pair.  (A planted run with the
# layout fixed went with --ab-layout-shift: docs/verdicts.md keeps that measurement.)  Run from the repository root; writes under $OUT.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
ROUNDS=${ROUNDS:-6}
nvidia-smi --query-gpu=index,name,driver_version,uuid,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/env.txt"
mkdir -p /tmp/v
run() {  # run GPU NAME CAMPAIGN [pytest args]
  local gpu=$1 name=$2 campaign=$3; shift 3
  local start=$(date +%s)
  CUDA_VISIBLE_DEVICES=$gpu python3 -m pytest -p pytest_abbench.plugin "$campaign" --ab-rounds "$ROUNDS" \
    --ab-allow-no-ir-diff --ab-root "/tmp/v/$name" --cell-timeout 300 -p no:cacheprovider -q "$@" \
    >"/tmp/v/$name.log" 2>&1
  echo "$name (GPU $gpu): rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/env.txt"
}
truth() {  # truth NAME [planted_truth args]
  local name=$1; shift
  local start=$(date +%s)
  CUDA_VISIBLE_DEVICES=1 python3 benchmarks/probes/planted_truth.py --pairs "${PAIRS:-30}" "$@" >"/tmp/v/$name.json" \
    2>"/tmp/v/$name.log"
  echo "$name (GPU 1): rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/env.txt"
}
( run 0 aa campaigns/calibration_aa.py ) &
( run 1 planted_shift campaigns/calibration_planted.py; truth truth_one_layout; truth truth_shifted --layout-shift ) &
wait
python3 benchmarks/figures/calibration_figures.py --aa /tmp/v/aa --planted /tmp/v/planted_shift \
  --truth /tmp/v/truth_one_layout.json --truth /tmp/v/truth_shifted.json | tee "$OUT/figures.txt"
for r in aa planted_shift; do
  python3 -m pytest_abbench.cli summary "/tmp/v/$r" > "$OUT/report_$r.txt" 2>&1
done
cp /tmp/v/*.json /tmp/v/*.log "$OUT/" 2>/dev/null
tar czf "$OUT/v.tgz" --exclude=cache --exclude=ir -C /tmp v
