"""pytest run inside a cell (and inside the collection probe) for ``--ab-pytest-benchmark``: the only module of the
cell side that imports pytest (setup.cfg's import contracts name it).

``collect_tests`` collects a test file as the user's session would and says which tests request ``benchmark``;
``run_test`` runs one of them with ``CapturingBenchmark`` as its ``benchmark`` fixture, which keeps what the test
hands it (the callable, its arguments, pedantic's setup) and calls it once, so the test's own assertions run.
pytest-benchmark is blocked in these runs: its fixture would time the callable itself, and its report hook
refuses any other ``benchmark`` fixture (``pytest_runtest_makereport`` raises TypeError).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import pytest

from pytest_abbench.campaign.model import digest

# Plugins blocked in the nested runs: this plugin (it would start a campaign session), pytest-benchmark (see above),
# xdist (one test, in this process), the cache (no .pytest_cache written from cells), pytest-timeout (the cell has
# the session's own deadline; its SIGALRM would be a second one).
BLOCKED_PLUGINS = ("abbench", "benchmark", "xdist", "cacheprovider", "timeout")
_NOT_REWRITTEN = "Module already imported so cannot be rewritten; pytest_abbench"
_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")
SUMMARY_CHARS = 80  # a parameter that is not JSON data is kept as a line this long at most (param_summary)


@dataclass(frozen=True)
class PytestArgs:
    """How the session's pytest reads the file, repeated by the probe and the cells: rootdir, ini file, import
    mode and ``-o`` overrides.  The ini file's ``addopts`` (and ``PYTEST_ADDOPTS``) are left out: they name the
    session's options (``-n 8``, ``--benchmark-*``), not how a test is collected."""

    rootdir: str
    inifile: str | None = None
    import_mode: str = "prepend"
    overrides: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"rootdir": self.rootdir, "inifile": self.inifile, "import_mode": self.import_mode,
                "overrides": list(self.overrides)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "PytestArgs":
        return cls(str(data["rootdir"]), data.get("inifile"), str(data.get("import_mode", "prepend")),
                   tuple(str(o) for o in data.get("overrides", ())))

    def argv(self, path: Path) -> list[str]:
        argv = [str(path), f"--rootdir={self.rootdir}", f"--import-mode={self.import_mode}", "-o", "addopts="]
        if self.inifile:
            argv += ["-c", self.inifile]
        for override in self.overrides:
            if not override.startswith("addopts="):
                argv += ["-o", override]
        for name in BLOCKED_PLUGINS:
            argv += ["-p", f"no:{name}"]
        # pytest marks every installed plugin's modules for assertion rewriting, this one's too, which the cell
        # imported before pytest started: the warning says nothing about the user's test.
        return argv + ["-W", f"ignore:{_NOT_REWRITTEN}:pytest.PytestAssertRewriteWarning"]


@dataclass
class CollectedTest:
    """One test item as collected: what the adapter makes an op's shape of (JSON data: the probe writes it)."""

    nodeid: str
    function: str  # the test's dotted name: its classes and its function (``TestAdd.test_small``)
    shape: str  # its parametrization id, or "" when it has none
    params: dict[str, Any]  # its parameters as JSON data (others by their str)
    where: str  # file:line of its definition
    source_digest: str
    uses_benchmark: bool
    skipped: str = ""  # why pytest's skip or skipif marks skip it here (``skip_reason``); "" when they do not

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


def json_param(value: Any) -> Any:
    """A parameter as JSON data: itself when it is, else ``param_summary`` of it (the shape is named by its pytest
    id either way)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return param_summary(value)


def param_summary(value: Any) -> str:
    """A parameter that is not JSON data as one short line: an array or tensor by its class, dims and dtype
    (``ndarray(1000x1000, float64)``, never its printed values), anything else by its ``str`` on one line, without
    object addresses (which differ between processes, and would make the two sides' shape sets differ) and cut
    to ``SUMMARY_CHARS``."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if isinstance(shape, tuple) and dtype is not None and not isinstance(value, type):
        dims = "x".join(str(d) for d in shape) or "scalar"
        return f"{type(value).__name__}({dims}, {str(dtype).removeprefix('torch.')})"
    text = " ".join(_ADDRESS.sub("", str(value)).split())  # newlines and tabs: one line
    text = "".join(c if unicodedata.category(c) != "Cc" else "?" for c in text)
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 3] + "..."


