"""Fork a process that runs one function and leaves with its return code, as an exec'd child would.

Used where a process that already imported torch and Triton starts another
without paying for the imports again: the fork server's cells, and the
shares of a compile-only cell (IR triage, precompile).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import traceback
from typing import Callable, NoReturn


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
        leave(rc)


def leave(rc: object) -> NoReturn:
    """End a measuring process once its work is written, with ``rc``, whatever threads the campaign left running.

    An exec'd process leaves through sys.exit, which runs the exit handlers (IR capture's pass-dump reader is
    one): so does this, before ``os._exit`` skips the rest.  What it skips is the wait for non-daemon threads:
    a thread a campaign started in ``build`` and never stopped would hold the cell until its timeout, and the
    message would name only the timeout; it is named here instead.
    """
    try:
        left = [t for t in threading.enumerate() if t is not threading.current_thread() and t.is_alive()
                and not t.daemon]
        if left:
            names = ", ".join(f"{t.name!r}" + (f" ({target})" if (target := _target(t)) else "") for t in left)
            print(f"[abbench] the campaign left {len(left)} thread(s) running: {names}; the cell ends without "
                  "waiting for them (its results are written)", flush=True)
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(rc if isinstance(rc, int) and 0 <= rc < 256 else 1)


def _target(thread: threading.Thread) -> str:
    """The function a thread runs, as ``module.qualname`` (empty when unknown)."""
    target = getattr(thread, "_target", None)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}" if target else ""
