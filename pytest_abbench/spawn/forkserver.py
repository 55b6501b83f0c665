"""The parent side of ``--ab-spawn fork``: one fork server per (interpreter, side environment), cells forked from it.

A fresh ``python -m pytest_abbench.child`` spends seconds importing torch; a
server (``pytest_abbench/child/server.py``) imports it once and forks each cell
from there.  ``ForkedCell`` has the part of ``subprocess.Popen`` that
``cellrun.run_child`` uses (``pid``, ``wait``, ``returncode``), so timeouts,
Ctrl-C and the process-group kill are the same code for both spawn methods.
Imports neither torch nor triton.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_abbench.core import envnames, keptservers
from pytest_abbench.core.keptservers import SERVER_MODULE
from pytest_abbench.campaign.model import kept_out_name

# Variables that differ from cell to cell of one side.  A server is shared by
# cells whose environments agree on everything else, so whatever torch or
# Triton read at import (which the server did once) is what the cell would
# have read: none of these is read there.  FlagGems reads FLAGGEMS_CACHE_DIR
# once and keeps it, which is why the server never imports the campaign.
# PYTEST_CURRENT_TEST is pytest's name of the running test (the cell); ABBENCH_PASS_DUMP=0 is set for a
# precompile (read when IR capture starts, in the cell).  TRITON_CACHE_DIR is read by Triton at each compile,
# never at import: the side A cells of campaigns whose kernel caches differ (each campaign's source is in its
# key) share one server.
PER_CELL_ENV = (envnames.ABBENCH_SPAWN_TIME, envnames.FLAGGEMS_CACHE_DIR, envnames.PYTEST_CURRENT_TEST,
                envnames.ABBENCH_PASS_DUMP, envnames.TRITON_CACHE_DIR)
_START_TIMEOUT_S = 300.0  # importing torch cold on a loaded machine
_KEPT_ANSWER_S = 10.0  # a kept server answers in milliseconds (it checks its files' dates); else start one
_EXIT_WAIT_S = 5.0  # a server leaves once input has ended and its cells have (os._exit, no interpreter shutdown):
# milliseconds when it is retired, since its last cell ended first
_PR_SET_PDEATHSIG = 1


class ForkServerError(RuntimeError):
    """A server could not be started, or died: the message says which and why."""


class KeptUnusable(ForkServerError):
    """A kept server could not be taken (stale code, held by another session, gone): start a fresh one."""

    def __init__(self, why: str, say: bool) -> None:
        super().__init__(why)
        self.why = why
        self.say = say  # worth a line for the user (its code changed), not only the cell's log


class ImportRefused(ForkServerError):
    """The server refused one of its SERVER_IMPORTS (``child/preload.py``) and exited: start it without that one."""

    def __init__(self, module: str, why: str) -> None:
        super().__init__(f"{module}: {why}")
        self.module = module
        self.why = why


def fork_supported() -> bool:
    """Linux only: the server relies on fork, setsid and parent-death signals."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


ServerKey = tuple[str, str, tuple[tuple[str, str], ...], tuple[str, ...]]


def server_key(python: str, env: Mapping[str, str], name: str, imports: Sequence[str] = ()) -> ServerKey:
    """Cells with equal keys may share a server: the same side (``name``), interpreter, environment but for
    PER_CELL_ENV, and SERVER_IMPORTS (a campaign's modules are not loaded into another campaign's cells).  The two
    sides never share one, even with equal environments (a switch made by a setup hook): each side's cells get
    their own side's imports and setup, whatever the other side's did."""
    return name, python, tuple(sorted((k, v) for k, v in env.items() if k not in PER_CELL_ENV)), tuple(imports)


# In a server's environment, but different from one run (xdist's) or one login (a shell's) to the next, and
# read by nothing a server imports: a kept server's name leaves them out, or no later session would find it.
# A cell takes its own environment whole from its request either way.
_NOT_IN_KEPT_NAME = frozenset((envnames.PYTEST_XDIST_TESTRUNUID, *envnames.LOGIN_SESSION))


def kept_digest(key: ServerKey) -> str:
    """The name a server of ``key`` is kept under: the key but for _NOT_IN_KEPT_NAME, and the working folder,
    which a forked cell inherits from its server."""
    name, python, env, imports = key
    return keptservers.key_digest([name, python, [(k, v) for k, v in env if k not in _NOT_IN_KEPT_NAME], imports,
                                   os.getcwd()])


