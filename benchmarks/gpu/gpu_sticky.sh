#!/usr/bin/env bash
# The H200 check of sticky CUDA errors and out-of-memory shapes (benchmarks/gpu/campaigns/sticky.py), 1 round.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
rm -rf /tmp/sticky
python3 -m pytest -p pytest_abbench.plugin benchmarks/gpu/campaigns/sticky.py --ab-rounds 1 --ab-root /tmp/sticky \
  --cell-timeout 120 -p no:cacheprovider -q -rA > "$OUT/sticky_pytest.txt" 2>&1
echo "rc $?" >> "$OUT/sticky_pytest.txt"
for cell in /tmp/sticky/r1_*/*; do
  echo "== $cell"; python3 -c "import json,sys; [print(r['shape'], r['status'], r.get('median_ms'), (r.get('error') or '')[:90]) for r in map(json.loads, open(sys.argv[1]))]" "$cell/results.jsonl"
  grep -E "fresh process|sticky|out of memory" "$cell/run.log" | cut -c1-160
done > "$OUT/sticky_cells.txt" 2>&1
