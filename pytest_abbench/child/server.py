"""``python -m pytest_abbench.child.server``: a fork server for one side's cells (``--ab-spawn fork``).

The plugin starts one per (interpreter, side environment).  It imports torch,
Triton and the cell code once, never initialises CUDA, then forks one cell per
request: the forked process starts its own session, points stdout and stderr
at the cell's run.log, takes the cell's full environment, and runs exactly
what ``python -m <module>`` runs for the module the request names (``CellConfig.module``: the child, or the
pytest-benchmark cell module, imported in the forked cell so the server never loads pytest).  Each cell still gets its own
process, process group and CUDA context; the server only saves the imports.

Protocol, one JSON object per line: requests on stdin
(``{"argv": [module, *flags], "env": {...}, "log": path}``: argv is what follows ``python -m``); on the reply pipe
``{"ready": ...}`` once, then per request ``{"pid": N}`` at the fork and
``{"pid": N, "status": S}`` (``os.waitpid``'s status) when the cell ends.
A request may come while earlier cells run (a precompile pool forks several
ops' compile jobs at once): each is forked at once, and the status lines come
in the order the cells end, each naming its pid.
The server exits once input has ended and its cells have, and with its parent (parent-death signal).

Kept between sessions (``--ab-keep-servers``, ``core/keptservers.py``): instead of
ending its input, the session sends ``{"park": {"folder", "digest", "side",
"idle_s"}}`` with no cell running.  The server binds the key's socket, forks the
process that waits there (detached, no parent-death signal, its log in the kept
folder), replies ``{"parked": true, "pid": N}`` and exits.  A later session
connects, says ``{"hello": digest}``, and gets ``{"ready": ...}`` (then the same
protocol on the socket), ``{"stale": why}`` when a file it imported code from
changed since (it ends), or ``{"busy": true}`` while another session holds it.
It ends after its idle seconds with no session, on SIGTERM while waiting, or when
a session ends its input instead of parking it (and the cells of a session that
died get SIGTERM, as a server's death would give them).

Why the campaign is not imported here: ``FLAGGEMS_CACHE_DIR`` differs per cell
and FlagGems reads it once and keeps it, so a campaign module imported before
the fork could pin every cell to one library tuner cache.  The per-cell
variables (``PER_CELL_ENV`` in ``pytest_abbench.spawn.forkserver``, passed as
``--per-cell``) are read by nothing this server imports.  The modules a campaign
names in ``SERVER_IMPORTS`` (the arguments) are imported after torch and Triton;
one that initialises CUDA or reads a per-cell variable is refused
(``{"refused": module, "why": ...}``, then the server exits: the parent starts
one without it), one that fails to import is left to the cells (``skipped``
in the ready message).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import importlib
import json
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path
from typing import IO, Any, Iterator, NoReturn, Sequence

from pytest_abbench.campaign.model import kept_out_name
from pytest_abbench.child import bytecode
from pytest_abbench.child.forking import fork_and_run, parent_death_signal
from pytest_abbench.child.preload import ImportRefused, import_in_server
from pytest_abbench.core import envnames, keptservers
from pytest_abbench.core.cores import worker_share
from pytest_abbench.core.procstat import START_TICKS, stat_fields

_HELLO_TIMEOUT_S = 5.0  # a session that connected says which key it wants at once
# File dates lag the clock (the kernel's coarse time, a tick or two): a file dated this much before the server's
# process started still counts as written while it imported.  Not seconds: a file saved just before a run is
# the usual case, and would make every first server of an edit-run loop unkeepable.
_MTIME_SLACK_S = 0.1
_KILL_GRACE_S = 10.0  # a dead session's cells get SIGKILL if its SIGTERM has not ended them by then


def _send(reply: IO[str], message: dict[str, Any]) -> None:
    try:
        reply.write(json.dumps(message) + "\n")
        reply.flush()
    except OSError:
        pass  # the session is gone: its end of input is what this server acts on


def _run_cell(request: dict[str, Any], server_pid: int, reply_fd: int, wakeup: tuple[int, int],
              listener: socket.socket | None) -> int:  # pragma: no cover - forked
    """In the forked process: become the cell's session leader with its log and environment, run the cell."""
    # First: a kept server's SIGTERM handler must not swallow the parent-death signal set below.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)  # the server's way of hearing its children end, not the cell's
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in wakeup:
        os.close(fd)
    if listener is not None:
        listener.close()  # a kept server's socket: the next session talks to the server, never to a cell
    os.setsid()
    # The cell's supervisor turns SIGTERM into a kill of all it started (child/__main__.py guard_group).
    parent_death_signal(signal.SIGTERM)
    if os.getppid() != server_pid:
        return 1  # the server died between fork and prctl: nobody waits for this cell
    os.close(reply_fd)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    os.environ.clear()
    os.environ.update(request["env"])  # putenv too: CUDA reads CUDA_VISIBLE_DEVICES from the C environment
    # The server may write bytecode to its folder (child/bytecode.py); a cell writes as its interpreter was told.
    sys.dont_write_bytecode = bool(sys.flags.dont_write_bytecode)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    module, *argv = request["argv"]  # what follows ``python -m``: the cell's module (CellConfig.module), its flags
    target = importlib.import_module(module)
    if hasattr(target, "__path__"):  # a package: ``python -m`` runs its __main__
        target = importlib.import_module(f"{module}.__main__")
    main = target.main
    sys.argv = [sys.executable, "-m", module, *argv]
    try:
        return int(main(argv))
    except SystemExit as exc:  # argparse's usage error, or a campaign calling sys.exit
        if isinstance(exc.code, int) or exc.code is None:
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1


