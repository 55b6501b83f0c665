#!/usr/bin/env bash
# The README test command's second run: the tests that touch Triton internals (the stages hook of pass
# switches, the post-compile IR capture and per-pass dumps, the compile-only stand-in driver, the autotune
# pin, the interpreter's timed runs) again on the newest Triton release, in a venv of its own.  The rest
# of the suite does not depend on the Triton version and runs once, on the pinned 3.6.0.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-newest-triton
TESTS=(
  tests/test_switch_hooks.py  # knobs.runtime.add_stages_inspection_hook, make_ttgir's passes
  tests/test_ircapture.py     # jit_post_compile_hook keys, variant names with a stages hook
  tests/test_ir_triage.py     # compile at the GPU's level, MLIR_ENABLE_DUMP per-pass lists
  tests/test_irgate.py        # the compile-only driver for cuda:90, stage fingerprints
  tests/test_harness.py       # Autotuner.run pin (record/replay), identities, every campaign in the interpreter
  tests/test_autotune_pin.py  # Autotuner._bench and nargs: a kernel's candidates compiled in several processes
  tests/test_two_tritons.py   # skips on any Triton but 3.6.0, saying so
  tests/test_perf_report.py   # triton.testing's do_bench signatures, Mark and Benchmark, the active driver, launcher and interpreter
  tests/test_cubin.py         # the cubin a compile for cuda:90 writes, against its ptxas -v
  tests/test_forkserver.py::test_a_forked_cell_inherits_tritons_compiler_key_from_its_server  # runtime.cache.triton_key
)
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -r requirements-newest-triton.txt -e .
"$VENV/bin/python" -c "import torch, triton; print('newest-Triton run: triton', triton.__version__, 'torch', torch.__version__)"
"$VENV/bin/python" -m pytest -n 2 -p no:cacheprovider -rs "${TESTS[@]}" "$@"
