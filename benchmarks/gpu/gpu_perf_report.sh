#!/usr/bin/env bash
# The H200 run of perf_report scripts as campaigns (examples/perf_report, written in Triton's tutorials' form),
# each unchanged, at the defaults (auto rounds, steady regime):
#   vector-add and softmax with two providers as the sides (torch against triton), and under DISABLE_MMA_V3=1
#   (no tl.dot: the IR gate should skip them after round 1); the fp16 matmul under DISABLE_MMA_V3=1 (slower
#   expected); the repository-shaped RMSNorm script with torch against triton.
# Back under $OUT: pr_env.txt (versions, each step's rc and seconds), pr_runs.txt (every session's output),
# pr_reports.md (every report.md) and pr.tgz (the roots without caches and IR).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, \
torch.cuda.get_device_name())" | tee "$OUT/pr_env.txt"
: >"$OUT/pr_runs.txt"; : >"$OUT/pr_reports.md"
step() {  # step NAME SCRIPT ARGS...: one session, its output and report appended under $OUT
  local name=$1 script=$2; shift 2
  local start; start=$(date +%s)
  echo "=== $name: pytest $script $*" >>"$OUT/pr_runs.txt"
  timeout "${LIMIT:-240}" python3 -m pytest -p pytest_abbench.plugin "examples/perf_report/$script" "$@" \
    --ab-root "/tmp/pr/$name" -p no:cacheprovider -rs >>"$OUT/pr_runs.txt" 2>&1
  echo "$name: rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/pr_env.txt"
  { echo "## $name"; cat "/tmp/pr/$name/report.md" 2>/dev/null; echo; } >>"$OUT/pr_reports.md"
}
step vector_add-providers vector_add.py --ab-providers torch,triton
step vector_add-mma-v3 vector_add.py --ab-providers triton --ab-switch-env DISABLE_MMA_V3=1
step softmax-providers softmax.py --ab-providers torch,triton
step softmax-mma-v3 softmax.py --ab-providers triton --ab-switch-env DISABLE_MMA_V3=1
step matmul-mma-v3 matmul.py --ab-providers triton --ab-switch-env DISABLE_MMA_V3=1
step rms_norm-providers rms_norm.py --ab-providers torch,triton
tar czf "$OUT/pr.tgz" --exclude=cache --exclude=ir --exclude=code_cache -C /tmp pr