def side_words(name: str) -> str:
    """A server's label as a message says it: ``side-B`` -> ``side B``."""
    return name.replace("-", " ", 1)


class _Lines:
    """Line reader on a pipe with a timeout (``select``); no buffering surprises."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""

    def readline(self, timeout_s: float | None) -> bytes | None:
        """One line without its newline; None on timeout; b"" at end of file."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return None
            try:
                chunk = os.read(self.fd, 65536)
            except ConnectionResetError:  # a kept server that closed its socket with this session's hello unread
                chunk = b""
            if not chunk:
                rest, self.buffer = self.buffer, b""
                return rest or b""
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child before exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class _Started:
    """A server this session started: its process and pipes."""

    def __init__(self, python: str, env: Mapping[str, str], log_path: Path, imports: Sequence[str]) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab", buffering=0) as log:
            self.proc = subprocess.Popen(
                [python, "-m", SERVER_MODULE, "--per-cell", ",".join(PER_CELL_ENV), *imports],
                env={k: v for k, v in env.items() if k not in PER_CELL_ENV},
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                start_new_session=True,  # a Ctrl-C at the terminal is the session's to handle, not the server's
                preexec_fn=_die_with_parent,
            )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.pid = self.proc.pid
        self.reply_fd = self.proc.stdout.fileno()

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def gone_why(self) -> str:
        return f"exited with rc {self.proc.returncode}"

    def end_input(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def kill(self) -> None:
        self.proc.kill()

    def wait_exit(self, timeout_s: float) -> None:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class _Taken:
    """A kept server this session took: a connection to its socket (the process is not this session's child)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pid = 0  # known once it says it is ready
        self.reply_fd = sock.fileno()
        self.closed = False

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def alive(self) -> bool:
        return not self.closed and (self.pid == 0 or keptservers.is_server(self.pid))

    def gone_why(self) -> str:
        return "it ended"

    def end_input(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def kill(self) -> None:
        if self.pid and keptservers.is_server(self.pid):
            os.kill(self.pid, signal.SIGKILL)

    def wait_exit(self, timeout_s: float) -> None:
        """Wait until it has left (it ends when this session ends its input), else kill it."""
        deadline = time.monotonic() + timeout_s
        if not self.pid:  # it never said it was ready: its end is the socket's
            while not self.closed and time.monotonic() < deadline:
                ready, _, _ = select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))
                try:
                    if ready and not self.sock.recv(65536):
                        break
                except OSError:
                    break
        while self.pid and keptservers.is_server(self.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.pid and keptservers.is_server(self.pid):
            self.kill()
        self.release()

    def release(self) -> None:
        if not self.closed:
            self.closed = True
            self.sock.close()


class ForkServer:
    """One running server, started by this session or kept from an earlier one: forks cells on request."""

    def __init__(self, python: str, env: Mapping[str, str], log_path: Path, imports: Sequence[str] = (),
                 taken: socket.socket | None = None) -> None:
        """Start the server (or take the kept one connected on ``taken``); it imports in the background until
        ``wait_ready`` (or the first ``spawn``); ``imports``: the campaign's SERVER_IMPORTS, imported after torch
        and Triton."""
        self.python = python
        self.log_path = log_path
        self.imports = tuple(imports)
        self.skipped: list[tuple[str, str]] = []  # (module, why) among ``imports`` that failed to import
        self.started = time.monotonic()
        self.link: _Started | _Taken = _Started(python, env, log_path, imports) if taken is None else _Taken(taken)
        self.replies = _Lines(self.link.reply_fd)
        self.ended: dict[int, int] = {}  # pid -> waitpid status, read while waiting for another cell's reply
        self.ready = False
        self.import_s = 0.0
        self.kept: dict[str, Any] | None = None  # a kept server's ready message says what it was (import_s, ...)
        self.kept_taken = False  # its notice said and its imports counted (``ForkServers.taken_import_s``)
        self.parked_pid = 0  # once kept (``park``): the process that waits for the next session
        self.last_used = 0.0

    @property
    def pid(self) -> int:
        return self.link.pid

    def wait_ready(self) -> None:
        """Block until the server has imported torch, Triton and its SERVER_IMPORTS; ImportRefused if it refused
        one, KeptUnusable if a kept one cannot be taken, ForkServerError if it cannot start."""
        if self.ready:
            return
        taken = isinstance(self.link, _Taken)
        line = self.replies.readline(_KEPT_ANSWER_S if taken else _START_TIMEOUT_S)
        try:
            message = self._parse(line) if line else {}
        except ForkServerError:
            if not taken:
                raise
            message = {}
        if taken and not message.get("ready"):
            self.close()
            if message.get("stale"):
                raise KeptUnusable(f"stale: {message['stale']}", say=True)
            raise KeptUnusable("another session holds it" if message.get("busy") else
                               "it did not answer" if line is None else "it ended", say=False)
        if message.get("refused"):
            self.close()
            raise ImportRefused(str(message["refused"]), str(message.get("why", "")))
        if not message.get("ready"):
            self.close()
            why = message.get("error") or ("no answer in {:g}s".format(_START_TIMEOUT_S) if line is None
                                           else self.link.gone_why())
            raise ForkServerError(f"the fork server ({self.python} -m {SERVER_MODULE}) did not start: {why}; "
                                  f"its log: {self.log_path}\n{_tail(self.log_path)}")
        self.ready = True
        self.link.pid = int(message.get("pid", self.link.pid))
        self.import_s = float(message.get("import_s", 0.0))
        self.kept = message.get("kept")
        self.skipped = [(str(module), str(why)) for module, why in message.get("skipped", [])]

    @property
    def alive(self) -> bool:
        return self.link.alive()

    def _parse(self, line: bytes) -> dict[str, Any]:
        try:
            message = json.loads(line)
        except ValueError:
            raise ForkServerError(f"the fork server sent {line[:200]!r}, not a JSON line") from None
        if not isinstance(message, dict):
            raise ForkServerError(f"the fork server sent {message!r}, not an object")
        return message

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self.link.send((json.dumps(message) + "\n").encode())
        except (BrokenPipeError, OSError) as exc:
            raise ForkServerError(f"the fork server (pid {self.pid}) is gone: {exc}") from None

    def _answer(self, what: str, timeout_s: float) -> dict[str, Any]:
        """The server's next message that is not a cell's end (those are kept for their ``ForkedCell``)."""
        deadline = time.monotonic() + timeout_s
        while True:  # the status of a cell that ended meanwhile may come first (a precompile pool's)
            line = self.replies.readline(max(0.0, deadline - time.monotonic()))
            if not line:
                raise ForkServerError(f"the fork server (pid {self.pid}) did not {what} "
                                      f"({'no answer' if line is None else 'it exited'}); its log: {self.log_path}")
            message = self._parse(line)
            if not self.keep_status(message):
                return message

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> ForkedCell:
        """Fork one cell with ``argv`` (what follows ``python -m``: its module, then its flags) and its full
        environment."""
        self.wait_ready()
        self.last_used = time.monotonic()
        self._send({"argv": list(argv), "env": dict(env), "log": str(log_path)})
        pid = int(self._answer("fork the cell", _START_TIMEOUT_S)["pid"])
        self.ended.pop(pid, None)  # a reused pid's end from long ago, never waited for, is not this cell's
        return ForkedCell(self, pid)

    def park(self, folder: Path, digest: str, side: str, idle_s: float) -> str | None:
        """Keep this server for a later session of its key (``core/keptservers.py``): None once it waits there,
        else why not (it has ended then)."""
        try:
            self._send({"park": {"folder": str(folder), "digest": digest, "side": side, "idle_s": idle_s}})
            answer = self._answer("answer the request to wait for the next session", _EXIT_WAIT_S)
        except ForkServerError as exc:
            self.close()
            return str(exc)
        if not answer.get("parked"):
            self.close()
            return str(answer.get("why", "it said no"))
        self.parked_pid = int(answer.get("pid", 0))
        if isinstance(self.link, _Taken):
            self.link.release()  # it waits on, for the next session
        else:
            self.link.wait_exit(_EXIT_WAIT_S)  # the process that waits is its child; it leaves
        return None

    def keep_status(self, message: dict[str, Any]) -> bool:
        """Keep a cell's end (``{"pid", "status"}``) for its ``ForkedCell.wait``; False for any other message."""
        if "status" not in message:
            return False
        self.ended[int(message["pid"])] = int(message["status"])
        return True

    def end_input(self) -> None:
        """Tell the server to exit (end of input); killed at once if it never got ready."""
        if not self.ready and isinstance(self.link, _Started):
            self.link.kill()  # started ahead for a side whose cells never came: its imports are not worth waiting for
        self.link.end_input()

    def wait_exit(self, timeout_s: float) -> None:
        """Wait for the exit ``end_input`` asked for; kill the server if it takes longer than ``timeout_s``."""
        self.link.wait_exit(timeout_s)

    def close(self) -> None:
        """End of input: the server exits; killed if it does not within a few seconds (at once if never used)."""
        self.end_input()
        self.wait_exit(_EXIT_WAIT_S)


class ForkedCell:
    """A cell forked by a server, waited on through the server's replies (the ``Popen`` subset run_child uses)."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None
        self.lost: str | None = None  # why the cell ended without the server reporting its status

    def wait(self, timeout: float | None = None) -> int:
        """The cell's exit code, reading the server's replies until its own end comes (others' are kept for
        them); ``subprocess.TimeoutExpired`` when it has not ended within ``timeout``."""
        if self.returncode is not None:
            return self.returncode
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pid not in self.server.ended:
            line = self.server.replies.readline(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if line is None:
                raise subprocess.TimeoutExpired([SERVER_MODULE, str(self.pid)], timeout or 0.0)
            if not line:
                # The server died; the cell got its parent-death SIGTERM and took its processes down.
                self.returncode = -signal.SIGKILL
                self.lost = (f"the fork server (pid {self.server.pid}) died while this cell (pid {self.pid}) "
                             f"ran; its log: {self.server.log_path}")
                return self.returncode
            message = self.server._parse(line)
            if not self.server.keep_status(message):
                raise ForkServerError(f"the fork server sent {message!r} while cell {self.pid} ran, not a cell's end")
        status = self.server.ended.pop(self.pid)
        self.returncode = os.waitstatus_to_exitcode(status)  # -N for death by signal N, as Popen says
        return self.returncode


class ForkServers:
    """This session's servers, one per key, started on first use, restarted when dead, closed at the end."""

    def __init__(self, log_dir: Path, keep_s: float = 0.0) -> None:
        """``keep_s``: seconds a server waits, at the session's end, for the next session of its key
        (``--ab-keep-servers``; 0: it ends with the session).  A kept server of a key is taken whatever
        ``keep_s`` is."""
        self.log_dir = log_dir
        self.keep_s = keep_s
        self.servers: dict[ServerKey, ForkServer] = {}
        self.not_kept: set[ServerKey] = set()  # keys whose kept server could not be taken: start them fresh
        self.parked: dict[ServerKey, int] = {}  # the servers this session kept (at a side's last cell, or its end): pid
        self.unparked: list[str] = []  # why one was not kept, for the terminal
        # The imports kept servers this session took had paid when they started: what this session did not pay.
        # The runner moves it into the cell that took them (``ForkSpawn.taken_import_s``).
        self.taken_import_s = 0.0
        self.started = 0
        self.notices: list[str] = []  # for the log of the cell about to run
        self.said: list[str] = []  # for the terminal, once each
        self.refused: set[tuple[ServerKey, str]] = set()  # (key without imports, module) a server refused
        self.failed: set[tuple[ServerKey, str]] = set()  # (key without imports, module) a server could not import

    def server(self, python: str, env: Mapping[str, str], name: str, imports: Sequence[str] = ()) -> ForkServer:
        """The live server for ``python``, ``env`` and ``imports`` (``name`` labels its log: the side), ready to
        fork.  A module the server refuses is left out (a new server starts without it), and the cells import
        it themselves: one line for the terminal (``said``) and one for the cell's log (``notices``) say so."""
        while True:
            server = self.start(python, env, name, imports)
            try:
                server.wait_ready()
            except ImportRefused as exc:
                self._refused(server, exc, python, env, name)
                continue
            except KeptUnusable as exc:
                self._unusable(server_key(python, env, name, server.imports), exc)
                continue
            if server.kept is not None and not server.kept_taken:
                server.kept_taken = True
                key = server_key(python, env, name, server.imports)
                if self.parked.get(key) == server.pid:  # this session kept it at its side's last cell
                    del self.parked[key]
                    self.notices.append(f"{side_words(name)}'s fork server, kept when its last cell ended, is taken "
                                        f"again (pid {server.pid}): no imports")
                else:
                    self.taken_import_s += float(server.kept.get("import_s", 0.0))
                    self.notices.append(
                        f"{side_words(name)}'s fork server was kept from an earlier session (pid {server.pid}, "
                        f"session {server.kept.get('sessions')} it serves): no imports; its own took "
                        f"{float(server.kept.get('import_s', 0.0)):.1f} s when it started")
            for module, why in server.skipped:
                if (server_key(python, env, name), module) in self.failed:
                    continue  # said when this side's first server failed it: a server started again fails again
                self.failed.add((server_key(python, env, name), module))
                kept_out = kept_out_name(module)
                if kept_out is not None:
                    self._say(f"{side_words(name)}'s fork server could not keep {kept_out} out "
                              f"(UNUSED_IMPORTS): {why} (server log: {server.log_path})")
                else:
                    self._say(f"{side_words(name)}'s fork server could not import {module} (SERVER_IMPORTS): "
                              f"{why}; its cells import it themselves (server log: {server.log_path})")
            server.skipped = []
            return server

    def _refused(self, server: ForkServer, exc: ImportRefused, python: str, env: Mapping[str, str],
                 name: str) -> None:
        """Forget ``server`` (it exited) and leave the module it refused out of this side's servers."""
        self.servers.pop(server_key(python, env, name, server.imports), None)
        self.refused.add((server_key(python, env, name), exc.module))
        self._say(f"{side_words(name)}'s fork server did not import {exc.module} (SERVER_IMPORTS): {exc.why}; "
                  f"its cells import it themselves (server log: {server.log_path})")

    def _unusable(self, key: ServerKey, exc: KeptUnusable) -> None:
        """Forget the kept server of ``key`` that could not be taken; this session starts its own."""
        self.servers.pop(key, None)
        self.not_kept.add(key)
        line = f"{side_words(key[0])}'s kept fork server was not used ({exc.why}): a new one imports"
        (self._say if exc.say else self.notices.append)(line)

    def _say(self, line: str) -> None:
        self.notices.append(line)
        self.said.append(line)

    def kept_imports(self, python: str, env: Mapping[str, str], name: str, imports: Sequence[str]) -> tuple[str, ...]:
        """``imports`` but those a server of this side refused this session."""
        base = server_key(python, env, name)
        return tuple(m for m in imports if (base, m) not in self.refused)

    def start(self, python: str, env: Mapping[str, str], name: str, imports: Sequence[str] = ()) -> ForkServer:
        """The server for ``python``, ``env`` and ``imports``, started now if there is none (or it died); does
        not wait for it.

        Starting the other side's server while this side's first cell runs
        overlaps its imports with useful work (they use a CPU, never the GPU).
        """
        imports = self.kept_imports(python, env, name, imports)
        key = server_key(python, env, name, imports)
        server = self.servers.get(key)
        if server is not None and not server.alive and not server.ready:
            try:
                server.wait_ready()  # it exited: its last word is in the pipe already
            except ImportRefused as exc:  # started ahead, it refused a module: start one without it
                self._refused(server, exc, python, env, name)
                return self.start(python, env, name, imports)
            except KeptUnusable as exc:
                self._unusable(key, exc)
                server = None
            except ForkServerError:
                pass
        if server is not None and not server.alive:
            if server.ready:  # one that never got ready says why in wait_ready
                self.notices.append(f"the fork server for {name} (pid {server.pid}) died "
                                    f"({server.link.gone_why()}); starting a new one")
            server.close()
            server = None
        if server is None:
            server = self._take(python, env, imports, key)
        if server is None:
            self.started += 1
            server = ForkServer(python, env, self.log_dir / f"{name}-{self.started}.log", imports)
        self.servers[key] = server
        return server

    def _folder(self, create: bool = True) -> Path | None:
        """The kept servers' folder, or None when it cannot be used (said once when servers are to be kept);
        ``create``: make it if it is not there (to keep one, not to look for one)."""
        try:
            return keptservers.kept_dir(create=create)
        except keptservers.KeptFolderError as exc:
            if self.keep_s > 0 and str(exc) not in self.unparked:
                self.unparked.append(str(exc))
            return None

    def _take(self, python: str, env: Mapping[str, str], imports: Sequence[str],
              key: ServerKey) -> ForkServer | None:
        """The server an earlier session kept for ``key``, connected (it says in ``wait_ready`` whether it can
        be used), or None when none waits."""
        if key in self.not_kept or not fork_supported():
            return None
        folder = self._folder(create=False)
        if folder is None:
            return None
        digest = kept_digest(key)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(_KEPT_ANSWER_S)  # a server that cannot accept (stuck) is not waited for
        try:
            sock.connect(str(keptservers.socket_path(folder, digest)))
            sock.sendall(json.dumps({"hello": digest, "cwd": os.getcwd()}).encode() + b"\n")
        except OSError:
            sock.close()
            return None
        sock.settimeout(None)
        return ForkServer(python, env, keptservers.log_path(folder, digest), imports, taken=sock)

    def _park(self, key: ServerKey, server: ForkServer) -> bool:
        """Keep ``server`` for a later session when this session keeps servers (``keep_s``) and it is ready and
        alive; False when it was not kept (the caller ends it; why is said where there is one)."""
        if not (self.keep_s > 0 and server.ready and server.alive):
            return False
        folder = self._folder()
        if folder is None:
            return False
        why = server.park(folder, kept_digest(key), key[0], self.keep_s)
        if why is not None:
            self.unparked.append(f"{side_words(key[0])}'s fork server was not kept: {why}")
            return False
        self.parked[key] = server.parked_pid
        # However many sides and campaigns: at most this many wait (this session's older ones may go too).
        ended = {s.pid for s in keptservers.trim(folder, keptservers.most_kept())}
        self.parked = {k: pid for k, pid in self.parked.items() if pid not in ended}
        return True

    def retire(self, python: str, env: Mapping[str, str], name: str, imports: Sequence[str] = ()) -> bool:
        """Keep (``_park``) or end the server for ``python``, ``env`` and side ``name`` (its last cell has ended)
        and wait for it to be gone from this session; False if there is none.  A server leaves at end of input
        once its cells have ended, and a retired server's last cell has, so the wait is milliseconds and no
        retired server is alive when the next cell starts.  A cell that needs it after all takes it again if it
        was kept, else starts a new one."""
        key = server_key(python, env, name, self.kept_imports(python, env, name, imports))
        server = self.servers.pop(key, None)
        if server is None:
            return False
        if not self._park(key, server):
            server.close()
        return True

    def close(self) -> list[str]:
        """End every server, or keep the most recently used (``keep_s``, at most ``keptservers.most_kept()``) for
        the next session; the lines that say what was kept and what could not be.  Those ended all get end of input
        first, so their exits overlap instead of adding up."""
        servers = sorted(self.servers.items(), key=lambda item: item[1].last_used)  # the most recent parked last
        self.servers.clear()
        ending = []
        for key, server in servers:
            if self.keep_s > 0 and isinstance(server.link, _Taken) and not server.ready:
                try:  # taken ahead and never used: it answers in milliseconds, then waits on
                    server.wait_ready()
                except ForkServerError:
                    continue  # it ended (stale, busy, gone)
            if not self._park(key, server):
                ending.append(server)
        for server in ending:
            server.end_input()
        deadline = time.monotonic() + _EXIT_WAIT_S
        for server in ending:
            server.wait_exit(max(0.0, deadline - time.monotonic()))
        lines = list(self.unparked)
        waiting = sorted(key[0] for key, pid in self.parked.items() if keptservers.is_server(pid))
        if waiting:
            sides = " and ".join(f"{side_words(name)}'s" for name in sorted(set(waiting)))
            lines.append(f"{len(waiting)} fork server(s) kept for {self.keep_s:g} s ({sides}): a next session of "
                         "the same interpreter, folder and environments forks its cells without importing again "
                         "(abbench servers lists them, abbench servers --stop ends them; --ab-keep-servers 0 keeps "
                         "none)")
        return lines


def _tail(path: Path, max_bytes: int = 2000) -> str:
    try:
        data = path.read_bytes()[-max_bytes:]
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")
