#!/usr/bin/env bash
# One campaign timed cold by two trees in one call: first by the package in BASE (an older tree: `git archive REV
# pytest_abbench campaigns benchmarks | tar -x -C BASE`), then by this tree, each with a kernel cache and a Triton
# cache of its own (both start empty).  CAMPAIGN picks it (default flaggems_aten; aa is campaigns/calibration_aa.py
# with --ab-allow-no-ir-diff, A/A on identical code; any other name is campaigns/NAME.py).  flaggems_aten needs
# flag-gems and sqlalchemy importable (wheels in .whl/).  ROUNDS (default: the session's own, auto) sets
# --ab-rounds.  Prints each session's wall time, its rounds and time: lines and its verdicts, then where each
# shape's time went (figures/shape_cost.py) and how many steady windows met their condition; under $OUT:
# trees_vs_CAMPAIGN.txt.  RUNS picks the sessions, in order (default "base head"): base (BASE's package and
# campaigns), head (this tree's), same (this tree's package with BASE's campaigns: the same shapes timed by both).
#   BASE=base-tree ROUNDS=2 bash benchmarks/gpu/gpu_trees_vs.sh
#   BASE=base-tree CAMPAIGN=aa LIMIT=330 bash benchmarks/gpu/gpu_trees_vs.sh
# EXTRA: more pytest arguments for every session, e.g. EXTRA="--ab-regime burst" to compare the two packages' own
# costs without the steady regime's settling.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
CAMPAIGN=${CAMPAIGN:-flaggems_aten}
LIMIT=${LIMIT:-280}
case $CAMPAIGN in
  aa) args=(campaigns/calibration_aa.py --ab-allow-no-ir-diff) ;;
  *) args=("campaigns/$CAMPAIGN.py") ;;
esac
[ -n "${ROUNDS:-}" ] && args+=(--ab-rounds "$ROUNDS")
S=/tmp/trees-vs-$CAMPAIGN; mkdir -p "$S"  # each run clears only its own folders: two calls can fill one $S
log=$OUT/trees_vs_$CAMPAIGN.txt
here=$PWD
for which in ${RUNS:-base head}; do
  case $which in
    base|same) [ -n "${BASE:-}" ] || { echo "RUNS=$which: name the older tree in BASE" >&2; exit 2; } ;;
    head) ;;
    *) echo "RUNS: base, head or same, got $which" >&2; exit 2 ;;
  esac
  rm -rf "$S/$which" "$S/$which-kernels" "$S/$which-triton" "$S/$which-tree"
  tree=$here; [ "$which" = base ] && tree=$here/$BASE
  if [ "$which" = same ]; then
    tree=$S/same-tree; mkdir -p "$tree"
    cp -r "$here/pytest_abbench" "$here/benchmarks" "$here/pyproject.toml" "$here/setup.cfg" "$here/conftest.py" \
      "$tree/" && cp -r "$here/$BASE/campaigns" "$tree/" || { echo "same: could not build $tree" >&2; exit 2; }
  fi
  start=$(date +%s.%N)
  (cd "$tree" && ABBENCH_KERNEL_CACHE=$S/$which-kernels TRITON_CACHE_DIR=$S/$which-triton PYTHONPATH=$tree:${PYTHONPATH#$here:} \
    timeout "$LIMIT" python3 -m pytest -p pytest_abbench.plugin "${args[@]}" \
    --ab-root "$S/$which" --cell-timeout 300 -p no:cacheprovider -rs ${EXTRA:-} > "$S/$which.log" 2>&1)
  rc=$?
  echo "=== $which ($tree): rc $rc wall $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s" | tee -a "$log"
  grep -h "^== \|geomean delta\|^time:\|^rounds\|round [0-9]* \|ops stopped\|the cap reached\|abbench: exit\|passed\|failed" \
    "$S/$which.log" | tee -a "$log"
  python3 benchmarks/figures/shape_cost.py "$S/$which" 2>&1 | tee -a "$log"
  python3 benchmarks/figures/steady_windows.py "$S/$which" 2>&1 | grep -A2 "^all:\|^--- settling" | tail -4 | tee -a "$log"
  cp "$S/$which/report.md" "$OUT/trees_vs_${CAMPAIGN}_$which.md" 2>/dev/null
done
