"""Loading a campaign file: finding one by its text, importing it (bounded, its helpers kept per folder), and
checking what it declares against the API in ``campaign.model``.

The pytest plugin imports this at collection time, so it must not import torch or triton.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import sys
import threading
import traceback
import weakref
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

from pytest_abbench.campaign.model import (KEPT_OUT, Campaign, CampaignError, CampaignSkipped, Op,
                                           Switch, check_shapes, short_value, validate_name)

_OPS_LINE = re.compile(r"^OPS\s*[:=]", re.M)
_IMPORTS_PLUGIN = re.compile(r"\bpytest_abbench\b")
TEST_MODULE_PREFIXES = ("test_", "conftest")


def _source(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def looks_like_campaign(path: Path) -> bool:
    """A .py file is a campaign when it imports pytest_abbench and assigns OPS at top level.

    Read as text so that collecting a directory imports nothing but campaigns.
    Files pytest collects as test modules (``test_*``, ``conftest``) never are.
    """
    if path.suffix != ".py" or path.name.startswith(TEST_MODULE_PREFIXES):
        return False
    text = _source(path)
    return text is not None and bool(_OPS_LINE.search(text) and _IMPORTS_PLUGIN.search(text))


def why_not_campaign(path: Path) -> str | None:
    """Why a .py file that mentions pytest_abbench or OPS is not collected as a campaign; None when unrelated."""
    text = _source(path)
    if text is None or path.suffix != ".py" or looks_like_campaign(path):
        return None
    has_ops, imports = bool(_OPS_LINE.search(text)), bool(_IMPORTS_PLUGIN.search(text))
    if not (has_ops or imports):
        return None
    if path.name.startswith(TEST_MODULE_PREFIXES):
        return (f"{path.name} is collected as a test module, never as a campaign (files named test_*.py or "
                "conftest.py): rename the campaign file")
    if not has_ops:
        return ("it has no top-level `OPS = [...]` line; a campaign is found by that line, read as text "
                "(an OPS imported or built by a function is not seen)")
    return "it does not import pytest_abbench (a campaign is found by `from pytest_abbench import ...` and OPS)"


def module_name_for(path: Path, rootdir: Path | None = None) -> str:
    """The campaign's module name, from its path relative to ``rootdir`` (the session's rootdir; default the
    current folder): ``campaigns/mm.py`` is ``abbench_campaign__campaigns__mm``.

    Autotune records key kernels by qualified name and are compared across
    runs, hosts and moved roots: nothing machine-specific (no absolute path)
    may be in it.  Two campaign files of one session still get two names.
    """
    relative = Path(os.path.relpath(path.resolve(), (rootdir or Path.cwd()).resolve())).with_suffix("")
    parts = ["up" if part == ".." else re.sub(r"[^A-Za-z0-9_]", "_", part) for part in relative.parts]
    return "abbench_campaign__" + "__".join(parts)


# Campaign files import helpers that sit beside them (``from _kernels.switches import x``), by top-level
# name.  Two campaign folders may each have a ``_kernels``, and one process (collection, an xdist worker)
# imports campaigns of both, while sys.modules holds one module per name.  So each folder keeps the
# helper modules its campaigns imported, and they are in sys.modules only while a campaign of that
# folder is imported.  A cell child imports one campaign, so its build and setup hook, which may import
# more helpers later, find that folder first on sys.path and its helpers in sys.modules.
_FOLDER_HELPERS: dict[Path, dict[str, ModuleType]] = {}


def _enter_folder(folder: Path) -> set[str]:
    """Make ``folder``'s helpers the ones an import finds; returns the module names imported before."""
    entry = str(folder)
    sys.path[:] = [entry, *(p for p in sys.path if p != entry)]
    for other, helpers in _FOLDER_HELPERS.items():
        if other != folder:
            for name, module in helpers.items():
                if sys.modules.get(name) is module:
                    del sys.modules[name]
    sys.modules.update(_FOLDER_HELPERS.get(folder, {}))
    return set(sys.modules)


def _helpers_imported(folder: Path, before: set[str]) -> dict[str, ModuleType]:
    """The modules imported since ``before`` whose top-level module or package is a file or folder in
    ``folder`` (its ``_kernels``); a library the helpers import lives elsewhere and is shared."""
    found: dict[str, ModuleType] = {}
    for name in set(sys.modules) - before:
        top = name.partition(".")[0]
        spec = getattr(sys.modules.get(top), "__spec__", None)
        if spec is None:
            continue
        places = list(spec.submodule_search_locations or ()) or ([spec.origin] if spec.origin else [])
        if any(Path(p).parent == folder and Path(p).name.partition(".")[0] == top for p in places):
            module = sys.modules.get(name)
            if module is not None:
                found[name] = module
    return found


