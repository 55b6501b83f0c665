"""``python -m pytest_abbench.child.compile_probe TARGET ...``: read a perf_report script at collection as an IR-only
cell imports it: compiling for the IR target, launching nothing, with the kernels it launches at import run in
Triton's interpreter (``core/standin_driver.py``).

Under ``--ab-ir-only`` the probe must import the script as the cells will: in Triton's interpreter a kernel the
script compiles at import (``kernel = softmax_kernel.warmup(...)``, then ``kernel.n_regs``, the fused-softmax
tutorial) has no compiled form to ask.  The rest of the arguments are ``campaign/perf_report.py``'s probe's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pytest_abbench.campaign import perf_report
from pytest_abbench.child.ircapture import enter_compile_only
from pytest_abbench.core import envnames, standin_driver

if __name__ == "__main__":
    os.environ.setdefault(envnames.ABBENCH_PASS_DUMP, "0")  # reading the script needs no per-pass IR
    enter_compile_only(sys.argv[1])
    with standin_driver.launches_run():
        perf_report.probe(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), float(sys.argv[5]))
    sys.stdout.flush()
    os._exit(0)  # threads the script started may still run; the answer is written
