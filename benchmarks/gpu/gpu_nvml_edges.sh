#!/usr/bin/env bash
# What reading NVML at the timed windows' edges costs, on one GPU: the three-arm benchmark
# (benchmarks/regimes/nvml_sampling_cost.py); then the server-imports benchmark.  PARTS picks among cost and imports.
# (Its A/A campaign with the edge reads off and on went with --ab-gpu-state: the edges are always read.)
#   bash benchmarks/gpu/gpu_nvml_edges.sh
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
PAIRS=${PAIRS:-12}
PARTS=${PARTS:-cost imports}
S=/tmp/nvml-edges; rm -rf "$S"; mkdir -p "$S"
case " $PARTS " in *" cost "*)
  python3 benchmarks/regimes/nvml_sampling_cost.py --pairs "$PAIRS" 2>&1 | tee "$OUT/nvml_sampling_cost.txt";; esac
case " $PARTS " in *" imports "*)
  timeout 120 python3 benchmarks/probes/server_imports.py 2>&1 | tee "$OUT/server_imports.txt";; esac
