#!/usr/bin/env bash
# Two GPUs of one host: the same campaigns serially (one GPU) and with -n 2 (one xdist worker per GPU,
# the most expensive op handed out first), then benchmarks/scale/scale_check.py compares the two roots: wall
# times and speed-up, each worker's busy time, the GPU UUID(s) of every op (one GPU per op, none shared
# between workers) and whether every shape's verdict is the same.
# Run on the GPU machine from the repository root; writes under $OUT (default ./gpu-out), roots under $ROOT.
# The IR gate stays on (the product's behaviour): an op whose switch changes no TTGIR runs round 1 only, in
# both runs, so it weighs less than its shape count says (both calibration campaigns: their switches change
# no generated code; benchmarks/gpu/gpu_calibration.sh runs them every round with --ab-allow-no-ir-diff).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
# ONLY=serial or ONLY=parallel runs one half (a machine whose calls are limited in time); roots and wall
# times stay under $ROOT, so the second half finds the first's.
CAMPAIGNS=${CAMPAIGNS:-"campaigns/mm.py campaigns/router_gemm.py campaigns/topk.py campaigns/replication_pad3d.py campaigns/calibration_aa.py campaigns/calibration_planted.py"}
ONLY=${ONLY:-both}
ROUNDS=${ROUNDS:-2}
GPUS=${GPUS:-0,1}
ROOT=${ROOT:-/tmp/abbench-scale}
python3 -c "import xdist" || { echo "gpu_scale.sh: pytest-xdist is not importable (carry its wheel in .whl/)"; exit 2; }
[ "$ONLY" = parallel ] || rm -rf "$ROOT/serial"
[ "$ONLY" = serial ] || rm -rf "$ROOT/parallel"
mkdir -p "$ROOT"
nvidia-smi --query-gpu=index,name,driver_version,uuid --format=csv | tee "$OUT/env.txt"
python3 -c "import torch, triton, xdist; print('torch', torch.__version__, 'triton', triton.__version__, 'xdist', xdist.__version__)" | tee -a "$OUT/env.txt"

run() {  # run NAME PYTEST-ARGS...: one campaign session into $ROOT/NAME; its wall time into $OUT/NAME.wall
  local name=$1 start
  shift
  start=$(date +%s.%N)
  # shellcheck disable=SC2086  # CAMPAIGNS is a list of files
  python3 -m pytest -p pytest_abbench.plugin $CAMPAIGNS --ab-rounds "$ROUNDS" --ab-level core \
    --ab-root "$ROOT/$name" --cell-timeout 300 -p no:cacheprovider -rs "$@" 2>&1 | tee "$OUT/$name.txt"
  awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f\n", e - s }' > "$ROOT/$name.wall"
  echo "$name wall time: $(cat "$ROOT/$name.wall") s" | tee -a "$OUT/$name.txt"
}

[ "$ONLY" = parallel ] || run serial -p no:xdist --ab-gpus "${GPUS%%,*}"
[ "$ONLY" = serial ] && exit 0
# The serial root is an earlier root of the same campaign: its cell times order the ops (--ab-costs-from).
costs=()
[ -f "$ROOT/serial/status.tsv" ] && [ "${COSTS:-serial}" = serial ] && costs=(--ab-costs-from "$ROOT/serial")
run parallel -n 2 --ab-gpus "$GPUS" "${costs[@]}"
python3 benchmarks/scale/scale_check.py "$ROOT/serial" "$ROOT/parallel" \
  --wall-serial "$(cat "$ROOT/serial.wall")" --wall-parallel "$(cat "$ROOT/parallel.wall")" | tee "$OUT/scale_check.txt"
# Which parts of the cells grew with two workers (start-up, inputs, compile, ... exit): serial as A, parallel as B.
python3 benchmarks/scale/parts_vs.py "$ROOT/serial" "$ROOT/parallel" | tee -a "$OUT/scale_check.txt"
# At most 8 files come back from a device call: the per-root details travel in one archive.
details="$ROOT/details"
rm -rf "$details" && mkdir -p "$details"
for name in serial parallel; do
  python3 benchmarks/figures/cell_timing.py "$ROOT/$name" > "$details/cell_timing_$name.txt"
  cp "$ROOT/$name/status.tsv" "$details/status_$name.tsv"
  cp "$ROOT/$name/report.json" "$details/report_$name.json" 2>/dev/null
done
cp "$ROOT/parallel/workers.json" "$details/" 2>/dev/null
cat "$details/cell_timing_parallel.txt"
tar czf "$OUT/roots.tgz" --exclude=cache -C "$ROOT" serial parallel details
