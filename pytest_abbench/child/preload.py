"""A campaign's ``SERVER_IMPORTS``: imported once by each side's fork server, before it forks cells.

The server (``child/server.py``) imports each module with ``import_in_server``,
which refuses one that a forked cell could not use: one that initialised CUDA
(a CUDA context does not survive fork), or one that read a variable whose value
differs per cell (it would keep the server's, for every cell).  A cell
(``child/measure.py``) then imports, with ``import_in_cell``, those its server
did not, so a cell forked from a server, a cell of a refused module and an
exec'd cell all start measuring with the same modules loaded; its identity
names the version of each (``versions``).

A campaign's ``UNUSED_IMPORTS`` travel in the same list as ``!name``
(``campaign.model.KEPT_OUT``): the server, and a cell that was not forked from one, set
``sys.modules[name] = None`` before any other of the list is imported, so a
library's ``try: import name`` finds it missing (``keep_out``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import sys
from dataclasses import dataclass
from typing import Iterator, Sequence

from pytest_abbench.campaign.model import kept_out_name


def keep_out(name: str) -> str | None:
    """Make ``import name`` fail in this process (None), or say why it cannot (imported already)."""
    if sys.modules.get(name, None) is not None:
        return f"{name} was imported before it could be kept out"
    sys.modules[name] = None  # type: ignore[assignment]  # import raises ModuleNotFoundError (an ImportError)
    return None


def kept_out_only(modules: Sequence[str]) -> None:
    """Keep out the ``!name`` entries of ``modules`` and import nothing (a compile-only process)."""
    for entry in modules:
        name = kept_out_name(entry)
        if name is not None:
            keep_out(name)


# The modules this process's fork server imported before it forked this cell (empty: not forked from a server,
# or the server imported none).  Set in the server; a forked cell inherits it.
IMPORTED_BY_SERVER: list[str] = []


class ImportRefused(Exception):
    """A module a fork server must not keep: ``why`` says what it did."""

    def __init__(self, module: str, why: str) -> None:
        super().__init__(f"{module}: {why}")
        self.module = module
        self.why = why


class _WatchedEnviron(os._Environ):  # type: ignore[type-arg]
    """``os.environ`` while a module is imported in the server: it notes each variable looked up."""

    looked_up: set[str] = set()

    def __getitem__(self, key: str) -> str:
        _WatchedEnviron.looked_up.add(key)
        value: str = super().__getitem__(key)
        return value


def _cuda_initialized() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _fork_poisoned() -> bool:
    """A child forked now would find CUDA unusable: torch marks a fork 'bad' once the parent queried the CUDA
    runtime (``torch.cuda.is_available()`` counts devices through it), even with no context made, and the
    child's first CUDA call then raises 'Cannot re-initialize CUDA in forked subprocess'.  Only a child can see
    that mark, so one is forked to look."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the probe child
        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) != 0


# torch.cuda.is_available() asks NVML instead of the CUDA runtime while this is set, so a library that asks it
# at import (Liger-Kernel's infer_device) leaves the server fit to fork.  Set in the server only: each cell runs
# with the environment its request carries.
NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"


def import_in_server(modules: Sequence[str], per_cell: Sequence[str]) -> Iterator[tuple[str, str | None]]:
    """Import each module; yield (module, None) when it is kept, (module, why) when it could not be imported
    (the server carries on without it).  Raise ImportRefused for one the server must not fork with: it is
    imported already, so the server has to end (``per_cell``: the variables whose value differs per cell)."""
    os.environ.setdefault(NVML_CHECK_ENV, "1")
    for module in modules:
        kept_out = kept_out_name(module)
        if kept_out is not None:
            why = keep_out(kept_out)
            if why is None:
                IMPORTED_BY_SERVER.append(module)
            yield module, why
            continue
        _WatchedEnviron.looked_up = set()
        # A lookup of a variable the server does not have goes through __getitem__ (os.getenv, environ.get,
        # "in"); copying the environment reads only the variables it has, and the per-cell ones are not there.
        os.environ.__class__ = _WatchedEnviron
        try:
            importlib.import_module(module)
        except Exception as exc:  # a broken or missing module: the cells import it themselves, and say why
            failed: str | None = f"importing it raised {type(exc).__name__}: {exc}"
        else:
            failed = None
        finally:
            os.environ.__class__ = os._Environ
        if _cuda_initialized():
            raise ImportRefused(module, "importing it initialised CUDA, and a forked cell cannot use a CUDA "
                                        "context made before the fork")
        if _fork_poisoned():
            raise ImportRefused(module, "importing it queried the CUDA runtime (a device count or property), and "
                                        "torch refuses CUDA in a process forked after that")
        read = sorted(_WatchedEnviron.looked_up & set(per_cell))
        if read:
            raise ImportRefused(module, f"importing it read {', '.join(read)}, whose value differs per cell; "
                                        "a module imported by the server keeps what it read for every cell")
        if failed is None:
            IMPORTED_BY_SERVER.append(module)
            version_of(module)  # found once here, inherited by every forked cell (it scans every distribution)
        yield module, failed


@dataclass(frozen=True)
class CellImports:
    """What a cell's identity says of its campaign's SERVER_IMPORTS."""

    versions: str  # "name==version ..." as loaded in this cell
    by_server: str  # the names its fork server had imported ("" when none)


def import_in_cell(modules: Sequence[str]) -> CellImports:
    """Import each module this cell's server did not (an ImportError is the cell's, as in the campaign's own
    import); their versions as loaded here."""
    for module in modules:
        kept_out = kept_out_name(module)
        if kept_out is not None:
            keep_out(kept_out)  # imported already: its version says so below
        else:
            importlib.import_module(module)
    return CellImports(" ".join(f"{module}=={version_of(module)}" for module in modules),
                       " ".join(m for m in modules if m in IMPORTED_BY_SERVER))


@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    """Top-level package -> the distributions that provide it: a scan of every installed distribution, made
    once per process (a forked cell inherits the server's)."""
    return dict(importlib.metadata.packages_distributions())


def _tops_of(dist: importlib.metadata.Distribution) -> set[str]:
    """The top-level packages ``dist`` installs: its ``top_level.txt``, else the first part of each file it lists
    (how ``packages_distributions`` reads one distribution)."""
    declared = (dist.read_text("top_level.txt") or "").split()
    if declared:
        return set(declared)
    return {f.parts[0].removesuffix(".py") for f in dist.files or () if f.parts and not f.parts[0].endswith("-info")}


def _named_after(top: str) -> str | None:
    """The version of the distribution named after the package ``top`` (``liger_kernel`` or ``liger-kernel``), where
    that distribution installs it; None otherwise.  One distribution read instead of a scan of all of them: the scan
    took 0.7 s of each fork server's start on the H200 host (benchmarks/server_import_probe.py)."""
    for name in dict.fromkeys((top, top.replace("_", "-"))):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if top in _tops_of(dist):
            return dist.version
    return None


def version_of(module: str) -> str:
    """The loaded module's version: its top package's ``__version__``, else its distribution's; "unknown";
    "missing" for a kept-out one that stayed out."""
    kept_out = kept_out_name(module)
    if kept_out is not None:
        return "missing" if sys.modules.get(kept_out, 0) is None else "imported"
    top = module.split(".", 1)[0]
    version = getattr(sys.modules.get(top), "__version__", None)
    if isinstance(version, str):
        return version
    named = _named_after(top)
    if named is not None:
        return named
    for dist in _distributions().get(top, []):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"
