#!/usr/bin/env bash
# campaigns/liger.py with the defaults on a fresh GPU machine, three times in one call: cold (the kernel cache
# starts empty), then again on a new root (the kernel cache warm), then a third new root on the warm cache with
# --ab-autotune-from the cold root (round 1 side A carries its autotune configs instead of tuning); then
# benchmarks/figures/time_to_verdict.py prints each pair's wall times, the cells' shares, the ratios (against 491.6 s, the
# cold run before these changes, with --before) and whether both runs reached the same IR-gate decisions and
# verdicts.  Under $OUT: liger_cold_warm.txt and each run's log, report.md and cell timing.  RUNS="cold warm"
# leaves the third out:
#   LIMIT=240 bash benchmarks/gpu/gpu_liger_cold_warm.sh
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
log=$OUT/liger_cold_warm.txt
python3 -c "import importlib.metadata as m, torch, triton; print('liger-kernel', m.version('liger-kernel'), \
'torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" | tee "$log"
rm -rf /tmp/liger-cw; mkdir -p /tmp/liger-cw
declare -A wall
for run in ${RUNS:-cold warm carry}; do
  start=$(date +%s.%N)
  carry=""
  [ "$run" = carry ] && carry="--ab-autotune-from /tmp/liger-cw/cold"
  timeout "${LIMIT:-240}" python3 -m pytest -p pytest_abbench.plugin campaigns/liger.py --ab-root "/tmp/liger-cw/$run" \
    --cell-timeout 300 -p no:cacheprovider -rs $carry ${EXTRA:-} > "$OUT/liger_$run.log" 2>&1
  rc=$?
  wall[$run]=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  echo "=== $run: rc $rc wall ${wall[$run]} s" | tee -a "$log"
  grep -h "^time:\|abbench: exit\|autotune:" "/tmp/liger-cw/$run/report.md" "$OUT/liger_$run.log" 2>/dev/null | tee -a "$log"
  cp "/tmp/liger-cw/$run/report.md" "$OUT/liger_${run}_report.md" 2>/dev/null
  python3 benchmarks/figures/cell_timing.py "/tmp/liger-cw/$run" > "$OUT/liger_${run}_cell_timing.txt" 2>&1
  grep -h "precompiled\|pooled with" /tmp/liger-cw/$run/r1_A/*/run.log >> "$OUT/liger_${run}_cell_timing.txt" 2>/dev/null
done
python3 benchmarks/figures/time_to_verdict.py /tmp/liger-cw/cold "${wall[cold]}" /tmp/liger-cw/warm "${wall[warm]}" \
  --before 491.6 | tee -a "$log"
if [ -n "${wall[carry]:-}" ]; then
  echo "=== cold against warm with --ab-autotune-from the cold root" | tee -a "$log"
  python3 benchmarks/figures/time_to_verdict.py /tmp/liger-cw/cold "${wall[cold]}" /tmp/liger-cw/carry "${wall[carry]}" \
    | tee -a "$log"
  grep -h "carried from" /tmp/liger-cw/carry/r1_A/*/run.log | head -4 | tee -a "$log"
fi
