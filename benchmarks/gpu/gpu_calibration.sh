#!/usr/bin/env bash
# The H200 calibration run: A/A (graph timer, then direct timer) and planted effects at 6 rounds,
# the planted ground truth, and the figures.  Run on the GPU machine from the repository root.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
ROUNDS=${ROUNDS:-6}
nvidia-smi --query-gpu=name,driver_version,uuid,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/env.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/env.txt"
date -u | tee -a "$OUT/env.txt"
run() {  # run NAME CAMPAIGN [pytest args]
  local name=$1 campaign=$2; shift 2
  local start=$(date +%s)
  python3 -m pytest -p pytest_abbench.plugin "$campaign" --ab-rounds "$ROUNDS" --ab-allow-no-ir-diff \
    --ab-root "/tmp/cal/$name" --cell-timeout 300 -p no:cacheprovider -q "$@" >"/tmp/cal/$name.log" 2>&1
  echo "$name: rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/env.txt"
}
mkdir -p /tmp/cal
run aa_graph campaigns/calibration_aa.py
run planted campaigns/calibration_planted.py
run aa_direct campaigns/calibration_aa.py --ab-timer direct
python3 benchmarks/probes/planted_truth.py --pairs "${PAIRS:-30}" >/tmp/cal/truth.json 2>/tmp/cal/truth.log
python3 benchmarks/figures/calibration_figures.py --aa /tmp/cal/aa_graph --aa /tmp/cal/aa_direct \
  --planted /tmp/cal/planted --truth /tmp/cal/truth.json | tee "$OUT/figures.txt"
python3 benchmarks/figures/cell_timing.py /tmp/cal/aa_graph > "$OUT/cell_timing_aa.txt" 2>&1
cat /tmp/cal/*.log > "$OUT/logs.txt"
tar czf "$OUT/cal.tgz" --exclude=cache --exclude=ir -C /tmp cal
