#!/usr/bin/env bash
# `pytest campaigns/topk.py --ab-rounds 6` twice, each on a new root, both with one fresh persistent kernel cache
# (--ab-kernel-cache): the first run compiles (cold), the second should load every kernel (warm).  Prints both wall
# times, their ratio, each run's compile-cache line (kernels loaded / compiled per side) and both reports' verdicts.
# The cold run (about 7 minutes on an H200 before the cache) is started in its own process session, so it may
# outlive a 10-minute device call: call the script again on the same warm machine until it prints the figures.
#   bash benchmarks/gpu_kernel_cache.sh
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
ROUNDS=${ROUNDS:-6}
WAIT_S=${WAIT_S:-540}  # how long one call waits for the cold run before saying "call again"
S=/tmp/kernel-cache-ab
export ABBENCH_KERNEL_CACHE=$S/kernels
run() {  # run NAME: one campaign into $S/NAME; "rc R wall W" into $S/NAME.done
  local name=$1
  local start; start=$(date +%s.%N)
  python3 -m pytest -p pytest_abbench.plugin campaigns/topk.py --ab-rounds "$ROUNDS" --ab-root "$S/$name" \
    --cell-timeout 1500 -p no:cacheprovider >"$S/$name.log" 2>&1
  local rc=$?
  echo "rc $rc wall $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')" > "$S/$name.done"
}
if [ ! -d "$S" ]; then
  mkdir -p "$S"
  { nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    nproc | sed 's/^/cpus /'; } | tee "$S/env.txt"
  export -f run; export S ROUNDS
  setsid nohup bash -c 'run cold' >/dev/null 2>&1 < /dev/null &
fi
waited=0
while [ ! -f "$S/cold.done" ]; do
  if [ "$waited" -ge "$WAIT_S" ]; then
    echo "the cold run is still going ($(grep -c . "$S/cold.log" 2>/dev/null) log lines): call the script again"
    grep -h "abbench: round" "$S/cold.log" 2>/dev/null | tail -2
    exit 0
  fi
  sleep 5; waited=$((waited + 5))
done
[ -f "$S/warm.done" ] || run warm
cp "$S/env.txt" "$OUT/env.txt"
{
  for name in cold warm; do
    echo "== $name: $(cat "$S/$name.done")"
    grep -h "abbench: round\|^time:\|abbench: exit" "$S/$name.log"
    grep -h "precompiled" "$S"/$name/r1_*/*/run.log
  done
  cold=$(awk '{print $4}' "$S/cold.done"); warm=$(awk '{print $4}' "$S/warm.done")
  awk -v c="$cold" -v w="$warm" 'BEGIN { printf "wall: cold %.1f s, warm %.1f s, warm/cold %.3f (%.1fx faster)\n", c, w, w / c, c / w }'
  for name in cold warm; do
    echo "== $name verdicts"
    grep -h "^== \|geomean delta" "$S/$name.log"
  done
  echo "== kernel cache folders"
  du -sh "$S"/kernels/* 2>/dev/null
} | tee "$OUT/kernel_cache.txt"
tar czf "$OUT/s.tgz" --exclude=ir -C /tmp kernel-cache-ab/cold kernel-cache-ab/warm kernel-cache-ab/cold.log \
  kernel-cache-ab/warm.log