def _describe(item: pytest.Item) -> CollectedTest:
    path, line, _ = item.location
    parts = item.nodeid[:len(item.nodeid) - len(item.name)].split("::")[1:-1]  # the classes holding it
    function = getattr(item, "originalname", None) or item.name.partition("[")[0]
    callspec = getattr(item, "callspec", None)
    params = {str(k): json_param(v) for k, v in callspec.params.items()} if callspec is not None else {}
    obj = getattr(item, "function", None)
    try:
        source: object = inspect.getsource(obj) if obj is not None else item.nodeid
    except (OSError, TypeError):
        source = getattr(obj, "__qualname__", item.nodeid)
    return CollectedTest(
        nodeid=item.nodeid, function=".".join([*parts, function]), shape=callspec.id if callspec is not None else "",
        params=params, where=f"{Path(path).name}:{(line or 0) + 1}", source_digest=digest([source, parts]),
        uses_benchmark="benchmark" in getattr(item, "fixturenames", ()), skipped=skip_reason(item))


def skip_reason(item: pytest.Item) -> str:
    """Why pytest would skip ``item`` here by its skip and skipif marks (``@pytest.mark.skipif(not
    torch.cuda.is_available(), reason="CUDA not available")`` on a CPU), as pytest itself decides it at setup; ""
    when it would run, or when a condition cannot be evaluated (the test's run then fails as pytest's would)."""
    from _pytest.skipping import evaluate_skip_marks  # pytest's own rule: string conditions, class marks included

    try:
        skip = evaluate_skip_marks(item)
    except (Exception, pytest.fail.Exception):
        return ""
    return "" if skip is None else skip.reason or "skipped"


class _Collector:
    """Keeps the session's items and its collection errors."""

    def __init__(self) -> None:
        self.tests: list[CollectedTest] = []
        self.errors: list[str] = []

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.errors.append(f"{report.nodeid}: {report.longreprtext.strip()}")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.tests = [_describe(item) for item in session.items]


@contextlib.contextmanager
def _nested_session() -> Iterator[None]:
    """``PYTEST_ADDOPTS`` is the outer session's, as the ini file's addopts are (``PytestArgs``)."""
    addopts = os.environ.pop("PYTEST_ADDOPTS", None)
    try:
        yield
    finally:
        if addopts is not None:
            os.environ["PYTEST_ADDOPTS"] = addopts


class CollectionFailed(Exception):
    """The file could not be collected as the session's pytest collects it."""


def collect_tests(path: Path, args: PytestArgs) -> list[CollectedTest]:
    """Every test pytest collects from ``path``, in order, saying which request the ``benchmark`` fixture."""
    collector = _Collector()
    with _nested_session():
        code = pytest.main([*args.argv(path), "--collect-only", "-qq"], plugins=[collector])
    if collector.errors:
        raise CollectionFailed("\n".join(collector.errors))
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise CollectionFailed(f"pytest --collect-only exited {int(code)} ({pytest.ExitCode(code).name})")
    return collector.tests


# -- the benchmark fixture of a cell -----------------------------------------------------------------------------

