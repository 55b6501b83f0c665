"""Fork servers kept between sessions (``--ab-keep-servers``): where they wait, and what each says of itself.

A session's fork server spends seconds importing torch, Triton and the
campaign's ``SERVER_IMPORTS`` (6 to 12 s on a GPU host for Liger-Kernel).  At
the session's end it may be kept instead of ended: it waits on a Unix socket in
the kept folder, named by the digest of its key (interpreter, side, working
folder, environment, imports), for the next session of the same key, and ends
once it has waited its idle seconds.  Beside each socket a JSON file says what
waits there (``KeptServer``), for ``abbench servers``.

The daemon side is ``child/server.py``, the session's side ``spawn/forkserver.py``;
both find the folder and the names here.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from pytest_abbench.core import envnames
from pytest_abbench.core.fileio import CorruptFileError, read_object, write_json_atomic
from pytest_abbench.core.procstat import PPID, stat_fields

SERVER_MODULE = "pytest_abbench.child.server"
SOCKET_SUFFIX = ".sock"
INFO_SUFFIX = ".json"
LOG_SUFFIX = ".log"
# How many a session leaves waiting at most (its most recently used), or two per xdist worker where the workers
# are more (most_kept): each holds torch and the campaign's libraries in memory, several hundred MB on a GPU host.
MAX_KEPT = 4
# A socket path must fit sockaddr_un's 108 bytes: a folder longer than this falls back to the temporary folder's.
_MAX_DIR_CHARS = 60


class KeptFolderError(RuntimeError):
    """The kept folder cannot be used safely (not a folder, or another user's): names it and why."""


def kept_dir(env: dict[str, str] | None = None, create: bool = True) -> Path:
    """The folder kept servers wait in: ``$ABBENCH_SERVER_DIR``, else ``$XDG_RUNTIME_DIR/abbench-servers``, else
    ``<temporary folder>/abbench-servers-<uid>``; created private (0700) and checked to be this user's.
    ``create=False``: a folder that is not there is returned as it is (nothing waits in it)."""
    env = dict(os.environ) if env is None else env
    chosen = env.get(envnames.ABBENCH_SERVER_DIR)
    if chosen:
        folder = Path(chosen)
    else:
        runtime = Path(env.get(envnames.XDG_RUNTIME_DIR) or "/nonexistent") / "abbench-servers"
        folder = runtime if len(str(runtime)) <= _MAX_DIR_CHARS and runtime.parent.is_dir() else \
            Path(tempfile.gettempdir()) / f"abbench-servers-{os.getuid()}"
    if len(str(folder)) > _MAX_DIR_CHARS:
        raise KeptFolderError(f"{folder}: the kept servers' folder is longer than {_MAX_DIR_CHARS} characters "
                              f"(a socket path must fit 108 bytes); set ${envnames.ABBENCH_SERVER_DIR} to a shorter "
                              "one")
    if not create and not os.path.lexists(folder):
        return folder
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.lstat()  # not a link's target: another user could point a link in /tmp at a folder of ours
    except OSError as exc:
        raise KeptFolderError(f"{folder}: cannot use it for kept fork servers: {exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise KeptFolderError(f"{folder}: kept fork servers need a folder there, not a link or a file; "
                              f"set ${envnames.ABBENCH_SERVER_DIR} to another")
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        # Another user could connect and run code as this user's cells: only a private folder will do.
        raise KeptFolderError(f"{folder}: kept fork servers need a folder only this user can open "
                              f"(owner uid {st.st_uid}, mode {oct(st.st_mode & 0o777)}); "
                              f"set ${envnames.ABBENCH_SERVER_DIR} to another")
    return folder


def key_digest(parts: Iterable[Any]) -> str:
    """The name of a server key's socket: a digest, so the environment's values are not spelled in file names."""
    return hashlib.sha256(json.dumps(list(parts), sort_keys=True).encode()).hexdigest()[:24]


def socket_path(folder: Path, digest: str) -> Path:
    return folder / f"{digest}{SOCKET_SUFFIX}"


def info_path(folder: Path, digest: str) -> Path:
    return folder / f"{digest}{INFO_SUFFIX}"


def log_path(folder: Path, digest: str) -> Path:
    """Where a kept server writes once it no longer belongs to the session that started it."""
    return folder / f"{digest}{LOG_SUFFIX}"


@dataclass(frozen=True)
class KeptServer:
    """What a waiting server says of itself (its info file)."""

    digest: str
    pid: int
    side: str  # its label: side-A, side-B
    python: str
    cwd: str
    imports: list[str]
    import_s: float  # what its imports took when it started
    started_at: float  # time.time() when it started
    parked_at: float  # when it began to wait this time
    idle_s: float  # it ends once it has waited this long
    sessions: int  # sessions it has served

    def write(self, folder: Path) -> None:
        write_json_atomic(info_path(folder, self.digest), asdict(self))

    def describe(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        left = max(0.0, self.parked_at + self.idle_s - now)
        imports = f" + {', '.join(self.imports)}" if self.imports else ""
        return (f"pid {self.pid} {self.side} ({self.python}{imports}, cwd {self.cwd}): "
                f"waiting {now - self.parked_at:.0f} s, ends in {left:.0f} s unless a session takes it; "
                f"imports took {self.import_s:.1f} s; "
                f"{self.sessions} session(s) served")


def read_kept(folder: Path) -> tuple[list[KeptServer], list[str]]:
    """The servers waiting in ``folder`` (live, with their socket), and one line per info file that could not be
    read (named, with the field)."""
    found, problems = [], []
    for path in sorted(folder.glob(f"*{INFO_SUFFIX}")):
        try:
            server = read_object(path).dataclass(KeptServer)
        except FileNotFoundError:
            continue  # taken or ended while listing
        except CorruptFileError as exc:  # names the file and the field
            problems.append(str(exc))
            continue
        except OSError as exc:
            problems.append(f"{path}: unreadable: {exc}")
            continue
        if is_server(server.pid) and socket_path(folder, server.digest).exists():
            found.append(server)
    return found, problems


def is_server(pid: int) -> bool:
    """Whether ``pid`` is alive and a fork server that no other server forked: its command line names the
    server module (a pid reused by another process is never signalled), and so does a cell's, forked from a
    server, which is why its parent must not."""
    return _names_server(pid) and not _names_server(_parent(pid))


def _names_server(pid: int) -> bool:
    """A process of this user whose command line names the server module."""
    try:
        return pid > 0 and os.stat(f"/proc/{pid}").st_uid == os.getuid() and \
            SERVER_MODULE.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _parent(pid: int) -> int:
    try:
        return int(stat_fields(pid)[PPID])
    except (OSError, ValueError, IndexError):
        return 0


def stop(server: KeptServer) -> bool:
    """Ask a waiting server to end (SIGTERM: it removes its socket and info file); False if it was gone."""
    if not is_server(server.pid):
        return False
    try:
        os.kill(server.pid, signal.SIGTERM)
    except OSError:  # gone meanwhile
        return False
    return True


def most_kept() -> int:
    """How many may wait at once: MAX_KEPT, or two per xdist worker of this run where that is more.  Each worker
    keeps its own sides' servers (their names differ by worker and GPU), so a fixed cap would leave most of a
    many-GPU run's workers to import again next time."""
    workers = os.environ.get(envnames.PYTEST_XDIST_WORKER_COUNT, "")
    return max(MAX_KEPT, 2 * int(workers)) if workers.isdigit() else MAX_KEPT


def trim(folder: Path, keep: int) -> list[KeptServer]:
    """End the servers waiting longest beyond the ``keep`` most recently parked; the ones ended."""
    waiting, _ = read_kept(folder)
    waiting.sort(key=lambda s: s.parked_at, reverse=True)
    return [server for server in waiting[keep:] if stop(server)]
