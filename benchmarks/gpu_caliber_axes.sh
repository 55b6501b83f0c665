#!/usr/bin/env bash
# How far a number moves when only one caliber axis differs (H200): direct_repeat (rep 20 vs 100 ms, the
# A/A campaign's side A) and autotune record/record (the mm campaign's round 1 side A tuned twice, each
# session choosing its own configs).  Prints one table; see benchmarks/caliber_axes.py.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
common=(-p pytest_abbench.plugin -p no:cacheprovider -q --cell-timeout 200 --ab-rounds 1 -k "r1-A")
for rep in 100 20; do
  python3 -m pytest "${common[@]}" campaigns/calibration_aa.py --ab-timer direct --ab-direct-rep $rep \
    --ab-root /tmp/ax/rep$rep >"/tmp/ax-rep$rep.log" 2>&1; echo "direct rep $rep: rc $?"
done
for n in 1 2; do
  python3 -m pytest "${common[@]}" campaigns/mm.py --ab-root /tmp/ax/tune$n >"/tmp/ax-tune$n.log" 2>&1
  echo "mm tuning session $n: rc $?"
done
python3 benchmarks/caliber_axes.py /tmp/ax | tee "$OUT/caliber_axes.txt"
