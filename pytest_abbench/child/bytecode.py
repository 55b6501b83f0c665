"""Bytecode for what a fork server imports, where the installed packages keep none beside their sources.

An image built with ``PYTHONDONTWRITEBYTECODE=1`` or ``pip install --no-compile`` has no ``__pycache__`` beside
its packages' sources, so every process compiles all it imports, every time: on the H100 machines a fork server's
``import torch, triton, liger_kernel.ops`` compiled torch's 991 modules, sympy's 419 and more, and took 8.7-13.9 s
of a cold Liger-Kernel run's first cell.  Where torch (which every server imports first, and which is most of its
import) has none, the server points Python at a bytecode folder in the user's cache (``sys.pycache_prefix``, what
``PYTHONPYCACHEPREFIX`` sets) and, on 8 cores or more, compiles the sources of the distributions it will import, and
of those they require, into it with a process per core while it imports them (``start``, then ``Prepared.finish``
before any fork); what it imports beyond them is written there as it goes.  The folder mirrors the sources' absolute paths, and each file is named for its interpreter, so every
environment on the machine shares it; Python checks each file against its source's date and size when it loads it.
The packages' own folders are never written.  The next server on the machine finds it all there.

``ABBENCH_BYTECODE``: ``off`` leaves Python as it is; a folder is used even where the packages keep their own
bytecode (which the prefix hides: on 8 cores or more it is copied there).  A ``PYTHONPYCACHEPREFIX`` of the user's own
is left as it is.  The cells forked from the server read the folder and write as their interpreter was told.
"""

from __future__ import annotations

import fcntl
import functools
import importlib.metadata
import importlib.util
import multiprocessing
import os
import py_compile
import re
import shutil
import signal
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from pytest_abbench.core.prctl import parent_death_signal
from pytest_abbench.core import envnames
from pytest_abbench.core.usercache import user_cache
from pytest_abbench.core.private import open_no_follow, private_folder

OFF = "off"
LOCK_FILE = ".abbench-compile.lock"  # held while one server's pool compiles; another server's imports read its work
# Compiling a server's distributions ahead is more work than its imports compile (torch's 2371 sources and sympy's
# 1533 against the 991 and 419 it imports): on 2 cores it took 9.5 s where the imports compiled for about 6 s.
# With fewer cores the folder only keeps what the imports compile, for the next server.
AHEAD_MIN_CORES = 8
_CHUNKS_PER_PROCESS = 8  # small enough that no process is left with a long tail, large enough to cost little
_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRA_MARKER = re.compile(r"\bextra\s*==")


