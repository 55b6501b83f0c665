"""An ``flock`` whose file names its holder: a process that finds it taken can say by whom."""

from __future__ import annotations

import fcntl
import os


def lock_with_note(fd: int, note: str) -> str | None:
    """Take ``fd``'s lock without waiting and write ``note`` into its file; None once held, else the holder's note
    (empty only between the holder's lock and its write: it is starting).  The lock lasts while ``fd`` is open."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.pread(fd, 200, 0).decode(errors="replace").strip()
    data = note.encode()
    try:
        if os.fstat(fd).st_uid == os.geteuid():  # another user's file keeps its content: only the lock is ours
            # Write, then cut: a reader never sees an empty file where a previous holder's note was.
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
    except OSError:
        pass  # read-only: the lock holds, only the holder's note is not written
    return None
