#!/usr/bin/env bash
# What a second worker's CPU load does to one worker's cells, on a host with one GPU: the campaign alone
# (LOAD=none), or while IR-only sessions of the same campaigns compile for the GPU's target on the host's
# CPUs without touching the GPU, one after another until the campaign ends (LOAD=compile): the compile half
# of what a second xdist worker does (more than half of its time in the 2 x H200 runs, docs/explanation/scale.md).
# Both runs give each session ABBENCH_COMPILE_JOBS=$JOBS compile processes (default: half the cores, a
# worker's share with -n 2) and a fresh HOME (FlagGems keeps generated code there), so neither run finds
# the other's compiled code.  benchmarks/scale/parts_vs.py compares the two roots part by part.
# Run on the GPU machine from the repository root; LOAD=none and LOAD=compile may be two calls (ROOT keeps both).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
CAMPAIGNS=${CAMPAIGNS:-"campaigns/flaggems.py campaigns/router_gemm.py campaigns/calibration_aa.py campaigns/calibration_planted.py"}
ROUNDS=${ROUNDS:-3}
LEVEL=${LEVEL:-core}
LOAD=${LOAD:-none}
ROOT=${ROOT:-/tmp/abbench-contention}
JOBS=${JOBS:-$(( $(nproc) / 2 ))}
export ABBENCH_COMPILE_JOBS=$JOBS
rm -rf "$ROOT/$LOAD" "$ROOT/load-"* "$ROOT/load.log" && mkdir -p "$ROOT"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee "$OUT/env-$LOAD.txt"
echo "cores $(nproc), compile jobs per session $JOBS" | tee -a "$OUT/env-$LOAD.txt"

load_loop() {  # IR-only sessions, each into a fresh root and HOME, until killed
  local i=0
  while :; do
    i=$((i + 1))
    # shellcheck disable=SC2086  # CAMPAIGNS is a list of files
    HOME=$(mktemp -d) python3 -m pytest -p pytest_abbench.plugin $CAMPAIGNS --ab-backend interpreter --ab-ir-only \
      --ab-ir-target cuda:90 --ab-level "$LEVEL" --ab-root "$ROOT/load-$i" -p no:xdist -p no:cacheprovider -q \
      > "$ROOT/load-$i.txt" 2>&1
    rc=$?
    echo "load session $i: rc $rc at $(date +%s)" >> "$ROOT/load.log"
    [ "$rc" = 0 ] || { echo "load session $i failed: no more load ($ROOT/load-$i.txt)" >> "$ROOT/load.log"; return; }
  done
}

loader=
if [ "$LOAD" = compile ]; then
  load_loop & loader=$!
  sleep 5  # the load's imports are done: the campaign starts into a compiling host
fi
start=$(date +%s.%N)
# shellcheck disable=SC2086
HOME=$(mktemp -d) python3 -m pytest -p pytest_abbench.plugin $CAMPAIGNS --ab-rounds "$ROUNDS" --ab-level "$LEVEL" \
  --ab-root "$ROOT/$LOAD" --cell-timeout 300 -p no:xdist -p no:cacheprovider -rs 2>&1 | tee "$OUT/run-$LOAD.txt"
wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
if [ -n "$loader" ]; then
  pkill -P "$loader"; kill "$loader" 2>/dev/null; wait "$loader" 2>/dev/null
  tee -a "$OUT/run-$LOAD.txt" < "$ROOT/load.log"  # on stdout too: a device call brings back few files
fi
echo "$LOAD wall time: $wall s" | tee -a "$OUT/run-$LOAD.txt"
python3 benchmarks/figures/cell_timing.py "$ROOT/$LOAD" > "$OUT/cell_timing-$LOAD.txt"
grep -h "precompiled" "$ROOT/$LOAD"/r1_*/*/run.log > "$OUT/precompile-$LOAD.txt" 2>/dev/null
if [ -d "$ROOT/none" ] && [ -d "$ROOT/compile" ]; then
  python3 benchmarks/scale/parts_vs.py "$ROOT/none" "$ROOT/compile" | tee "$OUT/parts_vs.txt"
fi
