"""Run one cell child: its own process group, output streamed to run.log, a hard timeout.

This is the parent side of a cell.  Nothing here reads the child's output into
memory: stdout and stderr go straight to the log file descriptor, so a child
that prints hundreds of MB costs the parent nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, Mapping, Protocol, Sequence

from pytest_abbench.spawn import interrupts
from pytest_abbench.core.exitcodes import TIMEOUT, shell_rc
from pytest_abbench.core.prctl import parent_death_signal

if TYPE_CHECKING:
    from pytest_abbench.spawn.forkserver import ForkServer

# After SIGTERM the group gets this long to exit before SIGKILL.
_TERM_GRACE_S = 2.0
# How often ``run_child`` asks its ``check`` whether the cell may go on.
_CHECK_EVERY_S = 0.2


@dataclass
class ChildResult:
    rc: int
    elapsed_s: float


class StartedCell(Protocol):
    """What ``run_child`` needs of a started cell: ``subprocess.Popen``, or a cell a fork server forked."""

    pid: int
    returncode: int | None

    def wait(self, timeout: float | None = None) -> int: ...


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Ask Linux to send SIGTERM to the child when its parent dies (pytest SIGKILLed).

    Runs between fork and exec.  The cell child turns that SIGTERM into a
    SIGKILL of every descendant and of its process group (``guard_group`` in
    ``pytest_abbench/child/__main__.py``), so its own children die too.  Where
    prctl is unavailable the child's parent watchdog still notices; the
    process group kill on timeout holds.
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked by run_child for the spawn only
    parent_death_signal(signal.SIGTERM)


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def start_process(argv: Sequence[str], env: Mapping[str, str], log: BinaryIO) -> subprocess.Popen[bytes]:
    """Execute ``argv`` in a session of its own, output to ``log``, ended with its parent (``_die_with_parent``):
    a cell, or a precompile job."""
    return subprocess.Popen(list(argv), env=dict(env), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=_die_with_parent)


def run_child(
    argv: Sequence[str],
    env: Mapping[str, str],
    log_path: Path,
    timeout_s: float,
    check: Callable[[], None] | None = None,
    server: ForkServer | None = None,
) -> ChildResult:
    """Start ``argv`` in a new session, wait at most ``timeout_s``, return its shell-style rc.

    With a ``server`` the cell is forked from it (``argv`` without the
    interpreter and ``-m``, see ``forkserver.py``); otherwise ``argv`` is
    executed.  Everything after the start is the same for both.

    On timeout the whole group gets SIGTERM, then SIGKILL, and rc is 124.
    ``check``, called every 0.2 s while the child runs, ends the cell by
    raising: the group is killed as on Ctrl-C and its exception propagates.
    Whatever the outcome, the group is killed at the end, so no grandchild the
    cell started (a compile worker, a stray ``sleep``) outlives its cell; one
    that left the group (``setsid``) is killed by the cell child itself, a
    child subreaper (``pytest_abbench/child/__main__.py``).
    """
    interrupts.install()
    interrupts.raise_if_interrupted()  # a Ctrl-C swallowed since the last cell stops the session here
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    proc: StartedCell
    with open(log_path, "ab", buffering=0) as log:
        # A Ctrl-C that lands while Python forks is raised inside its at-fork callbacks
        # (logging's lock release), where it is reported as ignored and lost: the session
        # then ran every remaining cell.  And between a fork server's fork and its answer
        # the new cell's pid is not known yet.  SIGINT is held during the spawn and
        # delivered right after, inside the try of _supervise that kills the new cell.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            if server is not None:
                proc = server.spawn(argv, env, log_path)
            else:
                proc = start_process(argv, env, log)
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            raise
        return _supervise(proc, log, timeout_s, check, start, held)


def _supervise(proc: StartedCell, log: BinaryIO, timeout_s: float, check: Callable[[], None] | None, start: float,
               held: set[int | signal.Signals] | None = None) -> ChildResult:
    """Wait for a started cell, kill its group on timeout, Ctrl-C or any error, and at the end in any case.

    ``held``: the signal mask to restore (SIGINT was blocked for the spawn);
    restored inside the ``try`` so a Ctrl-C delivered then still kills the cell.
    """
    pgid = proc.pid  # a new session makes the cell its group's leader
    timed_out = False
    try:
        if held is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a Ctrl-C held during the spawn is raised here
        _wait(proc, timeout_s, check)
    except subprocess.TimeoutExpired:
        timed_out = True
        _stop_group(proc, pgid)
        log.write(f"\n[abbench] cell timeout after {timeout_s:g}s: process group {pgid} killed\n".encode())
    except BaseException:
        # KeyboardInterrupt or a pytest-timeout in the parent: never leave the child behind.  SIGTERM
        # first: the cell's supervisor then kills the descendants that left the group.
        _stop_group(proc, pgid)
        raise
    finally:
        kill_group(pgid, signal.SIGKILL)
    lost = getattr(proc, "lost", None)
    if lost:
        log.write(f"\n[abbench] {lost}\n".encode())
    returncode = proc.returncode if proc.returncode is not None else proc.wait()
    rc = TIMEOUT if timed_out else shell_rc(returncode)
    return ChildResult(rc=rc, elapsed_s=time.monotonic() - start)


def _stop_group(proc: StartedCell, pgid: int) -> None:
    """SIGTERM the cell's group, give it the grace period, then SIGKILL it and reap the cell."""
    kill_group(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=_TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    kill_group(pgid, signal.SIGKILL)
    proc.wait()


def _wait(proc: StartedCell, timeout_s: float, check: Callable[[], None] | None) -> None:
    """``proc.wait(timeout_s)`` in short waits; between them a recorded Ctrl-C is raised again and ``check`` runs."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            proc.wait(timeout=max(0.0, min(left, _CHECK_EVERY_S)))
            return
        except subprocess.TimeoutExpired:
            if left <= _CHECK_EVERY_S:
                raise
        interrupts.raise_if_interrupted()
        if check is not None:
            check()


def log_tail(log_path: Path, max_bytes: int = 4000) -> str:
    """The end of a log as text, whatever its size or encoding."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except FileNotFoundError:
        return f"(no log at {log_path})"
    text = data.decode("utf-8", errors="replace")
    return ("..." if size > max_bytes else "") + text