_IMPORT_THREADS: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()  # the threads bounded imports run in


@contextlib.contextmanager
def _threads_as_daemons(started: list[str]) -> Iterator[None]:
    """Threads started while a campaign file is imported run as daemons; ``started`` gets their names.

    A campaign is imported by pytest's own process (collection) and by every
    cell: a thread it starts at import and never stops would keep pytest from
    exiting after its summary, and each cell until its timeout.
    """
    original = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        # A thread made by a bounded import's own thread (a daemon) inherits daemon=True: it counts too.
        if not thread.daemon or threading.current_thread() in _IMPORT_THREADS:
            thread.daemon = True
            started.append(thread.name)
        original(thread)

    setattr(threading.Thread, "start", start)
    try:
        yield
    finally:
        setattr(threading.Thread, "start", original)


def _where_it_waits(thread: threading.Thread) -> str:
    """The innermost frames of ``thread``'s stack, as ``file:line in function`` (what a hung import waits in)."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return "its stack could not be read"
    frames = traceback.extract_stack(frame)[-3:]
    return "; ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in reversed(frames))


def _exec_bounded(exec_module: Callable[[], None], path: Path, timeout_s: float) -> None:
    """Run ``exec_module`` in a daemon thread and wait ``timeout_s`` for it.

    A campaign whose import hangs (a lock, a network call, an endless loop) would otherwise hang pytest's
    collection with no bound and no word; the thread is a daemon, so the process can still end.
    """
    failure: list[BaseException] = []

    def run() -> None:
        try:
            exec_module()
        except BaseException as exc:  # handed to the caller's thread, which decides what it means
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"abbench-import-{path.name}", daemon=True)
    _IMPORT_THREADS.add(thread)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise CampaignError(f"{path}: importing it did not finish in {timeout_s:g} s (--ab-import-timeout); it waits "
                            f"in {_where_it_waits(thread)}")
    if failure:
        raise failure[0]


def _exit_line(exc: SystemExit) -> str:
    """`` at FILE:LINE`` of the innermost frame that raised ``exc`` (the sys.exit call), or ""."""
    tb = exc.__traceback__
    frame = None
    while tb is not None:
        frame, tb = tb, tb.tb_next
    return f" at {Path(frame.tb_frame.f_code.co_filename).name}:{frame.tb_lineno}" if frame is not None else ""


def import_campaign_file(path: str | Path, rootdir: Path | None = None, module_name: str | None = None,
                         import_timeout_s: float | None = None) -> tuple[ModuleType, list[str]]:
    """Import the Python file at ``path`` as a campaign module: (the module, the threads its import started).

    ``module_name``: the name the session gave it (a cell is told it); else
    ``module_name_for(path, rootdir)``.  ``import_timeout_s``: how long the
    import may take (pytest's collection); None waits as long as it takes
    (a cell, which its own deadline bounds).
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise CampaignError(f"{path}: no such campaign file")
    name = module_name or module_name_for(path, rootdir)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CampaignError(f"{path}: cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    before = _enter_folder(path.parent)
    sys.modules[name] = module
    daemons: list[str] = []
    try:
        with _threads_as_daemons(daemons):
            exec_module = functools.partial(spec.loader.exec_module, module)
            if import_timeout_s is None:
                exec_module()
            else:
                _exec_bounded(exec_module, path, import_timeout_s)
    except CampaignError:
        sys.modules.pop(name, None)
        raise
    except SystemExit as exc:  # sys.exit() or exit() at the file's top level: its import never finished
        del sys.modules[name]
        line = _exit_line(exc)
        raise CampaignError(f"{path}: importing it called sys.exit({exc.code!r}){line}, so it defines nothing to "
                            "run (a script's checks or argument parsing at import belong under "
                            "`if __name__ == '__main__':`)") from None
    except Exception as exc:
        del sys.modules[name]
        raise CampaignError(import_failure(path, exc)) from None
    finally:
        _FOLDER_HELPERS.setdefault(path.parent, {}).update(_helpers_imported(path.parent, before))
    return module, daemons


def load_campaign(path: str | Path, rootdir: Path | None = None, module_name: str | None = None,
                  import_timeout_s: float | None = None) -> Campaign:
    """Import a campaign file (``import_campaign_file``) and validate what it declares."""
    path = Path(path).resolve()
    module, daemons = import_campaign_file(path, rootdir, module_name, import_timeout_s)

    skip = getattr(module, "SKIP", None)
    if skip:
        raise CampaignSkipped(f"{path.name}: {skip}")
    ops = getattr(module, "OPS", None)
    if not isinstance(ops, (list, tuple)) or not ops:
        raise CampaignError(f"{path}: OPS must be a non-empty list of Op")
    seen: set[str] = set()
    for i, op in enumerate(ops):
        if not isinstance(op, Op):
            raise CampaignError(f"{path}: OPS[{i}] is {type(op).__name__}, not Op")
        validate_name(op.name, "op", path)
        if op.name in seen:
            raise CampaignError(f"{path}: op {op.name!r} is declared twice")
        seen.add(op.name)
        if not callable(op.build):
            raise CampaignError(f"{path}: op {op.name!r}: build is not callable")
        check_shapes(op, path)
    switch = getattr(module, "SWITCH", Switch())
    if not isinstance(switch, Switch):
        raise CampaignError(f"{path}: SWITCH is {type(switch).__name__}, not Switch")
    skip_timed = getattr(module, "SKIP_TIMED", None)
    if skip_timed is not None and not isinstance(skip_timed, str):
        raise CampaignError(f"{path}: SKIP_TIMED is {type(skip_timed).__name__}, not a reason (str) or None")
    if isinstance(switch.build_only_env, str) or not all(isinstance(n, str) and n for n in switch.build_only_env):
        raise CampaignError(f"{path}: SWITCH.build_only_env is {short_value(switch.build_only_env)}, not a tuple of "
                            "variable names (e.g. build_only_env=(\"IMPL\",))")
    imports = module_names(getattr(module, "SERVER_IMPORTS", ()), path, "SERVER_IMPORTS", "flag_gems")
    unused = module_names(getattr(module, "UNUSED_IMPORTS", ()), path, "UNUSED_IMPORTS", "peft")
    for name in unused:  # a module kept out takes its submodules with it, and a package its kept-out parent
        clash = next((m for m in imports if m == name or m.startswith(name + ".") or name.startswith(m + ".")), None)
        if clash is not None:
            raise CampaignError(f"{path}: UNUSED_IMPORTS keeps {name!r} out, and SERVER_IMPORTS imports {clash!r}")
    return Campaign(path, module, list(ops), switch, skip_timed or None, daemons,
                    tuple(KEPT_OUT + name for name in unused) + imports)


_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def module_names(value: object, path: Path, attribute: str, example: str) -> tuple[str, ...]:
    """A campaign's ``SERVER_IMPORTS`` or ``UNUSED_IMPORTS``: a tuple or list of module names, each once."""
    if not isinstance(value, (tuple, list)):
        raise CampaignError(f"{path}: {attribute} is {type(value).__name__}, not a tuple of module names "
                            f"(e.g. {attribute} = (\"{example}\",))")
    names: list[str] = []
    for i, name in enumerate(value):
        if not isinstance(name, str) or not _MODULE_NAME.match(name):
            raise CampaignError(f"{path}: {attribute}[{i}] is {short_value(name)!s}, not a module name "
                                f"(dotted Python identifiers, e.g. \"{example}\")")
        if name in names:
            raise CampaignError(f"{path}: {attribute} names {name!r} twice")
        names.append(name)
    return tuple(names)


def import_failure(path: Path, exc: BaseException) -> str:
    """One message for a campaign that cannot be imported: the error and the campaign's own frames."""
    if isinstance(exc, SyntaxError) and exc.filename and Path(exc.filename).resolve() == path:
        where = f"{path}:{exc.lineno}"
        line = (exc.text or "").rstrip("\n")
        caret = f"\n    {line}\n    {' ' * max((exc.offset or 1) - 1, 0)}^" if line else ""
        return f"{where}: syntax error: {exc.msg}{caret}"
    # The loader's and importlib's frames say nothing about the campaign: keep from its first line on.
    frames = list(traceback.extract_tb(exc.__traceback__))
    start = next((i for i, f in enumerate(frames) if Path(f.filename) == path), len(frames))
    stack = "".join(traceback.format_list(frames[start:])).rstrip()
    error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return f"{path}: importing it raised {error}" + (f"\n{stack}" if stack else "")
