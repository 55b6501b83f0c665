#!/usr/bin/env bash
# `pytest campaigns/topk.py --ab-rounds 6` on new roots, all with one fresh persistent kernel cache
# (--ab-kernel-cache): the first run compiles (cold, COLD_ROUNDS rounds), then one warm run per regime in
# WARM_REGIMES should load every kernel.  Prints the wall times, each run's compile-cache line (kernels loaded /
# compiled per side), the reports' verdicts and, per warm run, where a cell's timing goes (settling, windows).
# The cold run (about 7 minutes on an H200 before the cache) is started in its own process session, so it may
# outlive a 10-minute device call: call the script again on the same warm machine until it prints the figures.
#   bash benchmarks/gpu/gpu_kernel_cache.sh
#   COLD_ROUNDS=1 WARM_REGIMES="burst steady" bash benchmarks/gpu/gpu_kernel_cache.sh
#   COLD_ROUNDS=1 WARM_REGIMES="steady steady:--ab-direct-rep=100" bash benchmarks/gpu/gpu_kernel_cache.sh
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
ROUNDS=${ROUNDS:-6}
COLD_ROUNDS=${COLD_ROUNDS:-$ROUNDS}
WARM_REGIMES=${WARM_REGIMES:-steady}
WAIT_S=${WAIT_S:-540}  # how long one call waits for the cold run before saying "call again"
S=/tmp/kernel-cache-ab
export ABBENCH_KERNEL_CACHE=$S/kernels
run() {  # run NAME ROUNDS [ARGS...]: one campaign into $S/NAME; "rc R wall W" into $S/NAME.done
  local name=$1 rounds=$2; shift 2
  local start; start=$(date +%s.%N)
  python3 -m pytest -p pytest_abbench.plugin campaigns/topk.py --ab-rounds "$rounds" --ab-root "$S/$name" \
    --cell-timeout 1500 -p no:cacheprovider "$@" >"$S/$name.log" 2>&1
  local rc=$?
  echo "rc $rc wall $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')" > "$S/$name.done"
}
if [ ! -d "$S" ]; then
  mkdir -p "$S"
  { nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    nproc | sed 's/^/cpus /'; } | tee "$S/env.txt"
  export -f run; export S COLD_ROUNDS
  setsid nohup bash -c 'run cold "$COLD_ROUNDS"' >/dev/null 2>&1 < /dev/null &
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
WARM=""
for entry in $WARM_REGIMES; do  # REGIME or REGIME:--option=value (one more pytest argument)
  regime=${entry%%:*}
  extra=(); [ "$entry" = "$regime" ] || extra=("${entry#*:}")
  name=warm-$(tr -cs 'A-Za-z0-9' '-' <<<"$entry" | sed 's/-*$//')
  [ -f "$S/$name.done" ] || run "$name" "$ROUNDS" --ab-regime "$regime" "${extra[@]}"
  WARM="$WARM $name"
done
cp "$S/env.txt" "$OUT/env.txt"
{
  for name in cold $WARM; do
    echo "== $name: $(cat "$S/$name.done")"
    grep -h "abbench: round\|^time:\|abbench: exit" "$S/$name.log"
    grep -h "precompiled" "$S"/$name/r1_*/*/run.log
  done
  for name in $WARM; do
    echo "== where $name's timing goes: per shape and regime, the settling or the waits before the windows, and the windows"
    python3 - "$S/$name" <<'PY'
import json, statistics, sys
from pathlib import Path
rows = {}
for path in sorted(Path(sys.argv[1]).glob("r*_*/topk/results.jsonl")):
    for line in path.read_text().splitlines():
        r = json.loads(line)
        w = r.get("windows") or []
        rows.setdefault((r["shape"], path.parts[-3][-1]), []).append(
            (sum(x["waited_s"] for x in w), sum(x["gpu_state"].get("window_s", 0) for x in w), w[0]["calls"] if w else 0))
for (shape, side), got in sorted(rows.items()):
    print(f"{shape:<28} side {side}: waited {statistics.median(g[0] for g in got):.2f} s, windows "
          f"{statistics.median(g[1] for g in got):.2f} s, {statistics.median(g[2] for g in got):.0f} calls a window")
PY
  done
  for name in cold $WARM; do
    echo "== $name verdicts"
    grep -h "^== \|geomean delta" "$S/$name.log"
  done
  echo "== kernel cache folders"
  du -sh "$S"/kernels/* 2>/dev/null
} | tee "$OUT/kernel_cache.txt"
tar czf "$OUT/s.tgz" --exclude=ir --exclude=kernels -C /tmp kernel-cache-ab
