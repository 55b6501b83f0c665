#!/usr/bin/env bash
# The H200 run of pytest-benchmark tests as campaigns: examples/pytest_benchmark/test_kernels.py (a vector add and
# an fp16 tl.dot matmul, parametrized) under DISABLE_MMA_V3=1 at the defaults, once with pytest-benchmark kept out
# (-p no:benchmark: the GPU image carries pytest-benchmark 5.2.3) and once with 5.3.1 (its wheel, and py-cpuinfo's,
# carried in .whl/); then the same file as pytest-benchmark itself runs it, for comparison.
# Back under $OUT: pb_env.txt (versions, each step's rc and seconds), pb_runs.txt (every session's output),
# pb_reports.md (the report.md of each campaign).
set -uo pipefail
mkdir -p /tmp/whl-later && mv .whl/*.whl /tmp/whl-later/ 2>/dev/null  # installed after the first step
source "$(dirname "$0")/gpu_env.sh"
: >"$OUT/pb_runs.txt"; : >"$OUT/pb_reports.md"
step() {  # step NAME ARGS...
  local name=$1; shift
  local start; start=$(date +%s)
  echo "=== $name: pytest examples/pytest_benchmark $*" >>"$OUT/pb_runs.txt"
  timeout "${LIMIT:-240}" python3 -m pytest ${PLUGIN--p pytest_abbench.plugin} examples/pytest_benchmark "$@" \
    -p no:cacheprovider -rs >>"$OUT/pb_runs.txt" 2>&1
  echo "$name: rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/pb_env.txt"
}
python3 -c "import torch, triton, importlib.util as u; print('torch', torch.__version__, 'triton', triton.__version__, \
torch.cuda.get_device_name(), 'pytest_benchmark', u.find_spec('pytest_benchmark') is not None)" | tee "$OUT/pb_env.txt"
step without --ab-pytest-benchmark --ab-switch-env DISABLE_MMA_V3=1 --ab-root /tmp/pb/without -p no:benchmark
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/whl-later/*.whl
export PYTHONPATH=/tmp/site:$PYTHONPATH
python3 -c "import pytest_benchmark; print('pytest_benchmark', pytest_benchmark.__version__)" | tee -a "$OUT/pb_env.txt"
step with --ab-pytest-benchmark --ab-switch-env DISABLE_MMA_V3=1 --ab-root /tmp/pb/with
PLUGIN="" step pytest-benchmark-itself --benchmark-columns=median,stddev
for r in without with; do { echo "## $r"; cat "/tmp/pb/$r/report.md" 2>/dev/null; echo; } >>"$OUT/pb_reports.md"; done
