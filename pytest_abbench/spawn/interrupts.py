"""A Ctrl-C is never lost: the SIGINT handler also records it, and cells check the record.

CPython raises KeyboardInterrupt from its SIGINT handler at the next bytecode;
when that lands inside a finaliser or an at-fork callback, the exception is
reported as ignored and the session would go on to run every remaining cell.
Recording the signal lets the cell loop raise it again where it is safe: before
a cell starts and while it waits for one.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

_seen = threading.Event()


def install() -> None:
    """Wrap the current SIGINT handler (pytest's KeyboardInterrupt) so every SIGINT is also recorded."""
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    previous: Any = signal.getsignal(signal.SIGINT)
    if getattr(previous, "_abbench_records", False) or previous in (signal.SIG_IGN, None):
        return  # already installed, or the user asked to ignore Ctrl-C

    def record_then_raise(signum: int, frame: FrameType | None) -> None:
        _seen.set()
        if callable(previous):
            previous(signum, frame)
        raise KeyboardInterrupt

    record_then_raise._abbench_records = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGINT, record_then_raise)


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt again if a SIGINT was seen (its first raise may have been swallowed)."""
    if _seen.is_set():
        raise KeyboardInterrupt
