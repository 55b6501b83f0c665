"""The parent side of ``--ab-spawn fork``: one fork server per (interpreter, side environment), cells forked from it.

A fresh ``python -m pytest_abbench.child`` spends seconds importing torch; a
server (``pytest_abbench/child/server.py``) imports it once and forks each cell
from there.  ``ForkedCell`` has the part of ``subprocess.Popen`` that
``cellrun.run_child`` uses (``pid``, ``wait``, ``returncode``), so timeouts,
Ctrl-C and the process-group kill are the same code for both spawn methods.
Imports neither torch nor triton.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_abbench.core import envnames
from pytest_abbench.core.prctl import parent_death_signal
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
_EXIT_WAIT_S = 5.0  # a server leaves once input has ended and its cells have (os._exit, no interpreter shutdown):
# milliseconds when it is retired, since its last cell ended first
SERVER_MODULE = "pytest_abbench.child.server"


class ForkServerError(RuntimeError):
    """A server could not be started, or died: the message says which and why."""


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
            chunk = os.read(self.fd, 65536)
            if not chunk:
                rest, self.buffer = self.buffer, b""
                return rest or b""
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


class ForkServer:
    """One running server this session started: forks cells on request."""

    def __init__(self, python: str, env: Mapping[str, str], log_path: Path, imports: Sequence[str] = ()) -> None:
        """Start the server; it imports in the background until ``wait_ready`` (or the first ``spawn``);
        ``imports``: the campaign's SERVER_IMPORTS, imported after torch and Triton."""
        self.python = python
        self.log_path = log_path
        self.imports = tuple(imports)
        self.skipped: list[tuple[str, str]] = []  # (module, why) among ``imports`` that failed to import
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab", buffering=0) as log:
            self.proc = subprocess.Popen(
                [python, "-m", SERVER_MODULE, "--per-cell", ",".join(PER_CELL_ENV), *imports],
                env={k: v for k, v in env.items() if k not in PER_CELL_ENV},
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                start_new_session=True,  # a Ctrl-C at the terminal is the session's to handle, not the server's
                preexec_fn=lambda: parent_death_signal(signal.SIGKILL),
            )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.pid = self.proc.pid
        self.replies = _Lines(self.proc.stdout.fileno())
        self.ended: dict[int, int] = {}  # pid -> waitpid status, read while waiting for another cell's reply
        self.ready = False
        self.import_s = 0.0

    def wait_ready(self) -> None:
        """Block until the server has imported torch, Triton and its SERVER_IMPORTS; ImportRefused if it refused
        one, ForkServerError if it cannot start."""
        if self.ready:
            return
        line = self.replies.readline(_START_TIMEOUT_S)
        message = self._parse(line) if line else {}
        if message.get("refused"):
            self.close()
            raise ImportRefused(str(message["refused"]), str(message.get("why", "")))
        if not message.get("ready"):
            self.close()
            why = message.get("error") or ("no answer in {:g}s".format(_START_TIMEOUT_S) if line is None
                                           else self.gone_why())
            raise ForkServerError(f"the fork server ({self.python} -m {SERVER_MODULE}) did not start: {why}; "
                                  f"its log: {self.log_path}\n{_tail(self.log_path)}")
        self.ready = True
        self.import_s = float(message.get("import_s", 0.0))
        self.skipped = [(str(module), str(why)) for module, why in message.get("skipped", [])]

    def gone_why(self) -> str:
        return f"exited with rc {self.proc.returncode}"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

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
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
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
        self._send({"argv": list(argv), "env": dict(env), "log": str(log_path)})
        pid = int(self._answer("fork the cell", _START_TIMEOUT_S)["pid"])
        self.ended.pop(pid, None)  # a reused pid's end from long ago, never waited for, is not this cell's
        return ForkedCell(self, pid)

    def keep_status(self, message: dict[str, Any]) -> bool:
        """Keep a cell's end (``{"pid", "status"}``) for its ``ForkedCell.wait``; False for any other message."""
        if "status" not in message:
            return False
        self.ended[int(message["pid"])] = int(message["status"])
        return True

    def end_input(self) -> None:
        """Tell the server to exit (end of input); killed at once if it never got ready."""
        if not self.ready:
            self.proc.kill()  # started ahead for a side whose cells never came: its imports are not worth waiting for
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def wait_exit(self, timeout_s: float) -> None:
        """Wait for the exit ``end_input`` asked for; kill the server if it takes longer than ``timeout_s``."""
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

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

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.servers: dict[ServerKey, ForkServer] = {}
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

    def _say(self, line: str) -> None:
        self.notices.append(line)
        self.said.append(line)

    def held_imports(self, python: str, env: Mapping[str, str], name: str, imports: Sequence[str]) -> tuple[str, ...]:
        """``imports`` but those a server of this side refused this session."""
        base = server_key(python, env, name)
        return tuple(m for m in imports if (base, m) not in self.refused)

    def start(self, python: str, env: Mapping[str, str], name: str, imports: Sequence[str] = ()) -> ForkServer:
        """The server for ``python``, ``env`` and ``imports``, started now if there is none (or it died); does
        not wait for it.

        Starting the other side's server while this side's first cell runs
        overlaps its imports with useful work (they use a CPU, never the GPU).
        """
        imports = self.held_imports(python, env, name, imports)
        key = server_key(python, env, name, imports)
        server = self.servers.get(key)
        if server is not None and not server.alive and not server.ready:
            try:
                server.wait_ready()  # it exited: its last word is in the pipe already
            except ImportRefused as exc:  # started ahead, it refused a module: start one without it
                self._refused(server, exc, python, env, name)
                return self.start(python, env, name, imports)
            except ForkServerError:
                pass
        if server is not None and not server.alive:
            if server.ready:  # one that never got ready says why in wait_ready
                self.notices.append(f"the fork server for {name} (pid {server.pid}) died "
                                    f"({server.gone_why()}); starting a new one")
            server.close()
            server = None
        if server is None:
            self.started += 1
            server = ForkServer(python, env, self.log_dir / f"{name}-{self.started}.log", imports)
        self.servers[key] = server
        return server

    def retire(self, python: str, env: Mapping[str, str], name: str, imports: Sequence[str] = ()) -> bool:
        """End the server for ``python``, ``env`` and side ``name`` (its last cell has ended) and wait for it to
        be gone; False if there is none.  A server leaves at end of input once its cells have ended, and a retired
        server's last cell has, so the wait is milliseconds and no retired server is alive when the next cell
        starts.  A cell that needs it after all starts a new one."""
        key = server_key(python, env, name, self.held_imports(python, env, name, imports))
        server = self.servers.pop(key, None)
        if server is None:
            return False
        server.close()
        return True

    def close(self) -> None:
        """End every server; all get end of input first, so their exits overlap instead of adding up."""
        ending = list(self.servers.values())
        self.servers.clear()
        for server in ending:
            server.end_input()
        deadline = time.monotonic() + _EXIT_WAIT_S
        for server in ending:
            server.wait_exit(max(0.0, deadline - time.monotonic()))


def _tail(path: Path, max_bytes: int = 2000) -> str:
    try:
        data = path.read_bytes()[-max_bytes:]
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")