class Kept:
    """What this server knows of itself once ready, for being kept between sessions (``--ab-keep-servers``)."""

    def __init__(self, modules: Sequence[str], import_s: float, skipped: list[list[str]], started_at: float) -> None:
        """``started_at``: ``time.time()`` before the first import: a file written since may have changed after
        it was read, so it counts as changed whatever its date says now."""
        self.modules = list(modules)
        self.import_s = import_s
        self.skipped = skipped
        self.started_at = started_at
        self.signature = module_signature(started_at)
        self.sessions = 1
        self.stop_asked = False  # SIGTERM came while a session held it: it ends instead of waiting again


def module_signature(started_at: float) -> dict[str, tuple[int, int]]:
    """(mtime, size) of every file this process imported code from, and of the interpreter; (-1, -1), which no
    file has, for one written after ``started_at`` (maybe while it was imported)."""
    files: dict[str, tuple[int, int]] = {}
    for path in [sys.executable, *(getattr(m, "__file__", None) for m in list(sys.modules.values()))]:
        if isinstance(path, str) and path not in files:
            try:
                st = os.stat(path)
            except OSError:
                continue
            late = st.st_mtime_ns >= (started_at - _MTIME_SLACK_S) * 1e9
            files[path] = (-1, -1) if late else (st.st_mtime_ns, st.st_size)
    return files


def _process_started_at() -> float:
    """When this process started (``time.time()`` scale, to a clock tick), before the interpreter read any file;
    now, where /proc cannot say."""
    now = time.time()
    try:
        ticks = int(stat_fields("self")[START_TICKS])
        uptime = float(Path("/proc/uptime").read_text().split()[0])  # both since boot, to 10 ms
        return now - max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return now


def first_change(signature: dict[str, tuple[int, int]]) -> str | None:
    """The first file of ``signature`` changed or gone since (a kept server's code would be stale), or None."""
    for path, (mtime, size) in signature.items():
        try:
            st = os.stat(path)
        except OSError:
            return f"{path} is gone since it was imported"
        if (mtime, size) == (-1, -1):
            return f"{path} was written while the server was importing"
        if (st.st_mtime_ns, st.st_size) != (mtime, size):
            return f"{path} changed since it was imported"
    return None


