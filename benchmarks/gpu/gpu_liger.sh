#!/usr/bin/env bash
# The H200 Liger-Kernel run: campaigns/liger.py at 2 rounds under its own switch (DISABLE_MMA_V3=1 on side B).
# Needs liger-kernel importable; on a machine without network its wheel lies in .whl/ and gpu_env.sh installs
# it --no-deps into /tmp/site (it needs nothing beyond the torch and triton already there).
# Back under $OUT: lk_env.txt (versions, rc, seconds), lk_run.txt (the session's output: gate lines, skips,
# verdicts), lk_status.tsv, lk_report.md, lk_cell_timing.txt and lk.tgz (the root without caches and IR).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
python3 -c "import importlib.metadata as m, torch, triton; print('liger-kernel', m.version('liger-kernel'), \
'torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/lk_env.txt"
start=$(date +%s)
# 7 ops x 2 rounds x 2 sides; the timeout keeps one call under the GPU machine's 10-minute limit.
read -ra extra <<<"${EXTRA:-}"  # more pytest arguments, split on spaces (EXTRA=--ab-reference)
timeout "${LIMIT:-540}" python3 -m pytest -p pytest_abbench.plugin campaigns/liger.py --ab-rounds "${ROUNDS:-2}" \
  --ab-root /tmp/liger/run --cell-timeout 300 -p no:cacheprovider -rs -v "${extra[@]}" >"$OUT/lk_run.txt" 2>&1
echo "timed run: rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/lk_env.txt"
python3 benchmarks/figures/cell_timing.py /tmp/liger/run > "$OUT/lk_cell_timing.txt" 2>&1
cp /tmp/liger/run/status.tsv "$OUT/lk_status.tsv"
cp /tmp/liger/run/report.md "$OUT/lk_report.md"
tar czf "$OUT/lk.tgz" --exclude=cache --exclude=ir --exclude=code_cache -C /tmp liger
