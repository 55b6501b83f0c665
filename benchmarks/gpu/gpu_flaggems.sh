#!/usr/bin/env bash
# The H200 FlagGems run: 4 rounds under DISABLE_MMA_V3=1 with per-cell LibTuner caches, then mm once more
# with one shared tuner cache (the caliber warning).  Needs flag-gems and sqlalchemy importable
# (on a machine without network: wheels in .whl/, installed --no-deps into /tmp/site).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
python3 -c "import flag_gems, torch, triton; print('flag_gems', flag_gems.__version__, 'torch', torch.__version__, 'triton', triton.__version__)" | tee "$OUT/fg_env.txt"
start=$(date +%s)
python3 -m pytest -p pytest_abbench.plugin campaigns/flaggems.py --ab-rounds "${ROUNDS:-4}" \
  --ab-switch-env DISABLE_MMA_V3=1 --ab-root /tmp/fg/per_cell --cell-timeout 400 -p no:cacheprovider -rs -v \
  >"$OUT/fg_per_cell.txt" 2>&1
echo "per-cell run: rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/fg_env.txt"
start=$(date +%s)
python3 -m pytest -p pytest_abbench.plugin campaigns/flaggems.py -k mm --ab-rounds 1 \
  --ab-tuner-cache shared:/tmp/fg/shared_cache --ab-root /tmp/fg/shared --cell-timeout 400 -p no:cacheprovider -v \
  >"$OUT/fg_shared.txt" 2>&1
echo "shared-cache run: rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/fg_env.txt"
python3 benchmarks/figures/cell_timing.py /tmp/fg/per_cell > "$OUT/fg_cell_timing.txt" 2>&1
cp /tmp/fg/per_cell/status.tsv "$OUT/fg_status.tsv"
tar czf "$OUT/fg.tgz" --exclude=cache --exclude=ir --exclude=code_cache -C /tmp fg
