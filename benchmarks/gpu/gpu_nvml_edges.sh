#!/usr/bin/env bash
# What reading NVML at the timed windows' edges costs, on one GPU: the three-arm benchmark
# (benchmarks/regimes/nvml_sampling_cost.py), then the A/A campaign one round at a time with the edge reads off or on
# (--ab-gpu-state, ORDER), each shape's A and B medians off against on, and the report's verdicts; then the
# server-imports benchmark.  PARTS picks among cost, aa and imports.
#   bash benchmarks/gpu/gpu_nvml_edges.sh
#   PARTS=aa bash benchmarks/gpu/gpu_nvml_edges.sh
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
PAIRS=${PAIRS:-12}
ORDER=${ORDER:-off on on off}
PARTS=${PARTS:-cost aa imports}
S=/tmp/nvml-edges; rm -rf "$S"; mkdir -p "$S"
case " $PARTS " in *" cost "*)
  python3 benchmarks/regimes/nvml_sampling_cost.py --pairs "$PAIRS" 2>&1 | tee "$OUT/nvml_sampling_cost.txt";; esac
# The A/A rounds alternate off, on, on, off in one root (--ab-resume adds a round): every round replays the
# autotune choice round 1 side A recorded, so the medians differ only by the reads and the rounds' noise.
ROOT=$S/aa
n=0
for state in $ORDER; do
  n=$((n + 1))
  if [ "$n" = 1 ]; then where=(--ab-root "$ROOT"); else where=(--ab-resume "$ROOT"); fi
  start=$(date +%s.%N)
  python3 -m pytest -p pytest_abbench.plugin campaigns/calibration_aa.py --ab-rounds "$n" "${where[@]}" \
    --ab-allow-no-ir-diff --ab-gpu-state "$state" --cell-timeout 600 -p no:cacheprovider > "$S/round$n.log" 2>&1
  echo "== round $n, gpu-state $state: rc $? wall $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s"
  echo "$state" > "$S/round$n.state"
done 2>&1 | tee "$OUT/aa_off_on.txt"
{
  grep -h "^== \|geomean delta\|GPU state" "$S/round$(echo $ORDER | wc -w).log"
  python3 - "$ROOT" "$S" <<'PY'
import json, statistics, sys
from pathlib import Path
root, states = Path(sys.argv[1]), Path(sys.argv[2])
samples = {}  # (shape, side, state) -> every sample of the rounds run with that state
for path in sorted(root.glob("r*_[AB]/aa/results.jsonl")):
    rnd, side = path.parts[-3][1:].split("_")
    state = (states / f"round{rnd}.state").read_text().strip()
    for line in path.read_text().splitlines():
        r = json.loads(line)
        samples.setdefault((r["shape"], side, state), []).extend(r.get("samples_ms") or [])
print(f"{'shape':<30} {'side':<4} {'off ms':>10} {'on ms':>10} {'on/off':>8}")
worst = 0.0
for shape, side in sorted({(k[0], k[1]) for k in samples}):
    off, on = (statistics.median(samples[(shape, side, s)]) for s in ("off", "on"))
    worst = max(worst, abs(on / off - 1) * 100)
    print(f"{shape:<30} {side:<4} {off:>10.5f} {on:>10.5f} {(on / off - 1) * 100:>+7.2f}%")
print(f"largest median difference, rounds with the edge reads on against off: {worst:.2f}%")
PY
} 2>&1 | tee -a "$OUT/aa_off_on.txt"
cp "$ROOT/report.md" "$OUT/aa_report.md"
case " $PARTS " in *" imports "*)
  timeout 120 python3 benchmarks/probes/server_imports.py 2>&1 | tee "$OUT/server_imports.txt";; esac
