"""``python -m pytest_abbench.child``: the command the plugin runs for each cell.

Started by the plugin (as its process group's leader), the process becomes a
small supervisor: a child subreaper that forks the process measuring the
cell, waits for it, then kills every descendant still alive, including those
that left the process group (``setsid sleep 1000 &`` in a build function), and
exits with the measuring process's status.  Orphans of the cell are
reparented to the supervisor, so none escapes the search.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Callable, Sequence

from pytest_abbench.child.forking import leave
from pytest_abbench.core.cellconfig import CellConfig
from pytest_abbench.core.prctl import become_subreaper
from pytest_abbench.core.procstat import PPID, stat_fields

if TYPE_CHECKING:  # measure imports the campaign machinery: the supervisor loads it in the measuring process only
    from pytest_abbench.child.measure import CampaignLoad

_REAP_DEADLINE_S = 5.0


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, read from /proc (zombies included until reaped)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            fields = stat_fields(entry)
        except OSError:
            continue  # exited meanwhile
        if len(fields) > PPID:
            children.setdefault(int(fields[PPID]), []).append(int(entry))
    found: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def kill_descendants() -> None:
    """SIGKILL every descendant of this process and reap those reparented to it, until none is left."""
    me = os.getpid()
    deadline = time.monotonic() + _REAP_DEADLINE_S
    while time.monotonic() < deadline:
        alive = descendants(me)
        if not alive:
            return
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        while True:  # reap what is ours; the grandchildren of dead parents become ours next pass
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.01)
                break


def guard_group(poll_s: float = 0.5) -> None:
    """Take this cell's processes down when the pytest that started it dies, or on the timeout's SIGTERM.

    The parent set a parent-death SIGTERM; its handler (and, for a parent that
    dies while this process sits in a long C call, a watchdog thread that sees
    the parent pid change) kills every descendant, then SIGKILLs the group.
    """
    parent = os.getppid()

    def kill_all(*_: object) -> None:
        kill_descendants()
        os.killpg(os.getpgid(0), signal.SIGKILL)

    signal.signal(signal.SIGTERM, kill_all)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                kill_all()

    threading.Thread(target=watch, name="abbench-parent-watch", daemon=True).start()


def _exit_like(status: int) -> int:
    """Leave with the measuring process's status: its exit code, or death by the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL and SIGSTOP keep their default anyway
        os.kill(os.getpid(), sig)
        return 128 + sig  # a signal that does not kill by default
    return os.waitstatus_to_exitcode(status)


def supervise(run: Callable[[], int]) -> int:
    """Run ``run`` in a forked process; then kill whatever it left behind and return its status."""
    reaper = become_subreaper()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        leave(run())  # the measuring process: it exits with the cell's status, not waiting for stray threads
    guard_group()
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            status = 0
            break
    if not reaper:
        print("[abbench] not a child subreaper here: a descendant that left the process group may outlive the cell",
              flush=True)
    kill_descendants()
    return _exit_like(status)


def _measure(config: CellConfig, load: "CampaignLoad | None") -> int:
    from pytest_abbench.child.measure import load_cell_campaign, measure, run_ir_only

    load = load or load_cell_campaign
    return run_ir_only(config.compile_only(), load) if config.ir_only else measure(config, load)


def main(argv: Sequence[str] | None = None, load: "CampaignLoad | None" = None) -> int:
    """Run the cell ``argv`` describes; ``load``: how it loads its campaign (``measure.load_cell_campaign``)."""
    config = CellConfig.from_argv(sys.argv[1:] if argv is None else argv)
    if os.getpgid(0) == os.getpid():  # started by the plugin as its group's leader (not in-process)
        return supervise(lambda: _measure(config, load))
    return _measure(config, load)


if __name__ == "__main__":
    sys.exit(main())
