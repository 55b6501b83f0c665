#!/usr/bin/env bash
# Follow-up H200 run: the IR gate on FlagGems' autotuned non-dot ops (candidates on the recording side are
# not the op's code), the shared LibTuner cache warning, and the planted ground truth on shared buffers.
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
common=(-p pytest_abbench.plugin campaigns/flaggems.py --cell-timeout 300 -p no:cacheprovider -rs -v)
start=$(date +%s)
timeout 200 python3 -m pytest "${common[@]}" -k "layer_norm or replication_pad3d" --ab-rounds 2 \
  --ab-root /tmp/fg2/gate >"$OUT/fg_gate.txt" 2>&1
echo "gate run: rc $? in $(( $(date +%s) - start )) s" | tee "$OUT/fg2_env.txt"
start=$(date +%s)
timeout 120 python3 -m pytest "${common[@]}" -k layer_norm --ab-rounds 1 --ab-tuner-cache shared:/tmp/fg2/shared_cache \
  --ab-root /tmp/fg2/shared >"$OUT/fg_shared.txt" 2>&1
echo "shared-cache run: rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/fg2_env.txt"
timeout 150 python3 benchmarks/probes/planted_truth.py --pairs "${PAIRS:-12}" --rep-ms 30 >"$OUT/truth.json" 2>"$OUT/truth.log"
echo "truth: rc $?" | tee -a "$OUT/fg2_env.txt"
cat /tmp/fg2/gate/status.tsv /tmp/fg2/shared/status.tsv > "$OUT/fg2_status.tsv" 2>/dev/null
