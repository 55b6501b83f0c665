#!/usr/bin/env bash
# Triton's own tutorials as published (fetched into .thirdparty/triton-tutorials, carried to the GPU machine: they
# are not vendored), run unchanged as campaigns on the GPU, each beside the tutorial's own run of the same file;
# and the GPU tests of a failed capture (tests/test_capture_gpu.py), with the fix and, for contrast, with the
# timers module before it (.thirdparty/old/timers.py, from `git show 460f657:pytest_abbench/child/timers.py`).
# Back under $OUT: tut_env.txt (versions, each step's rc and seconds), tut_runs.txt (every session's output),
# tut_reports.md (every report.md).
set -uo pipefail
source "$(dirname "$0")/gpu_env.sh"
T=.thirdparty/triton-tutorials
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, \
torch.cuda.get_device_name())" | tee "$OUT/tut_env.txt"
: >"$OUT/tut_runs.txt"; : >"$OUT/tut_reports.md"
timed() {  # timed NAME CMD...: one command, its output appended, its rc and seconds noted
  local name=$1; shift
  local start; start=$(date +%s)
  echo "=== $name: $*" >>"$OUT/tut_runs.txt"
  timeout "${LIMIT:-240}" "$@" >>"$OUT/tut_runs.txt" 2>&1
  echo "$name: rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/tut_env.txt"
}
step() {  # step NAME TUTORIAL ARGS...: one session on a copy of the tutorial, its report appended
  local name=$1 file=$2; shift 2
  mkdir -p "/tmp/tut/$name" && cp "$T/$file" "/tmp/tut/$name/"
  timed "$name" python3 -m pytest -p pytest_abbench.plugin "/tmp/tut/$name/$file" --rootdir "/tmp/tut/$name" \
    "$@" --ab-root "/tmp/tut/$name/root" -p no:cacheprovider
  { echo "## $name"; cat "/tmp/tut/$name/root/report.md" 2>/dev/null; echo; } >>"$OUT/tut_reports.md"
}
own() {  # own NAME TUTORIAL: the tutorial's own run of the same file (its sweep, plots written to a scratch folder)
  mkdir -p "/tmp/own/$1" && cp "$T/$2" "/tmp/own/$1/" && (cd "/tmp/own/$1" && MPLBACKEND=Agg timed "own-$1" python3 "$2")
}
if [ "${TESTS:-1}" = 1 ]; then
  timed capture-tests python3 -m pytest -p pytest_abbench.plugin tests/test_capture_gpu.py -p no:cacheprovider -q
  cp pytest_abbench/child/timers.py /tmp/timers.fixed && cp .thirdparty/old/timers.py pytest_abbench/child/timers.py
  timed capture-tests-before-fix python3 -m pytest -p pytest_abbench.plugin tests/test_capture_gpu.py -p no:cacheprovider -q
  cp /tmp/timers.fixed pytest_abbench/child/timers.py
fi
for run in ${RUNS:-}; do
  case $run in
    layer-norm) ABBENCH_KERNEL_SPLIT=1 step layer-norm 05-layer-norm.py --ab-providers torch,triton ${ARGS:-};;
    vector-add) step vector-add 01-vector-add.py --ab-providers torch,triton ${ARGS:-}; own vector-add 01-vector-add.py;;
    matmul-mma) ABBENCH_KERNEL_SPLIT=1 step matmul-mma 03-matrix-multiplication.py --ab-providers triton --ab-switch-env DISABLE_MMA_V3=1 ${ARGS:-};;
    softmax) step softmax 02-fused-softmax.py --ab-providers torch,triton ${ARGS:-}; own softmax 02-fused-softmax.py;;
    attention) step attention 06-fused-attention.py --ab-providers triton-fp16 --ab-switch-env DISABLE_MMA_V3=1 ${ARGS:-};;
    einsum)  # a public pytest-benchmark file (under-Peter/OMEinsum-Benchmarks), its device index 4 made 0
      P=.thirdparty/pytest-benchmark/under-Peter__OMEinsum-Benchmarks; mkdir -p /tmp/pb/einsum
      sed -e 's/cuda(4)/cuda(0)/g' -e '/^raise NameError/d' "$P/torchgpubenchmark.py" >/tmp/pb/einsum/torchgpubenchmark.py
      F=/tmp/pb/einsum/torchgpubenchmark.py K=${K:-test_matmul}
      timed einsum-abbench python3 -m pytest -p pytest_abbench.plugin "$F" --rootdir /tmp/pb/einsum -k "$K" \
        --ab-pytest-benchmark --ab-switch-env TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 --ab-root /tmp/pb/einsum/root \
        -p no:cacheprovider ${ARGS:-}
      { echo "## einsum"; cat /tmp/pb/einsum/root/report.md 2>/dev/null; echo; } >>"$OUT/tut_reports.md"
      timed einsum-own-A python3 -m pytest "$F" --rootdir /tmp/pb/einsum -k "$K" --benchmark-only \
        --benchmark-storage=/tmp/pb/einsum/store --benchmark-save=A -p no:cacheprovider
      TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 timed einsum-own-B python3 -m pytest "$F" --rootdir /tmp/pb/einsum \
        -k "$K" --benchmark-only --benchmark-storage=/tmp/pb/einsum/store --benchmark-compare \
        --benchmark-columns=min,median,mean -p no:cacheprovider;;
  esac
done