def lacks_bytecode(module: str) -> bool:
    """Whether ``module`` (importable, found without importing it) is Python source with no bytecode beside it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    origin = spec.origin if spec is not None else None
    if origin is None or not origin.endswith(".py"):
        return False  # not found, a namespace package or an extension: nothing to compile
    return not os.path.exists(_bytecode_path(origin, None))


def _bytecode_path(source: str, folder: Path | None) -> str:
    """Where Python reads ``source``'s bytecode with ``folder`` as its prefix; None: in the source's own
    ``__pycache__`` (whatever prefix is in force)."""
    prefix, sys.pycache_prefix = sys.pycache_prefix, None if folder is None else str(folder)
    try:
        return importlib.util.cache_from_source(source)
    finally:
        sys.pycache_prefix = prefix


def distributions_of(modules: Sequence[str]) -> dict[str, list[str]]:
    """The installed distributions that provide ``modules`` and that they require (extras left out), by name,
    each with the absolute paths of its Python sources.  A module no distribution is found for is left out."""
    provides = functools.cache(importlib.metadata.packages_distributions)
    todo: list[str] = []
    for module in modules:
        top = module.split(".")[0]
        # Most distributions are named for their package; the full map reads every installed one's files.
        todo += [top] if _distribution(top) is not None else provides().get(top, [])
    found: dict[str, list[str]] = {}
    seen: set[str] = set()
    while todo:
        name = todo.pop(0)  # the first module's distribution first: its sources are compiled first
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        dist = _distribution(name)
        if dist is None:
            continue
        found[dist.metadata["Name"] or name] = sorted(
            str(path.locate()) for path in dist.files or () if path.suffix == ".py")
        for requirement in dist.requires or ():
            named = _REQUIREMENT_NAME.match(requirement)
            if named and not _EXTRA_MARKER.search(requirement):
                todo.append(named.group(0))
    return found


def _distribution(name: str) -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution(name)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


@dataclass
class Prepared:
    """What ``start`` did and its pool is doing: the folder Python reads bytecode from, and what went there."""

    folder: Path
    why: str  # why the folder is used
    distributions: list[str] = field(default_factory=list)
    compiled: int = 0
    copied: int = 0  # bytecode the packages keep beside their sources, copied (the prefix hides it)
    current: int = 0  # already there, as new as its source
    failed: int = 0  # not compiled (a test file in another Python's syntax) or not written: left to the import
    processes: int = 0  # compiling beside the imports; 0: none (too few cores, or another server's pool is at it)
    started: float = field(default_factory=time.monotonic)
    ended: float = 0.0  # when the pool's last chunk was done
    pending: list[Future[tuple[int, int, int]]] = field(default_factory=list)
    pool: ProcessPoolExecutor | None = None
    lock: int | None = None  # the lock file, held while the pool compiles
    busy: bool = False  # another server's pool held the lock: this one only imports
    broken: str = ""  # why the pool failed, if it did

    def chunk_done(self, _: Future[tuple[int, int, int]]) -> None:
        self.ended = max(self.ended, time.monotonic())

    def finish(self) -> str:
        """Wait for the pool (before any fork: none of its threads may be left) and say what was done.  Never
        raises: a pool that broke (a process killed) costs only the head start it was to give."""
        try:
            for future in self.pending:
                try:
                    compiled, copied, failed = future.result()
                except Exception as exc:  # noqa: BLE001  (BrokenProcessPool, or a chunk that raised)
                    self.broken = f"{type(exc).__name__}: {exc}"[:200]
                    continue
                self.compiled, self.copied, self.failed = (self.compiled + compiled, self.copied + copied,
                                                           self.failed + failed)
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)
                self.pool = None
            if self.lock is not None:
                os.close(self.lock)  # the pool's processes closed their copies: the lock is free
                self.lock = None
        if self.busy:
            what = "another server's processes are compiling there; the imports read what they wrote"
        elif self.broken and not self.distributions:
            what = "the imports compile there what it lacks"
        elif not self.distributions:
            what = f"the imports compile there what it lacks (no compiling ahead on fewer than {AHEAD_MIN_CORES} cores)"
        else:
            names = ", ".join(self.distributions[:6]) + (f" and {len(self.distributions) - 6} more"
                                                         if len(self.distributions) > 6 else "")
            what = (f"{self.current} sources of {names} already there, {self.compiled} compiled and {self.copied} "
                    f"copied there by {self.processes} processes beside the imports in "
                    f"{max(0.0, self.ended - self.started):.1f}s")
        return (f"[abbench] fork server: bytecode read from {self.folder} ({self.why}): {what}"
                + (f"; {self.failed} not compiled or not written (left to the import)" if self.failed else "")
                + (f"; compiling ahead failed ({self.broken}): the imports compiled the rest" if self.broken else ""))


def folder_for(environ: Mapping[str, str], first: str) -> tuple[Path | None, str]:
    """The bytecode folder a server importing ``first`` (torch) uses, and why; None and why not, for a line."""
    chosen = environ.get(envnames.ABBENCH_BYTECODE, "")
    if chosen == OFF:
        return None, f"{envnames.ABBENCH_BYTECODE}=off"
    if sys.pycache_prefix is not None:
        return None, f"Python already reads bytecode from {sys.pycache_prefix} (PYTHONPYCACHEPREFIX)"
    if chosen:
        if not os.path.isabs(chosen):
            return None, f"{envnames.ABBENCH_BYTECODE}={chosen!r} is neither 'off' nor an absolute folder"
        return Path(chosen), f"{envnames.ABBENCH_BYTECODE}"
    if not lacks_bytecode(first):
        return None, f"{first} keeps its bytecode beside its sources"
    return user_cache(environ) / "bytecode", f"{first} keeps no bytecode beside its sources"


def start(modules: Sequence[str], environ: Mapping[str, str], cores: int,
          close_in_pool: Sequence[int] = ()) -> tuple[Prepared | None, str]:
    """Point this process at a bytecode folder for ``modules`` (the first decides, see ``folder_for``) and, with
    ``AHEAD_MIN_CORES`` or more, start compiling their distributions' sources into it while this process imports
    them (``Prepared.finish`` waits); None and why not.  Python writes what else it imports there too, even under
    PYTHONDONTWRITEBYTECODE: the folder is this tool's, not the packages'.  ``close_in_pool``: descriptors of this
    process a pool process must not keep (the server's reply pipe).  Never raises: the folder only saves time."""
    try:
        folder, why = folder_for(environ, modules[0])
        if folder is None:
            return None, why
        # Python runs what it finds there: a folder another user can write is never used (a planted .pyc).
        private_folder(folder)
        lock = open_no_follow(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    except (OSError, RuntimeError) as exc:  # RuntimeError: no home folder (a uid without a passwd entry)
        return None, f"no bytecode folder: {exc}"
    done = Prepared(folder, why)
    try:
        if cores >= AHEAD_MIN_CORES:
            _start_pool(done, lock, modules, cores, close_in_pool)
    except Exception as exc:  # noqa: BLE001  (broken metadata, a pool that cannot start: the imports compile)
        done.broken = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        if done.lock is None:  # not taken by a pool (``finish`` closes it)
            os.close(lock)
    sys.pycache_prefix = str(folder)
    sys.dont_write_bytecode = False
    return done, why


def _start_pool(done: Prepared, lock: int, modules: Sequence[str], cores: int, close_in_pool: Sequence[int]) -> None:
    """Take the folder's lock and start the pool on the sources not there yet; another server's pool holding the
    lock: nothing (the other side's server, started with it, imports what that pool writes)."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        done.busy = True
        return
    done.lock = lock
    sources = distributions_of(modules)
    done.distributions = sorted(sources, key=str.lower)
    todo = []
    for source in (path for name in sources for path in sources[name]):  # the first module's first
        if _is_current(_bytecode_path(source, done.folder), source):
            done.current += 1
        else:
            todo.append(source)
    done.ended = time.monotonic()
    if todo:
        done.processes = min(cores - 1, len(todo))  # one core imports
        count = min(len(todo), done.processes * _CHUNKS_PER_PROCESS)
        done.pool = ProcessPoolExecutor(done.processes, mp_context=multiprocessing.get_context("fork"),
                                        initializer=_pool_process,
                                        initargs=(os.getpid(), str(done.folder), (lock, *close_in_pool)))
        done.pending = [done.pool.submit(_compile_chunk, todo[i::count]) for i in range(count)]
        for future in done.pending:
            future.add_done_callback(done.chunk_done)


def _pool_process(server: int, folder: str, close: Sequence[int]) -> None:
    """A pool process: ends with its server (killed while importing, it never shuts the pool down), keeps none of
    its descriptors (the lock, the reply pipe), and writes to the server's folder."""
    parent_death_signal(signal.SIGKILL)
    if os.getppid() != server:
        os._exit(1)  # the server died before the signal was asked for
    for fd in close:
        try:
            os.close(fd)
        except OSError:
            pass
    sys.pycache_prefix = folder


def _is_current(bytecode: str, source: str) -> bool:
    """Whether ``bytecode`` is what Python would accept for ``source``: its header's date and size are the
    source's (or it is checked against the source's hash when read)."""
    try:
        with open(bytecode, "rb") as file:
            header = file.read(16)
        stat = os.stat(source)
    except OSError:
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(header[4:8], "little"):  # hash-based: the import compares it with the source's hash
        return True
    return (int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(header[12:16], "little") == stat.st_size & 0xFFFFFFFF)


def _compile_chunk(sources: list[str]) -> tuple[int, int, int]:
    """In a pool process (its prefix is the folder): each source's bytecode into the folder, copied from beside it
    where that is current, else compiled; (compiled, copied, not compiled or not written)."""
    compiled = copied = failed = 0
    for source in sources:
        target = importlib.util.cache_from_source(source)
        beside = _bytecode_path(source, None)
        try:
            if _is_current(beside, source):
                os.makedirs(os.path.dirname(target), exist_ok=True)
                partial = f"{target}.{os.getpid()}.tmp"
                shutil.copyfile(beside, partial)
                os.replace(partial, target)  # a reader sees a whole file or none
                copied += 1
            else:
                py_compile.compile(source, cfile=target, doraise=True)  # writes through a temporary file too
                compiled += 1
        except (py_compile.PyCompileError, OSError, ValueError, SyntaxError):
            failed += 1
    return compiled, copied, failed