def serve(source: int, reply: IO[str], listener: socket.socket | None = None) -> dict[str, Any] | None:
    """Fork one cell per request line read from ``source``, at once, even while others run; report each cell's
    end.  Returns None once input has ended and every cell has, or a ``{"park": ...}`` request's arguments
    (no cell runs then).

    ``listener``: a kept server's socket while a session holds it: another session that connects is told
    ``{"busy": true}`` at once, and if this session's input ends with cells running (it died), they get the
    SIGTERM a server's death would give them, since no one would time them out.
    """
    me = os.getpid()
    # A child's end wakes the select below through this pipe (SIGCHLD's wakeup fd): no polling, no latency.
    wakeup = os.pipe()
    for fd in wakeup:
        os.set_blocking(fd, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.siginterrupt(signal.SIGCHLD, False)  # a thread an import started keeps its blocking calls uninterrupted
    signal.set_wakeup_fd(wakeup[1])
    pending = b""
    running: set[int] = set()
    open_input = True
    kill_at: float | None = None  # when the cells of a session that died get SIGKILL, if SIGTERM did not end them
    try:
        while open_input or running:
            watched = ([source] if open_input else []) + [wakeup[0]] + ([listener.fileno()] if listener else [])
            left = None if kill_at is None else max(0.0, kill_at - time.monotonic())
            ready, _, _ = select.select(watched, [], [], left)
            if kill_at is not None and time.monotonic() >= kill_at:
                for pid in running:
                    _signal_group(pid, signal.SIGKILL)
                kill_at = None
            if listener is not None and listener.fileno() in ready:
                _turn_away(listener)
            if wakeup[0] in ready:
                try:
                    while os.read(wakeup[0], 4096):
                        pass
                except BlockingIOError:
                    pass
            for pid in sorted(running):
                ended, status = os.waitpid(pid, os.WNOHANG)
                if ended:
                    running.discard(pid)
                    _send(reply, {"pid": pid, "status": status})
            if source not in ready:
                continue
            try:
                chunk = os.read(source, 65536)
            except ConnectionResetError:
                chunk = b""
            open_input = bool(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if not open_input:  # a last request without its newline: a kept server's session died writing it
                lines, pending = ([*lines, pending] if listener is None else lines), b""
                if listener is not None and running:
                    for pid in running:  # the session is gone: its cells would run untimed
                        _signal_group(pid, signal.SIGTERM)
                    kill_at = time.monotonic() + _KILL_GRACE_S
            for line in lines:
                if not line.strip():
                    continue
                try:
                    request = json.loads(line)
                except ValueError:  # cut short: the session died while it wrote
                    _log(f"not a request, ignored: {line[:200]!r}")
                    continue
                if "park" in request:
                    if not running:
                        return dict(request["park"])
                    _send(reply, {"parked": False, "why": f"{len(running)} cell(s) still running"})
                    continue
                pid = fork_and_run(lambda: _run_cell(request, me, reply.fileno(), wakeup, listener))
                running.add(pid)
                _send(reply, {"pid": pid})
        return None
    finally:
        signal.set_wakeup_fd(-1)
        for fd in wakeup:
            os.close(fd)


def _log(line: str) -> None:
    """A kept server's line in its log, with the time (it serves sessions hours apart)."""
    print(f"[abbench] fork server {time.strftime('%Y-%m-%d %H:%M:%S')}: {line}", file=sys.stderr, flush=True)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # a cell leads its own session and process group
    except OSError:
        pass


def _turn_away(listener: socket.socket) -> None:
    """A second session asked for this key while one holds it: it starts its own server."""
    try:
        conn, _ = listener.accept()
    except OSError:
        return
    with conn:
        try:
            conn.sendall(b'{"busy": true}\n')
        except OSError:
            pass


@contextlib.contextmanager
def _name_lock(path: Path) -> Iterator[None]:
    """Hold the lock of a kept server's name (``<digest>.lock`` beside the socket) while its socket file is
    bound, probed or removed: two servers of one key keeping themselves at once never remove each other's."""
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _bind(path: Path) -> tuple[socket.socket, int] | None:
    """A listening socket at ``path`` and the inode of its file, or None if a live server listens there already
    (one left by a server that was killed is removed)."""
    with _name_lock(path):
        return _bind_locked(path)


def _bind_locked(path: Path) -> tuple[socket.socket, int] | None:
    for attempt in range(2):
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(path))
            inode = os.stat(path).st_ino
            listener.listen(8)
            return listener, inode
        except OSError as exc:
            listener.close()
            if exc.errno != errno.EADDRINUSE or attempt:
                raise
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
            return None  # a live one (it takes this for a session that said nothing, and waits on)
        except ConnectionRefusedError:
            path.unlink(missing_ok=True)  # nobody listens (under the lock, nobody is between bind and listen)
        except OSError:
            return None  # unreadable: not ours to remove
        finally:
            probe.close()
    return None


def park(request: dict[str, Any], reply: IO[str], kept: Kept) -> int:
    """Leave the session that started this server and wait for the next of its key in a process of its own
    (``request``: folder, digest, side, idle seconds).  Replies ``{"parked": true, "pid": N}`` (its exit is what
    the session then waits for), or false with why (it ends)."""
    path = keptservers.socket_path(Path(request["folder"]), str(request["digest"]))
    stale = first_change(kept.signature)
    if stale is not None:  # no later session could use it: it would only take one of the places
        _send(reply, {"parked": False, "why": f"stale: {stale}"})
        return 0
    try:
        bound = _bind(path)
    except OSError as exc:
        _send(reply, {"parked": False, "why": f"{path}: {exc}"})
        return 0
    if bound is None:
        _send(reply, {"parked": False, "why": f"another server of this key waits at {path}"})
        return 0
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the waiting process, until a session takes it or it times out
        os.setsid()  # out of the session's process group: a Ctrl-C there is not for it
        _wait_for_sessions(*bound, request, kept, reply)
    bound[0].close()
    _send(reply, {"parked": True, "pid": pid})
    return 0


def _wait_for_sessions(listener: socket.socket, inode: int, request: dict[str, Any], kept: Kept,
                       session_reply: IO[str]) -> NoReturn:  # pragma: no cover - the kept server, detached
    """Wait for sessions of this key, serve each, end after ``idle_s`` with none, on SIGTERM while waiting, or
    on anything unforeseen (its socket and info file are removed on every way out)."""
    folder, digest = Path(request["folder"]), str(request["digest"])
    path = keptservers.socket_path(folder, digest)

    def asked_to_end(*_: object) -> NoReturn:
        _log("asked to end (SIGTERM: abbench servers --stop, or a session that parked one more than may wait at "
             "once); ending")
        leave()

    def leave() -> NoReturn:
        try:
            with _name_lock(path):
                if os.stat(path).st_ino == inode:  # not a socket another server bound after this one's was removed
                    keptservers.info_path(folder, digest).unlink(missing_ok=True)  # first: listed means reachable
                    path.unlink()
        except OSError:
            pass
        os._exit(0)

    try:
        # Off the session's pipes and out of its root: this process outlives both.
        session_reply.close()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        log = os.open(keptservers.log_path(folder, digest), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        while True:
            signal.signal(signal.SIGTERM, asked_to_end)
            info = keptservers.KeptServer(
                digest=digest, pid=os.getpid(), side=str(request.get("side", "")), python=sys.executable,
                cwd=os.getcwd(), imports=kept.modules, import_s=kept.import_s, started_at=kept.started_at,
                parked_at=time.time(), idle_s=float(request["idle_s"]), sessions=kept.sessions)
            info.write(folder)
            _log(f"kept for {info.idle_s:g} s at {path} (pid {os.getpid()}, {kept.sessions} session(s) served)")
            taken = _next_session(listener, digest, info.idle_s)
            if taken is None:
                _log("no session came; ending")
                leave()
            conn, cwd = taken
            signal.signal(signal.SIGTERM, lambda *_: setattr(kept, "stop_asked", True))
            keptservers.info_path(folder, digest).unlink(missing_ok=True)  # held: not listed as waiting
            change = first_change(kept.signature) or _other_folder(cwd)
            reply = conn.makefile("w")
            if change is not None:
                _log(f"stale, ending: {change}")
                _send(reply, {"stale": change})
                leave()
            kept.sessions += 1
            _send(reply, {"ready": True, "pid": os.getpid(), "import_s": 0.0, "skipped": kept.skipped,
                          "kept": {"import_s": kept.import_s, "started_at": kept.started_at,
                                   "sessions": kept.sessions}})
            again = serve(conn.fileno(), reply, listener)
            if again is None:
                _log("the session ended its input (it ended, or died); ending")
                leave()
            request = {**request, **again}
            stale = "it was asked to end (SIGTERM) while this session held it" if kept.stop_asked else \
                first_change(kept.signature)
            if stale is not None:
                _send(reply, {"parked": False, "why": stale if kept.stop_asked else f"stale: {stale}"})
                leave()
            _send(reply, {"parked": True, "pid": os.getpid()})
            reply.close()
            conn.close()
    except BaseException as exc:  # whatever it was, the socket must not outlive the server
        try:
            _log(f"ending on {type(exc).__name__}: {exc}")
        finally:
            leave()


def _other_folder(cwd: str) -> str | None:
    """Why this server's working folder is not the session's ``cwd`` (the same name, another folder: deleted
    and made again since), or None."""
    try:
        if os.path.samestat(os.stat("."), os.stat(cwd)):
            return None
    except OSError:
        return f"its working folder {cwd} was removed since it started"
    return f"its working folder {cwd} was made again since it started"


def _next_session(listener: socket.socket, digest: str, idle_s: float) -> tuple[socket.socket, str] | None:
    """The next session's connection that names this server's key (``{"hello": digest, "cwd": ...}``) and the
    session's working folder, or None after ``idle_s`` without one."""
    deadline = time.monotonic() + idle_s
    while True:
        ready, _, _ = select.select([listener], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return None
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        conn.settimeout(_HELLO_TIMEOUT_S)
        try:
            hello = json.loads(conn.makefile("rb").readline() or b"{}")
        except (OSError, ValueError):
            hello = {}
        conn.settimeout(None)
        if isinstance(hello, dict) and hello.get("hello") == digest:
            return conn, str(hello.get("cwd", ""))
        conn.close()  # a probe (another server checking the socket is live) or a stranger: wait on


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pytest_abbench.child.server")
    parser.add_argument("--per-cell", default="", help="comma-separated variables whose value differs per cell")
    parser.add_argument("modules", nargs="*", help="the campaign's SERVER_IMPORTS, imported before any fork")
    return parser.parse_args(argv)


def hash_compiler_once() -> float | None:
    """Compute Triton's compiler key (``triton.runtime.cache.triton_key``) here, before any fork; its seconds.

    The key hashes Triton's compiler sources and its libtriton (over 400 MB), once per process, at the first
    kernel a process compiles or loads from the cache: every forked cell and compile share paid about 0.5 s for
    it.  Computed here, each inherits the answer (the function's cache), as Triton's own compile pool hands it
    to its workers.  The key cannot go stale under a kept server unnoticed: one whose imported files (libtriton
    among them) changed is refused as stale.  None where this Triton has no such function, or a file it hashes
    cannot be read: the cells then hash it themselves, and the first to compile says what is wrong.
    """
    import triton.runtime.cache

    key = getattr(triton.runtime.cache, "triton_key", None)
    if key is None:
        return None
    started = time.monotonic()
    try:
        key()
    except OSError as exc:
        print(f"[abbench] fork server: Triton's compiler key not hashed here: {exc}", file=sys.stderr, flush=True)
        return None
    return time.monotonic() - started


def _import_all(args: argparse.Namespace, reply: IO[str]) -> list[list[str]] | None:
    """torch, Triton, the cell code and the campaign's modules; those that failed to import (module, why), or None
    when the server cannot serve (the parent was told why)."""
    import torch
    import triton  # noqa: F401

    import pytest_abbench.child.__main__  # noqa: F401
    import pytest_abbench.child.measure  # noqa: F401  (what a cell imports before its campaign)

    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        # A forked child cannot use a CUDA context its parent created.
        _send(reply, {"error": "CUDA was initialised while importing torch and triton; fork cannot be used"})
        return None
    skipped = []
    try:
        for module, failed in import_in_server(args.modules, [v for v in args.per_cell.split(",") if v]):
            if failed is not None:
                print(f"[abbench] fork server: not imported: {module}: {failed}", file=sys.stderr, flush=True)
                skipped.append([module, failed[:500]])
    except ImportRefused as exc:
        print(f"[abbench] fork server: refused {exc.module}: {exc.why}", file=sys.stderr, flush=True)
        _send(reply, {"refused": exc.module, "why": exc.why})
        return None
    return skipped


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()
    started_at = _process_started_at()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    parent_death_signal(signal.SIGKILL)  # pytest died: so do we (our cells follow through their own signal)
    # The reply pipe is fd 1 as started; anything imports print goes to stderr (the server log) instead.
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        cores = worker_share()
    except ValueError as exc:  # the session refused the value before starting cells: a server started by hand
        print(f"[abbench] fork server: {exc}", file=sys.stderr, flush=True)
        cores = 1
    prepared, why = bytecode.start(["torch", "triton", *(m for m in args.modules if kept_out_name(m) is None)],
                                   os.environ, cores, close_in_pool=(reply.fileno(),))
    try:
        skipped = _import_all(args, reply)
    finally:  # before any fork: the pool's threads and processes end here
        if prepared is not None:
            said = prepared.finish()
        else:
            said = f"[abbench] fork server: bytecode as Python finds it ({why})"
        print(said, file=sys.stderr, flush=True)
    if skipped is None:
        return 3
    # Interpreter cells compile nothing (the runner sets TRITON_INTERPRET in their side's environment, so here too).
    hashed_s = None if os.environ.get(envnames.TRITON_INTERPRET) == "1" else hash_compiler_once()
    if hashed_s is not None:
        print(f"[abbench] fork server: Triton's compiler key hashed in {hashed_s:.2f}s, once for every cell forked "
              "from here", file=sys.stderr, flush=True)
    import_s = round(time.monotonic() - started, 3)
    _send(reply, {"ready": True, "pid": os.getpid(), "import_s": import_s, "skipped": skipped})
    kept = Kept(args.modules, import_s, skipped, started_at)
    request = serve(sys.stdin.fileno(), reply)
    return 0 if request is None else park(request, reply, kept)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without the interpreter's shutdown: with torch loaded it takes about a second, and the session waits
    # for a retired server to be gone before its next cell (nothing here needs finalising).
    os._exit(code)