@dataclass
class BenchmarkCall:
    """One call of the fixture: the callable and the arguments a timed call passes it."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    how: str  # benchmark(...) or benchmark.pedantic(...)
    site: str  # file:line of the call
    setup: Callable[[], Any] | None = None
    ignored: list[str] = field(default_factory=list)  # pedantic's arguments the cell does not follow

    def timed(self) -> Callable[[], Any]:
        """The zero-argument callable the cell times: ``fn(*args, **kwargs)``; with pedantic's ``setup``, on the
        arguments of one more call of it (the test's call may have used up its own)."""
        args, kwargs = self.args, self.kwargs
        if self.setup is not None:
            made = self.setup()
            if made:
                args, kwargs = made
        fn = self.fn

        def run() -> Any:
            return fn(*args, **kwargs)

        return run

    def name(self) -> str:
        return str(getattr(self.fn, "__qualname__", None) or getattr(self.fn, "__name__", None) or repr(self.fn))


class CapturingBenchmark:
    """What a test's ``benchmark`` is inside a cell: it keeps the callable and calls it once, timing nothing.

    It offers what tests commonly touch of pytest-benchmark's fixture: calling it, ``pedantic``, ``extra_info``,
    ``group``, ``name``, ``fullname``, ``param``, ``params``; ``stats`` says why there are none.
    """

    def __init__(self, node: pytest.Item) -> None:
        callspec = getattr(node, "callspec", None)
        self.name = node.name
        self.fullname = node.nodeid
        self.param = callspec.id if callspec is not None else None
        self.params = dict(callspec.params) if callspec is not None else None
        self.group: str | None = None
        self.extra_info: dict[str, Any] = {}
        self.disabled = False
        self.calls: list[BenchmarkCall] = []

    def __call__(self, function_to_benchmark: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.calls.append(BenchmarkCall(function_to_benchmark, args, kwargs, "benchmark(...)", _caller()))
        return function_to_benchmark(*args, **kwargs)

    def pedantic(self, target: Callable[..., Any], args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                 setup: Callable[[], Any] | None = None, teardown: Callable[..., Any] | None = None,
                 rounds: int = 1, warmup_rounds: int = 0, iterations: int = 1) -> Any:
        # pytest-benchmark's rules for setup, kept so a test behaves here as it does there.
        if setup is not None and iterations > 1:
            raise ValueError("Can't use more than 1 `iterations` with a `setup` function.")
        args, kwargs = tuple(args), dict(kwargs or {})
        ignored = [f"{name}={value}" for name, value, default in
                   (("rounds", rounds, 1), ("warmup_rounds", warmup_rounds, 0), ("iterations", iterations, 1))
                   if value != default]
        call = BenchmarkCall(target, args, kwargs, "benchmark.pedantic(...)", _caller(), setup, ignored)
        if teardown is not None:
            call.ignored.append("teardown (run after the test's call only)")
        self.calls.append(call)
        if setup is not None:
            made = setup()
            if made:
                if args or kwargs:
                    raise TypeError("Can't use `args` or `kwargs` if `setup` returns the arguments.")
                args, kwargs = made
        result = target(*args, **kwargs)
        if teardown is not None:
            teardown(*args, **kwargs)
        return result

    @property
    def stats(self) -> Any:
        raise AttributeError("benchmark.stats: under --ab-pytest-benchmark the test's benchmark fixture times "
                             "nothing (the cell times the callable); read the campaign's report instead")


def _caller() -> str:
    frame = sys._getframe(2)
    return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"


@dataclass
class TestRun:
    """What running one test with the capturing fixture gave."""

    outcome: str  # passed, failed, skipped, "not collected", or "other fixture"
    detail: str  # the failure's or skip's one line; for "other fixture", where that fixture comes from
    calls: list[BenchmarkCall]


class _OneTest:
    """The nested session's plugin: selects one node id, provides the capturing fixture, keeps the outcome."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.fixture: CapturingBenchmark | None = None
        self.selected = False
        self.outcome = "passed"
        self.detail = ""
        self.other_fixture: str | None = None  # the type of a `benchmark` that is not the capturing one

    def pytest_configure(self, config: pytest.Config) -> None:
        # The mark pytest-benchmark registers: a test carrying it runs under --strict-markers too.
        config.addinivalue_line("markers", "benchmark: pytest-benchmark's settings (ignored in a cell)")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        kept = [item for item in items if item.nodeid == self.nodeid]
        removed = [item for item in items if item.nodeid != self.nodeid]
        self.selected = bool(kept)
        items[:] = kept
        if removed:
            config.hook.pytest_deselected(items=removed)

    @pytest.fixture
    def benchmark(self, request: pytest.FixtureRequest) -> CapturingBenchmark:
        self.fixture = CapturingBenchmark(request.node)
        return self.fixture

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        # A conftest's own `benchmark` fixture, or pytest-benchmark loaded by module name (pytest_plugins), wins
        # over this plugin's: the test would then run, time itself, and hand the cell nothing.
        given = getattr(item, "funcargs", {}).get("benchmark")
        if given is not None and not isinstance(given, CapturingBenchmark):
            self.other_fixture = f"{type(given).__module__}.{type(given).__qualname__}"

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.outcome != "passed":
            return  # the first failure is the one to name
        if report.failed:
            self.outcome, self.detail = "failed", f"in its {report.when}: {_error_line(report.longreprtext)}"
        elif report.skipped:
            self.outcome = "skipped"
            longrepr = report.longrepr
            reason = str(longrepr[2]) if isinstance(longrepr, tuple) else _error_line(report.longreprtext)
            self.detail = reason.removeprefix("Skipped: ")


def _error_line(text: str) -> str:
    """The line a failure's report names its error on (pytest's ``E   ...``), else its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return errors[0] if errors else (lines[-1] if lines else "no report")


def run_test(path: Path, nodeid: str, args: PytestArgs) -> TestRun:
    """Run test ``nodeid`` of ``path`` in this process, its ``benchmark`` fixture capturing what it is handed."""
    plugin = _OneTest(nodeid)
    with _nested_session():
        pytest.main([*args.argv(path), "-q"], plugins=[plugin])
    calls = plugin.fixture.calls if plugin.fixture is not None else []
    if not plugin.selected:
        return TestRun("not collected", "", calls)
    if plugin.other_fixture is not None:
        return TestRun("other fixture", plugin.other_fixture, calls)
    return TestRun(plugin.outcome, plugin.detail, calls)
