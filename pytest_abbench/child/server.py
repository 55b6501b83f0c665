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
import importlib
import json
import os
import select
import signal
import sys
import time
from typing import IO, Any, Sequence

from pytest_abbench.campaign.model import kept_out_name
from pytest_abbench.child import bytecode
from pytest_abbench.child.forking import fork_and_run
from pytest_abbench.child.preload import ImportRefused, import_in_server
from pytest_abbench.core import envnames
from pytest_abbench.core.cores import worker_share
from pytest_abbench.core.prctl import parent_death_signal



def _send(reply: IO[str], message: dict[str, Any]) -> None:
    try:
        reply.write(json.dumps(message) + "\n")
        reply.flush()
    except OSError:
        pass  # the session is gone: its end of input is what this server acts on


def _run_cell(request: dict[str, Any], server_pid: int, reply_fd: int,
              wakeup: tuple[int, int]) -> int:  # pragma: no cover - forked
    """In the forked process: become the cell's session leader with its log and environment, run the cell."""
    signal.set_wakeup_fd(-1)  # the server's way of hearing its children end, not the cell's
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in wakeup:
        os.close(fd)
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


def serve(source: int, reply: IO[str]) -> None:
    """Fork one cell per request line read from ``source``, at once, even while others run; report each cell's
    end.  Returns once input has ended and every cell has."""
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
    try:
        while open_input or running:
            ready, _, _ = select.select(([source] if open_input else []) + [wakeup[0]], [], [])
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
            chunk = os.read(source, 65536)
            open_input = bool(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if not open_input:  # a last request without its newline
                lines, pending = [*lines, pending], b""
            for line in lines:
                if not line.strip():
                    continue
                try:
                    request = json.loads(line)
                except ValueError:  # cut short: the session died while it wrote
                    print(f"[abbench] fork server: not a request, ignored: {line[:200]!r}", file=sys.stderr,
                          flush=True)
                    continue
                pid = fork_and_run(lambda: _run_cell(request, me, reply.fileno(), wakeup))
                running.add(pid)
                _send(reply, {"pid": pid})
    finally:
        signal.set_wakeup_fd(-1)
        for fd in wakeup:
            os.close(fd)


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
    to its workers.  None where this Triton has no such function, or a file it hashes
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
    serve(sys.stdin.fileno(), reply)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without the interpreter's shutdown: with torch loaded it takes about a second, and the session waits
    # for a retired server to be gone before its next cell (nothing here needs finalising).
    os._exit(code)
