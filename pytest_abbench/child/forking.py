"""Fork a process that runs one function and leaves with its return code, as an exec'd child would.

Used where a process that already imported torch and Triton starts another
without paying for the imports again: the fork server's cells, and the
shares of a compile-only cell (IR triage, precompile).
"""

from __future__ import annotations

import atexit
import os
import sys
import traceback
from typing import Callable


def fork_and_run(run: Callable[[], int]) -> int:
    """In the parent: the child's pid.  The child runs ``run`` and exits with its code (1 if it raised)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    rc = 1  # pragma: no cover - the forked child, below
    try:
        rc = run()
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            # An exec'd process leaves through sys.exit, which runs the exit handlers (IR capture's
            # pass-dump reader is one): so does a forked one, before os._exit skips the rest.
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc if isinstance(rc, int) and 0 <= rc < 256 else 1)
