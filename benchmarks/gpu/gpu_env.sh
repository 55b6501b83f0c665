# Sourced by the benchmarks/gpu/gpu_*.sh drivers: the output folder, the package on PYTHONPATH (it is not
# installed on the GPU machine) and, where wheels were carried in .whl/ (a machine without network),
# those wheels installed --no-deps into /tmp/site.
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
# One wheel at a time: .whl/ may hold a compiled wheel for each Python (sqlalchemy cp311 and cp312), and pip refuses
# a whole install for one wheel of another Python.
if ls .whl/*.whl >/dev/null 2>&1; then
  for wheel in .whl/*.whl; do
    why=$(python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$wheel" 2>&1) || echo "gpu_env: $wheel not installed on $(python3 -V): $(echo "$why" | grep -m1 ERROR)" >&2
  done
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
