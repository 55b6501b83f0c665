"""Folders and files in places others can write (``/tmp``, a shared cache): used only when this user owns them.

A folder another user made (a pre-created ``/tmp/abbench-scratch-<uid>`` of mode 0777, a bytecode folder they can
write) lets them swap what a session reads or writes there: a planted ``.pyc`` ran as the session's user.  A path
that is a symbolic link sends a write elsewhere.  ``private_folder`` and ``open_no_follow`` are the one check: a
real folder or file (not a link), owned by this user, writable by no one else.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class NotPrivate(OSError):
    """A path this user cannot trust: names the path and why."""


def problem(info: os.stat_result, folder: bool) -> str | None:
    """Why a path with ``info`` (from ``lstat``) may not be used as this user's own folder (or file); None if it may."""
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    if folder and not stat.S_ISDIR(info.st_mode):
        return "not a folder"
    if not folder and not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_uid != os.geteuid():
        return f"owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
    if info.st_mode & 0o022:
        return (f"writable by other users (mode {stat.S_IMODE(info.st_mode):04o}; `chmod go-w` it if it is yours "
                "and nothing was planted in it)")
    return None


def private_folder(path: Path) -> Path:
    """``path`` as a folder only this user may write: made (mode 0700, with missing parents) where absent, checked
    where it exists.  Raises NotPrivate naming the path and why it is refused."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    why = problem(os.lstat(path), folder=True)
    if why is not None:
        raise NotPrivate(f"{path}: {why}: refused")
    return path


def open_no_follow(path: Path, flags: int, mode: int = 0o600) -> int:
    """``os.open`` that never follows a symbolic link at ``path`` and refuses anything but a regular file; the
    descriptor.  Raises NotPrivate naming the path where it is a link or no regular file."""
    try:
        # O_NONBLOCK: a FIFO planted there would block the open until a writer came (no effect on a file).
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the last component is a symbolic link
            raise NotPrivate(f"{path}: a symbolic link: refused") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NotPrivate(f"{path}: not a regular file: refused")
    return fd
