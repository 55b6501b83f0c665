"""One GPU per cell-running process on each host: a claim is an ``flock`` on a host-local lock file.

Every worker of every session on a host claims from the same lock files
(``/tmp/abbench-gpu-<id>.lock``), so two workers (of one session or of two)
never time on one GPU, whichever host they landed on and however xdist
numbered them.  The lock is held by an open descriptor for the process's
life: a worker that dies, even by SIGKILL, frees its GPU.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pytest_abbench.core.lockfile import lock_with_note
from pytest_abbench.core.private import open_no_follow

LOCK_DIR = Path("/tmp")  # host-local on every machine the plugin runs on; never a shared mount


def lock_file(lock_dir: Path, gpu: str) -> Path:
    return lock_dir / f"abbench-gpu-{gpu}.lock"


@dataclass
class GpuClaim:
    """The GPU a process holds (None and why when it holds none); ``fd`` keeps the lock."""

    gpu: str | None
    problem: str | None = None
    fd: int | None = None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _open(path: Path) -> int:
    """The lock file, never through a symbolic link (a planted one would have its target rewritten) and only a
    regular file; read-only where it is another user's (flock works on a read-only descriptor)."""
    try:
        return open_no_follow(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        return open_no_follow(path, os.O_RDONLY)


def claim_gpu(gpus: Sequence[str], who: str, lock_dir: Path = LOCK_DIR) -> GpuClaim:
    """Claim the first free GPU of ``gpus`` on this host for as long as this process lives (or until release).

    ``who`` is written into the lock file, so a process that finds every GPU
    taken can say by whom.
    """
    taken: list[str] = []
    for gpu in gpus:
        path = lock_file(lock_dir, gpu)
        try:
            fd = _open(path)
        except OSError as exc:
            taken.append(f"{gpu} ({path}: {exc.strerror or exc})")
            continue
        holder = lock_with_note(fd, who)
        if holder is not None:
            os.close(fd)
            taken.append(f"{gpu} (held by {holder or 'a process still starting'})")
            continue
        return GpuClaim(gpu, None, fd)
    listed = ", ".join(gpus) if gpus else "none"
    return GpuClaim(None, f"no free GPU on host {socket.gethostname()} among {listed}: "
                          f"{'; '.join(taken) if taken else 'no GPU to claim'}; run fewer workers on this host, "
                          "or list more GPUs with --ab-gpus")
