#!/usr/bin/env bash
# The H200 proof run: all four campaigns at core level, 2 rounds, default timer.
# Run on the GPU machine from the repository root; writes under $OUT (default ./gpu-out).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
ROOT=${ROOT:-/tmp/abbench-gpu}
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv | tee "$OUT/env.txt"
python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)" | tee -a "$OUT/env.txt"
python3 -m pytest -p pytest_abbench.plugin tests/test_capture_gpu.py -p no:cacheprovider -q 2>&1 | tee "$OUT/capture_failure.txt"
start=$(date +%s)
python3 -m pytest -p pytest_abbench.plugin campaigns --ab-rounds "${ROUNDS:-2}" --ab-level core --ab-root "$ROOT" \
  --cell-timeout 300 -p no:cacheprovider -v -rs "$@" 2>&1 | tee "$OUT/pytest.txt"
echo "campaign wall time: $(( $(date +%s) - start )) s" | tee -a "$OUT/pytest.txt"
python3 benchmarks/figures/cell_timing.py "$ROOT" | tee "$OUT/cell_timing.txt"
cp "$ROOT/status.tsv" "$ROOT/report.json" "$OUT/" 2>/dev/null
tar czf "$OUT/root.tgz" --exclude=cache -C "$(dirname "$ROOT")" "$(basename "$ROOT")"
