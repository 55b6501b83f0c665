#!/usr/bin/env bash
# abbench bisect over a real commit range on the GPU: the repository's bf16 mm kernel (campaigns/_kernels/gemm.py)
# copied into a kernel library of its own, committed 9 times; commit $BROKEN_AT (default 4) does not build (a
# syntax error that `python -m compileall` refuses), commit $SLOW_AT (default 6) plants a slowdown (the tile
# product in fp32 at ieee precision: no bf16 tensor-core MMA).  The config list stays as it is: round 1's pinned
# autotune choices must replay on every commit.  Expected: the broken commit skipped if it is tested, commit
# $SLOW_AT named, the user's checkout unchanged.  SLOW_AT=2 BROKEN_AT=7 is the second range of docs/guide/history.md.
# Run from the repository root on the GPU machine; writes under $OUT (default ./gpu-out) and $WORK.
set -euo pipefail
source "$(dirname "$0")/gpu_env.sh"
WORK=${WORK:-/tmp/abbench-bisect-demo}
LEVEL=${LEVEL:-core}
ROUNDS=${ROUNDS:-2}
SLOW_AT=${SLOW_AT:-6}
BROKEN_AT=${BROKEN_AT:-4}
[ "$BROKEN_AT" != $((SLOW_AT - 1)) ] || { echo "BROKEN_AT must not be just before SLOW_AT: it would hide the last good commit" >&2; exit 2; }
rm -rf "$WORK"
mkdir -p "$WORK/repo/demokern"
REPO=$WORK/repo
git -C "$REPO" init -q
commit() { git -C "$REPO" add -A && git -C "$REPO" -c user.name=demo -c user.email=demo@example.com commit -qm "$1"; }

cp campaigns/_kernels/gemm.py "$REPO/demokern/gemm.py"
echo 'from demokern.gemm import mm' > "$REPO/demokern/__init__.py"
commit "mm kernel"
GOOD=$(git -C "$REPO" rev-parse HEAD)
for i in 1 2 3 4 5 6 7 8; do
  echo "change $i" > "$REPO/NOTES"
  msg="change $i"
  if [ "$i" = "$BROKEN_AT" ]; then
    echo 'def unfinished(:' > "$REPO/demokern/wip.py"; msg="change $i: work in progress (does not build)"
  elif [ -e "$REPO/demokern/wip.py" ]; then
    rm -f "$REPO/demokern/wip.py"; msg="change $i: drop the unfinished module"
  fi
  if [ "$i" = "$SLOW_AT" ]; then
    sed -i 's/acc = tl.dot(a, b, acc)/acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")/' \
      "$REPO/demokern/gemm.py"
    grep -q 'input_precision="ieee"' "$REPO/demokern/gemm.py" || { echo "the slowdown was not planted" >&2; exit 2; }
    msg="change $i: fp32 ieee dot (slower)"
  fi
  commit "$msg"
done
git -C "$REPO" log --oneline | tee "$OUT/bisect_commits.txt"

cat > "$WORK/mm_campaign.py" <<'EOF'
"""The kernel library under bisection, imported by package name: each side's tree comes first on its path."""
from pytest_abbench import Case, Op


def build_mm(shape, device):
    import torch
    from demokern import mm

    dtype = torch.float16 if device == "cpu" else torch.bfloat16  # Triton 3.6's interpreter misreads bf16
    g = torch.Generator(device="cpu").manual_seed(3)
    a = torch.randn(shape["M"], shape["K"], generator=g).to(device=device, dtype=dtype)
    b = torch.randn(shape["K"], shape["N"], generator=g).to(device=device, dtype=dtype)
    return Case(run=lambda: mm(a, b), expected=lambda: (a.float() @ b.float()).to(dtype), atol=0.5, rtol=2e-2)


OPS = [Op("mm", build=build_mm, shapes={
    "smoke": [{"M": 32, "N": 32, "K": 64}],
    "core": [{"M": m, "N": n, "K": k} for (m, n, k) in [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 1024, 4096)]],
})]
EOF

# The plugin by name where the package is not installed (the GPU machine); installed, its entry point loads it.
PLUGIN=(-p pytest_abbench.plugin)
python3 -c "import importlib.metadata as m, sys; sys.exit(not any(e.name == 'abbench' for e in m.entry_points(group='pytest11')))" && PLUGIN=()
before=$(git -C "$REPO" rev-parse HEAD; git -C "$REPO" status --porcelain)
start=$(date +%s)
set +e
python3 -m pytest_abbench.cli bisect "$GOOD" HEAD --repo "$REPO" --build "python3 -m compileall -q demokern" \
  --rounds "$ROUNDS" --work "$WORK/steps" --history "$WORK/history.sqlite" -- \
  "$WORK/mm_campaign.py" "${PLUGIN[@]}" --ab-level "$LEVEL" --cell-timeout 600 -p no:cacheprovider "$@" \
  2>&1 | tee "$OUT/bisect.txt"
code=${PIPESTATUS[0]}
set -e
echo "bisect exit $code, wall time $(( $(date +%s) - start )) s" | tee -a "$OUT/bisect.txt"
after=$(git -C "$REPO" rev-parse HEAD; git -C "$REPO" status --porcelain)
[ "$before" = "$after" ] && echo "checkout unchanged" | tee -a "$OUT/bisect.txt"
echo "expected first slower commit: $(git -C "$REPO" log --format='%H %s' --grep="change $SLOW_AT:")" | tee -a "$OUT/bisect.txt"
python3 -m pytest_abbench.cli history --history "$WORK/history.sqlite" | tee "$OUT/bisect_history.txt"
python3 -m pytest_abbench.cli history --history "$WORK/history.sqlite" --op mm --plot "$OUT/bisect_mm.png" \
  | tee -a "$OUT/bisect_history.txt"
tar czf "$OUT/bisect_steps.tgz" --exclude=cache -C "$WORK" steps history.sqlite
