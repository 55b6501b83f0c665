#!/usr/bin/env bash
# What reading NVML at the timed windows' edges costs, on one GPU: the three-arm benchmark
# (benchmarks/nvml_sampling_cost.py), then the A/A campaign at ROUNDS rounds with the edge reads off and on
# (--ab-gpu-state), each shape's A and B medians side by side, and both reports' verdicts.
#   bash benchmarks/gpu_nvml_edges.sh
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
ROUNDS=${ROUNDS:-3}
PAIRS=${PAIRS:-12}
S=/tmp/nvml-edges; rm -rf "$S"; mkdir -p "$S"
python3 benchmarks/nvml_sampling_cost.py --pairs "$PAIRS" 2>&1 | tee "$OUT/nvml_sampling_cost.txt"
for state in off on; do
  start=$(date +%s.%N)
  python3 -m pytest -p pytest_abbench.plugin campaigns/calibration_aa.py --ab-rounds "$ROUNDS" --ab-allow-no-ir-diff \
    --ab-gpu-state "$state" --ab-root "$S/$state" --cell-timeout 600 -p no:cacheprovider > "$S/$state.log" 2>&1
  echo "== gpu-state $state: rc $? wall $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s"
done | tee "$OUT/aa_off_on.txt"
{
  for state in off on; do echo "== $state"; grep -h "^== \|geomean delta\|GPU state" "$S/$state.log"; done
  python3 - "$S/off/report.json" "$S/on/report.json" <<'PY'
import json, sys
off, on = (json.load(open(p)) for p in sys.argv[1:3])
def shapes(report):
    return {(o["op"], s["shape"]): s for o in report["ops"] for s in o["shapes"] if s.get("a_ms") and s.get("b_ms")}
a, b = shapes(off), shapes(on)
print(f"{'shape':<34} {'side':<4} {'off ms':>10} {'on ms':>10} {'on/off':>8}   verdict off / on")
worst = 0.0
for key in sorted(a.keys() & b.keys()):
    for side in ("a_ms", "b_ms"):
        d = (b[key][side] / a[key][side] - 1) * 100
        worst = max(worst, abs(d))
        print(f"{key[0] + ' ' + key[1]:<34} {side[0].upper():<4} {a[key][side]:>10.5f} {b[key][side]:>10.5f} "
              f"{d:>+7.2f}%   {a[key]['verdict']} / {b[key]['verdict']}")
print(f"largest median difference on/off: {worst:.2f}% over {len(a.keys() & b.keys())} shapes")
PY
} 2>&1 | tee -a "$OUT/aa_off_on.txt"
timeout 120 python3 benchmarks/server_imports.py 2>&1 | tee "$OUT/server_imports.txt"
cp "$S/on/report.md" "$OUT/aa_on_report.md"
