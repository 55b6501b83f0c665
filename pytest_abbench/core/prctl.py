"""Linux ``prctl`` calls: a signal when the parent dies, and the child subreaper; elsewhere they do nothing."""

from __future__ import annotations

import ctypes
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    """True if the call succeeded; False off Linux or where libc has no ``prctl``."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def parent_death_signal(sig: int) -> bool:
    """Have the kernel send ``sig`` to this process when its parent dies; safe between fork and exec."""
    return _prctl(_PR_SET_PDEATHSIG, sig)


def become_subreaper() -> bool:
    """Orphaned descendants are reparented to this process instead of init (Linux 3.4+)."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)
