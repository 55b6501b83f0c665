"""A Ctrl-C or a SIGTERM is never lost: the handler also records it, and cells check the record.

CPython raises KeyboardInterrupt from its SIGINT handler at the next bytecode;
when that lands inside a finaliser or an at-fork callback, the exception is
reported as ignored and the session would go on to run every remaining cell.
Recording the signal lets the cell loop raise it again where it is safe: before
a cell starts and while it waits for one.

SIGTERM (a CI job cancelled, ``timeout``'s first signal) kills Python outright
by default: no report, no exit line, a root that says nothing about why it
stopped.  It is taken like a Ctrl-C, so the session ends the same way: the
running cell's group killed, the rows written kept, the report marked
incomplete and the ``abbench: exit 2`` line.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Callable

_seen = threading.Event()
received: list[str] = []  # the signals taken, by name, in order (the session's end says which)


def install() -> None:
    """Wrap the SIGINT handler (pytest's KeyboardInterrupt) so every SIGINT is also recorded, and take a
    SIGTERM that nobody handles as the same interrupt."""
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    previous: Any = signal.getsignal(signal.SIGINT)
    if not getattr(previous, "_abbench_records", False) and previous not in (signal.SIG_IGN, None):
        signal.signal(signal.SIGINT, _recording(previous))
    # Only the default action is replaced: a SIGTERM handler of the user's (or ignored SIGTERM) stays.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _recording(None))


def start_session() -> None:
    """Forget the signals of an earlier session in this process (pytest run in-process, as by pytester) and
    install: the session's exit says only its own interrupts."""
    _seen.clear()
    received.clear()
    install()


def _recording(previous: Any) -> Callable[[int, FrameType | None], None]:
    def record_then_raise(signum: int, frame: FrameType | None) -> None:
        _seen.set()
        received.append(signal.Signals(signum).name)
        if callable(previous):
            previous(signum, frame)
        raise KeyboardInterrupt

    record_then_raise._abbench_records = True  # type: ignore[attr-defined]
    return record_then_raise


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt again if a SIGINT was seen (its first raise may have been swallowed)."""
    if _seen.is_set():
        raise KeyboardInterrupt
