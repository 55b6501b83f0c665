"""What Linux's /proc says of a process: the fields of its stat line."""

from __future__ import annotations

# Indexes into ``stat_fields``: the stat line's fields 4 (ppid) and 22 (starttime, clock ticks after boot).
PPID = 1
START_TICKS = 19


def stat_fields(pid: int | str) -> list[bytes]:
    """The fields of ``/proc/<pid>/stat`` after the command name, the state first (``PPID``, ``START_TICKS``);
    OSError when the process is gone.  The command name may hold spaces and parentheses: the fields follow its
    last ")"."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        stat = handle.read()
    return stat[stat.rfind(b")") + 2:].split()
