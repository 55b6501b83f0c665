#!/usr/bin/env bash
# The steady regime's settling and energy span on one GPU (needs flag-gems and sqlalchemy importable for the
# FlagGems part; on a machine without network their wheels lie in .whl/):
#   energy   benchmarks/regimes/energy_span.py: span power against the long-run power, the polls' cost
#   gems     campaigns/flaggems_aten.py -k "mm or layer_norm" (ATen on side A, FlagGems on side B) under the
#            defaults (steady), ROUNDS rounds, --ab-reference: windows met per shape, spans, report
#   liger    campaigns/liger.py, ROUNDS rounds, --ab-reference (an environment switch: says why it does not apply)
#   PARTS="energy gems" ROUNDS=3 bash benchmarks/gpu/gpu_steady_energy.sh
# Back under $OUT: steady_energy.txt (all of it) and steady_roots.tgz (the roots without caches and IR).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
PARTS=${PARTS:-energy gems}
ROUNDS=${ROUNDS:-3}
LIMIT=${LIMIT:-300}
S=/tmp/steady-energy; rm -rf "$S"; mkdir -p "$S"
log=$OUT/steady_energy.txt
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, \
torch.cuda.get_device_name())" | tee "$log"
session() {  # session NAME FILE [pytest args...]
  local name=$1 file=$2; shift 2
  local start; start=$(date +%s)
  timeout "$LIMIT" python3 -m pytest -p pytest_abbench.plugin "$file" --ab-rounds "$ROUNDS" --ab-root "$S/$name" \
    --ab-reference --cell-timeout 300 -p no:cacheprovider -rs "$@" > "$S/$name.log" 2>&1
  local rc=$?
  echo "=== $name: rc $rc in $(( $(date +%s) - start )) s" | tee -a "$log"
  # timeout's own code: the session was stopped, and what it had not reached (often the reference, which runs
  # after the cells) is missing from its report.
  [ "$rc" = 124 ] && echo "=== $name: stopped by LIMIT=$LIMIT s before its end: give a larger LIMIT" | tee -a "$log"
  grep -h "abbench: reference\|abbench: exit\|passed\|failed" "$S/$name.log" | tee -a "$log"
  echo "--- report.md" | tee -a "$log"
  cat "$S/$name/report.md" 2>/dev/null | tee -a "$log"
  python3 benchmarks/figures/steady_windows.py "$S/$name" 2>&1 | tee -a "$log"
}
case " $PARTS " in *" energy "*)
  echo "=== benchmarks/regimes/energy_span.py" | tee -a "$log"
  python3 benchmarks/regimes/energy_span.py 2>&1 | tee -a "$log";; esac
case " $PARTS " in *" gems "*) session gems campaigns/flaggems_aten.py -k "mm or layer_norm";; esac
case " $PARTS " in *" liger "*) session liger campaigns/liger.py;; esac
tar czf "$OUT/steady_roots.tgz" -C "$S" --exclude=kernels --exclude=cache --exclude=code_cache --exclude=ir . \
  2>/dev/null
