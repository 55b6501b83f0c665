#!/usr/bin/env bash
# The FlagGems-against-ATen campaign (campaigns/flaggems_aten.py, every op, ROUNDS rounds, defaults otherwise) timed
# cold twice in one call: first by the package in BASE (an older tree: `git archive REV pytest_abbench campaigns
# benchmarks | tar -x -C BASE`), then by this tree, each with a kernel cache and a Triton cache of its own (both
# start empty).  Needs flag-gems and sqlalchemy importable (wheels in .whl/).  Prints each session's wall time,
# its time: line and its verdicts; under $OUT: flaggems_vs.txt.  RUNS picks the sessions, in order (default
# "base head"): base (BASE's package and campaigns), head (this tree's), same (this tree's package with BASE's
# campaigns: the same shapes timed by both packages).
#   BASE=base-tree ROUNDS=2 bash benchmarks/gpu/gpu_flaggems_vs.sh
#   BASE=base-tree ROUNDS=2 RUNS="base same" bash benchmarks/gpu/gpu_flaggems_vs.sh
# EXTRA: more pytest arguments for every session, e.g. EXTRA="--ab-regime burst" to compare the two packages' own
# costs without the steady regime's settling, which changed between them.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
BASE=${BASE:?name the older tree}
ROUNDS=${ROUNDS:-2}
LIMIT=${LIMIT:-280}
S=/tmp/flaggems-vs; rm -rf "$S"; mkdir -p "$S"
log=$OUT/flaggems_vs.txt
here=$PWD
for which in ${RUNS:-base head}; do
  case $which in base|head|same) ;; *) echo "RUNS: base, head or same, got $which" >&2; exit 2 ;; esac
  tree=$here; [ "$which" = base ] && tree=$here/$BASE
  if [ "$which" = same ]; then
    tree=$S/same-tree; mkdir -p "$tree"
    cp -r "$here/pytest_abbench" "$here/benchmarks" "$here/pyproject.toml" "$here/setup.cfg" "$here/conftest.py" \
      "$tree/" && cp -r "$here/$BASE/campaigns" "$tree/" || { echo "same: could not build $tree" >&2; exit 2; }
  fi
  start=$(date +%s.%N)
  (cd "$tree" && ABBENCH_KERNEL_CACHE=$S/$which-kernels TRITON_CACHE_DIR=$S/$which-triton PYTHONPATH=$tree:${PYTHONPATH#$here:} \
    timeout "$LIMIT" python3 -m pytest -p pytest_abbench.plugin campaigns/flaggems_aten.py --ab-rounds "$ROUNDS" \
    --ab-root "$S/$which" --cell-timeout 300 -p no:cacheprovider -rs ${EXTRA:-} > "$S/$which.log" 2>&1)
  rc=$?
  echo "=== $which ($tree): rc $rc wall $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s" | tee -a "$log"
  grep -h "^== \|geomean delta\|^time:\|abbench: exit\|passed\|failed" "$S/$which.log" | tee -a "$log"
done
