"""The git commands the history and the bisection need, each one ``git`` subprocess with a bounded time."""

from __future__ import annotations

import subprocess
from pathlib import Path

GIT_TIMEOUT_S = 60.0


class GitError(Exception):
    """A git command failed: the message names the command, the folder and git's own words."""


def git(cwd: Path, *args: str, timeout_s: float = GIT_TIMEOUT_S) -> str:
    """``git -C cwd args``'s output, stripped; GitError when it fails or git is missing."""
    try:
        done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitError(f"git {' '.join(args)} in {cwd}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise GitError(f"git {' '.join(args)} in {cwd}: {last}")
    return done.stdout.strip()


def toplevel(path: Path) -> Path | None:
    """The work tree holding ``path`` (a file or a folder); None outside git (or without git)."""
    folder = path if path.is_dir() else path.parent
    if not folder.is_dir():
        return None
    try:
        return Path(git(folder, "rev-parse", "--show-toplevel"))
    except GitError:
        return None


def head_state(tree: Path) -> tuple[str, int, str, bool, int] | None:
    """(commit, committer time, subject, dirty, depth) of the work tree at ``tree``; None without a commit.

    The depth (commits reachable from it) orders commits whose committer times are equal.

    Dirty means tracked files differ from the commit (untracked files, like the roots a session writes
    beside its campaign, do not count).
    """
    try:
        sha, when, subject = git(tree, "log", "-1", "--format=%H%x00%ct%x00%s").split("\0", 2)
        dirty = bool(git(tree, "status", "--porcelain", "--untracked-files=no"))
        depth = int(git(tree, "rev-list", "--count", sha))
    except (GitError, ValueError):
        return None
    return sha, int(when), subject, dirty, depth
