# Sourced by the benchmarks/gpu_*.sh drivers: the output folder, the package on PYTHONPATH (it is not
# installed on the GPU machine) and, where wheels were carried in .whl/ (a machine without network),
# those wheels installed --no-deps into /tmp/site.
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
