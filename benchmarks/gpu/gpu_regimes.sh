#!/usr/bin/env bash
# Timing regimes on the H200: each campaign under --ab-regime both (burst and steady in every cell), printed side by
# side per op, and an A/A check that burst and steady give no false direction and the same verdicts.
#   PART=mm  benchmarks/gpu/gpu_regimes.sh   # campaigns/mm.py, core, DISABLE_MMA_V3=1 on side B
#   PART=ln  benchmarks/gpu/gpu_regimes.sh   # campaigns/layer_norm.py, core: ATen (A) against a Triton kernel (B)
#   PART=aa  benchmarks/gpu/gpu_regimes.sh   # campaigns/calibration_aa.py, A/A, every round run
# REGIME (default both) and EXTRA (more pytest arguments, split on spaces) change the session, e.g.
#   PART=aa REGIME=steady ROUNDS=6 EXTRA="--ab-direct-rep 100" bash benchmarks/gpu/gpu_regimes.sh
# Back under $OUT: regimes_<part>_run.txt (the session), regimes_<part>_report.md, regimes_<part>.txt (side by side,
# and for aa the check, whose rc is in the last line) and regimes_<part>_nvml.txt (nvidia-smi's view during the run,
# to hold the report's clocks and power against).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
part=${PART:-mm}
root=/tmp/regimes/$part
rm -rf "$root"
case $part in
  mm) args=(campaigns/mm.py --ab-level core) ;;
  ln) args=(campaigns/layer_norm.py --ab-level core) ;;
  aa) args=(campaigns/calibration_aa.py --ab-allow-no-ir-diff) ;;
  *) echo "PART must be mm, ln or aa, got $part" >&2; exit 2 ;;
esac
python3 -c "import pynvml, torch; print('nvidia-ml-py', pynvml.__version__ if hasattr(pynvml, '__version__') else '?', \
'torch', torch.__version__, torch.cuda.get_device_name())" | tee "$OUT/regimes_${part}_env.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv -lms 500 \
  >"$OUT/regimes_${part}_nvml.txt" 2>&1 &
smi=$!
start=$(date +%s)
read -ra extra <<<"${EXTRA:-}"
timeout "${LIMIT:-540}" python3 -m pytest -p pytest_abbench.plugin "${args[@]}" --ab-regime "${REGIME:-both}" \
  --ab-rounds "${ROUNDS:-3}" --ab-root "$root" --cell-timeout 300 -p no:cacheprovider -rs "${extra[@]}" \
  >"$OUT/regimes_${part}_run.txt" 2>&1
echo "run: rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/regimes_${part}_env.txt"
kill "$smi" 2>/dev/null
cp "$root/report.md" "$OUT/regimes_${part}_report.md" 2>/dev/null
check=()
[ "$part" = aa ] && check=(--aa)
python3 benchmarks/figures/regimes_side_by_side.py "${check[@]}" "$root" >"$OUT/regimes_${part}.txt" 2>&1
echo "side by side: rc $?" >>"$OUT/regimes_${part}.txt"
cat "$OUT/regimes_${part}.txt"
