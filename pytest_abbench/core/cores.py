"""How many processes one pytest process may compile with at once: its share of the host's cores.

The session's precompile pool (``spawn/precompile.py``) and a fork server's bytecode (``child/bytecode.py``)
both size themselves by it.
"""

from __future__ import annotations

import os

from pytest_abbench.core import envnames


def worker_share() -> int:
    """Compile processes this pytest process may run at once: the host's cores over its xdist workers.

    ``ABBENCH_COMPILE_JOBS=N`` sets the count instead (fewer where memory is short: one unrolled kernel's LLVM
    codegen can take gigabytes; or a fixed count in tests); a value that is not a whole number >= 1 is refused.
    """
    forced = os.environ.get(envnames.ABBENCH_COMPILE_JOBS, "")
    if forced:
        if not (forced.isascii() and forced.isdigit()) or int(forced) < 1:  # '²'.isdigit() is True
            raise ValueError(f"environment variable {envnames.ABBENCH_COMPILE_JOBS}={forced!r}: "
                             "not a whole number >= 1")
        return int(forced)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = int(os.environ.get(envnames.PYTEST_XDIST_WORKER_COUNT) or 1)
    return max(1, cores // max(1, workers))
