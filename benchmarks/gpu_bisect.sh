#!/usr/bin/env bash
# abbench bisect over a real commit range on the GPU: the repository's bf16 mm kernel (campaigns/_kernels/gemm.py)
# copied into a kernel library of its own, committed 9 times; commit 4 does not build (a syntax error that
# `python -m compileall` refuses), commit 6 plants a slowdown (the tile product in fp32 at ieee precision: no
# bf16 tensor-core MMA).  The config list stays as it is: round 1's pinned autotune choices must replay on every
# commit.  Expected: commit 4 skipped, commit 6 named, the user's checkout unchanged.
# Run from the repository root on the GPU machine; writes under $OUT (default ./gpu-out) and $WORK.
set -euo pipefail
source "$(dirname "$0")/gpu_env.sh"
WORK=${WORK:-/tmp/abbench-bisect-demo}
LEVEL=${LEVEL:-core}
ROUNDS=${ROUNDS:-2}
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
  case $i in
    4) echo 'def unfinished(:' > "$REPO/demokern/wip.py"; msg="change 4: work in progress (does not build)" ;;
    5) rm -f "$REPO/demokern/wip.py"; msg="change 5: drop the unfinished module" ;;
    6) sed -i 's/acc = tl.dot(a, b, acc)/acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")/' \
         "$REPO/demokern/gemm.py"; msg="change 6: fp32 ieee dot (slower)" ;;
    *) msg="change $i" ;;
  esac
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
echo "expected first slower commit: $(git -C "$REPO" log --format='%H %s' --grep='change 6')" | tee -a "$OUT/bisect.txt"
python3 -m pytest_abbench.cli history --history "$WORK/history.sqlite" | tee "$OUT/bisect_history.txt"
python3 -m pytest_abbench.cli history --history "$WORK/history.sqlite" --op mm --plot "$OUT/bisect_mm.png" \
  | tee -a "$OUT/bisect_history.txt"
tar czf "$OUT/bisect_steps.tgz" --exclude=cache -C "$WORK" steps history.sqlite
