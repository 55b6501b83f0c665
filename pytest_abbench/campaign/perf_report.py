"""``triton.testing.perf_report`` scripts as campaigns (``--ab-providers``), without rewriting them.

Each ``@perf_report`` function is an op (one per Benchmark when it declares several), each point of the
Benchmark's ``x_vals`` a shape, and one ``line_vals`` entry what runs: the same provider on both sides
(``--ab-providers triton``, side B under the switch) or one provider per side (``--ab-providers torch,triton``, a
kernel variant).  In a cell, ``build`` calls the function with a stand-in for ``triton.testing.do_bench`` (and
``do_bench_cudagraph``) that keeps the callable it is handed and returns a placeholder: the script's own timing
never runs, the cell's timers time that callable.  What the function returns (ms, GB/s, TFLOPS) is read from the
placeholder's arithmetic, so a throughput becomes the work of one call and the report derives it from time.

The script is imported only in processes that may import torch and Triton: the cells, and at collection one
probe process per script (``describe_script``), so pytest's own process never imports them and a script that puts
tensors on the GPU at import never holds a CUDA context there.  Its ``benchmark.run(...)`` at import is skipped.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from pytest_abbench.campaign.probe import run_probe
from pytest_abbench.core import envnames, standin_driver
from pytest_abbench.campaign.loader import TEST_MODULE_PREFIXES, import_campaign_file, module_name_for
from pytest_abbench.campaign.model import (Campaign, CampaignError, Case, Op, Shape, Switch, Work, check_shapes, digest,
                                           validate_name)

KIND = "perf-report"  # the adapter's name in a cell's --adapter spec
SMOKE_POINTS = 2  # the smoke level (the interpreter's) takes the first points of x_vals
# The core level (a GPU's default) takes at most this many points of a longer x_vals, spread from its first to its
# last; comprehensive takes them all.  A tutorial's sweep of 31 points costs a cell about 31 settlings and window
# sets; 8 spread points keep its range and its shape (where a kernel overtakes another) at about a quarter.
CORE_POINTS = 8
_TEXT = re.compile(r"\bperf_report\b")


@dataclass(frozen=True)
class Providers:
    """The ``line_vals`` entry each side runs: ``--ab-providers X`` (both) or ``--ab-providers A,B``."""

    a: str
    b: str

    @classmethod
    def parse_spec(cls, spec: str) -> "Providers":
        """Read a cell's ``--adapter`` spec, ``perf-report:A,B``, as ``spec()`` wrote it."""
        kind, _, rest = spec.partition(":")
        names = rest.split(",")
        if kind != KIND or len(names) != 2 or not all(names):
            raise CampaignError(f"adapter spec {spec!r} is not {KIND}:PROVIDER_A,PROVIDER_B")
        return cls(names[0], names[1])

    def spec(self) -> str:
        return f"{KIND}:{self.a},{self.b}"

    def of(self, side: str) -> str:
        return self.a if side == "A" else self.b

    def switch(self, line_args: Sequence[str] = ("provider",)) -> Switch:
        """The campaign's switch: the providers, named as variants where the sides run different ones, by the
        argument the ops pass them as (``provider`` in the tutorials; ``line_vals`` where the ops differ in it)."""
        names = set(line_args)
        arg = names.pop() if len(names) == 1 else "line_vals"
        return Switch(variant_a=f"{arg}={self.a}", variant_b=f"{arg}={self.b}")


def looks_like_perf_report(path: Path) -> bool:
    """A .py file that mentions ``perf_report`` (read as text: collecting a folder imports nothing else); test
    modules (``test_*``, ``conftest``) never are, as for campaign files."""
    if path.suffix != ".py" or path.name.startswith(TEST_MODULE_PREFIXES):
        return False
    try:
        return bool(_TEXT.search(path.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


# -- what a script declares ------------------------------------------------------------------------------------

@dataclass
class BenchmarkOp:
    """One op of a script: a perf_report function with one of its Benchmarks, as the cells and the probe see it."""

    name: str
    function: str  # the function's name, for messages
    where: str  # file:line of its definition
    x_names: list[str]
    points: list[dict[str, Any]]  # each point of x_vals as {x_name: value}
    line_arg: str
    line_vals: list[str]  # as text: what --ab-providers names
    line_names: list[str]  # their labels, which --ab-providers may name too
    ylabel: str
    source_digest: str
    list_index: int | None = None  # which of its function's Benchmarks, where it declares a list of several
    fn: Callable[..., Any] | None = None  # the function itself (None in pytest's process)
    bench: Any = None  # the Benchmark (None in pytest's process)

    def shapes(self) -> dict[str, list[Shape]]:
        shapes = [Shape.coerce(point) for point in self.points]
        return {"smoke": shapes[:SMOKE_POINTS], "core": spread(shapes, CORE_POINTS), "comprehensive": shapes}

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k not in ("fn", "bench")}


def spread(items: Sequence[Any], most: int) -> list[Any]:
    """At most ``most`` of ``items``, evenly spread from the first to the last, in order (all where there are no
    more than ``most``)."""
    if len(items) <= most:
        return list(items)
    if most < 2:
        return list(items[:most])
    picked = sorted({round(i * (len(items) - 1) / (most - 1)) for i in range(most)})
    return [items[i] for i in picked]


def benchmark_ops(module: Any, path: Path) -> list[BenchmarkOp]:
    """Every perf_report function at the script's top level, in order, one op per Benchmark."""
    from triton.testing import Mark

    found: list[BenchmarkOp] = []
    for attr, value in vars(module).items():
        if not isinstance(value, Mark):
            continue
        fn = value.fn
        benches = value.benchmarks if isinstance(value.benchmarks, (list, tuple)) else [value.benchmarks]
        code = getattr(fn, "__code__", None)
        where = f"{path.name}:{code.co_firstlineno}" if code is not None else path.name
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            source = getattr(fn, "__qualname__", attr)
        for index, bench in enumerate(benches):
            name = _op_name(bench, getattr(fn, "__name__", attr), index, len(benches))
            what = f"{path}: perf_report function {getattr(fn, '__name__', attr)!r} ({where})"
            found.append(BenchmarkOp(
                name=validate_name(name, f"{what}: op", path), function=getattr(fn, "__name__", attr), where=where,
                x_names=[str(n) for n in bench.x_names], points=_points(bench, what), line_arg=str(bench.line_arg),
                line_vals=[str(v) for v in bench.line_vals], line_names=[str(v) for v in bench.line_names or []],
                ylabel=str(bench.ylabel or ""),
                source_digest=digest([source, index, repr(bench.args)]),
                list_index=index if len(benches) > 1 else None, fn=fn, bench=bench))
    if not found:
        raise CampaignError(f"{path}: no @triton.testing.perf_report function at its top level (--ab-providers "
                            "collects those; a function defined under `if __name__ == '__main__':` is not seen)")
    seen: dict[str, BenchmarkOp] = {}
    for op in found:
        first = seen.setdefault(op.name, op)
        if first is not op:
            plots = [getattr(o.bench, "plot_name", None) for o in (first, op)]
            hint = (f"their plot_name values {plots[0]!r} and {plots[1]!r} differ only in characters that become '_' "
                    "(all but letters, digits, '_', '.' and '-'): make them differ in those"
                    if plots[0] and plots[1] and plots[0] != plots[1] else "give them distinct plot_name values")
            raise CampaignError(f"{path}: two benchmarks are both op {op.name!r} ({_origin(first)} and "
                                f"{_origin(op)}); {hint}")
    return found


def _origin(op: "BenchmarkOp") -> str:
    """Where a benchmark is declared: its function's line, and which of its Benchmarks where it declares several."""
    return op.where if op.list_index is None else f"{op.where}, Benchmark {op.list_index} of its list"


def _op_name(bench: Any, function: str, index: int, count: int) -> str:
    """The Benchmark's ``plot_name`` (what the script's plots and CSVs are called) made a folder name, else the
    function's name; a function with several Benchmarks and no plot names numbers them."""
    plot = re.sub(r"[^A-Za-z0-9_.\-]+", "_", str(getattr(bench, "plot_name", "") or "")).strip("_.")
    if plot:
        return plot
    return function if count == 1 else f"{function}.{index}"


def _points(bench: Any, what: str) -> list[dict[str, Any]]:
    """x_vals as perf_report reads them: a scalar sets every x_name, a sequence one value per name."""
    names = list(bench.x_names)
    points = []
    for x in bench.x_vals:
        values = list(x) if isinstance(x, (list, tuple)) else [x] * len(names)
        if len(values) != len(names):
            raise CampaignError(f"{what}: x_vals entry {x!r} has {len(values)} values for the {len(names)} x_names "
                                f"{names}")
        points.append(dict(zip(names, values)))
    return points


# -- the stand-in for the script's do_bench --------------------------------------------------------------------

class Ms(float):
    """The placeholder a stand-in do_bench returns: 1 ms, carrying the power of ms in what is computed from it.

    ``gbps = bytes * 1e-9 / (ms * 1e-3)`` gives ``Ms(bytes * 1e-6, power=-1)``: a throughput whose amount per
    call is readable from the value; ``ms * 1000`` gives ``Ms(1000, power=1)``: a time in microseconds.  Anything
    else (a sum, a NumPy scalar) falls back to plain float arithmetic, and the units are then unknown.
    """

    power: int

    def __new__(cls, value: float, power: int = 1) -> "Ms":
        made = super().__new__(cls, value)
        made.power = power
        return made

    def __mul__(self, other: Any) -> Any:
        if isinstance(other, Ms):
            return Ms(float(self) * float(other), self.power + other.power)
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return Ms(float(self) * other, self.power)
        return super().__mul__(other)

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> Any:
        if isinstance(other, Ms):
            return Ms(float(self) / float(other), self.power - other.power)
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return Ms(float(self) / other, self.power)
        return super().__truediv__(other)

    def __rtruediv__(self, other: Any) -> Any:
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return Ms(other / float(self), -self.power)
        return super().__rtruediv__(other)


@dataclass
class Captured:
    """One call of the stand-in: the callable to time, where it was called, which of its arguments are ignored."""

    run: Callable[[], Any]
    timer: str  # do_bench or do_bench_cudagraph
    site: str  # file:line of the call
    ignored: list[str] = field(default_factory=list)
    cleared: int = 0  # how many tensors' .grad are set to None before each call (grad_to_none)


def with_grads_cleared(fn: Callable[[], Any], grad_to_none: Any) -> Callable[[], Any]:
    """``fn`` with ``x.grad = None`` for each ``x`` of ``grad_to_none`` before every call, as do_bench and
    do_bench_cudagraph do: a backward pass then writes its gradients instead of adding to them, and the cells time
    the kernels the script's own timing times (no accumulation kernel)."""
    tensors = list(grad_to_none or ())
    if not tensors:
        return fn

    def run() -> Any:
        for x in tensors:
            x.grad = None
        return fn()

    return run


_CAPTURES: list[list[Captured]] = []  # the calls of the build in progress (empty: not capturing)
_ORIGINALS: dict[str, Callable[..., Any]] = {}


def _triton_dir() -> str:
    import triton

    return os.path.dirname(os.path.abspath(str(triton.__file__))) + os.sep


def _do_bench(fn: Any, warmup: Any = 25, rep: Any = 100, grad_to_none: Any = None, quantiles: Any = None,
              return_mode: Any = "mean") -> None:
    """triton.testing.do_bench's documented arguments (Triton 3.6 to 3.9)."""


def _do_bench_cudagraph(fn: Any, rep: Any = 20, grad_to_none: Any = None, quantiles: Any = None,
                        return_mode: Any = "mean") -> None:
    """triton.testing.do_bench_cudagraph's documented arguments."""


_DOCUMENTED: dict[str, Callable[..., Any]] = {"do_bench": _do_bench, "do_bench_cudagraph": _do_bench_cudagraph}


def _stand_in(name: str, original: Callable[..., Any], triton_dir: str) -> Callable[..., Any]:
    # The arguments as this Triton declares them; as documented when what is installed hides them (a wrapper).
    signature = inspect.signature(original)
    if "quantiles" not in signature.parameters:
        signature = inspect.signature(_DOCUMENTED[name])

    def do_bench(*args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1)
        # Triton's own autotuner benchmarks through do_bench too: a kernel the function calls before its
        # do_bench may tune, and that tuning is the autotune pin's, not a call site of the script.
        if not _CAPTURES or os.path.abspath(caller.f_code.co_filename).startswith(triton_dir):
            return original(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        given = {k: v for k, v in bound.arguments.items() if k != "fn"}
        ignored = [k for k, v in given.items()
                   if k != "grad_to_none" and v is not None and v != signature.parameters[k].default]
        run = with_grads_cleared(bound.arguments["fn"], given.get("grad_to_none"))
        _CAPTURES[-1].append(Captured(run, name, f"{Path(caller.f_code.co_filename).name}:{caller.f_lineno}",
                                      ignored, cleared=len(given.get("grad_to_none") or ())))
        quantiles = given.get("quantiles")
        if quantiles is not None:
            return [Ms(1.0) for _ in quantiles]
        return [Ms(1.0)] if given.get("return_mode") == "all" else Ms(1.0)

    do_bench.__name__ = do_bench.__qualname__ = name
    do_bench.__doc__ = f"pytest-abbench's stand-in for triton.testing.{name}: keeps the callable, times nothing"
    # Shown as the original's: the autotune pin's screen reads the benchmarker's warm-up and repeats from it (the
    # autotuner's do_bench is this stand-in in a perf_report cell), and declines a benchmarker without them.
    do_bench.__signature__ = signature  # type: ignore[attr-defined]
    return do_bench


def install_stand_ins() -> None:
    """Put the stand-ins in ``triton.testing`` (once per process), before a script imports names from it."""
    import triton.testing

    if _ORIGINALS:
        return
    triton_dir = _triton_dir()
    for name in ("do_bench", "do_bench_cudagraph"):
        original = getattr(triton.testing, name)
        _ORIGINALS[name] = original
        setattr(triton.testing, name, _stand_in(name, original, triton_dir))


@contextlib.contextmanager
def _capturing() -> Iterator[list[Captured]]:
    calls: list[Captured] = []
    _CAPTURES.append(calls)
    try:
        yield calls
    finally:
        _CAPTURES.pop()


@contextlib.contextmanager
def _runs_skipped(path: Path, skipped: list[str]) -> Iterator[None]:
    """While the script is imported, ``Mark.run`` (``benchmark.run(...)`` at its top level) notes its line and
    does nothing: the script's own sweep would time every provider and plot, before any cell runs."""
    from triton.testing import Mark

    original = Mark.run

    def run(self: Any, *args: Any, **kwargs: Any) -> None:
        frame = sys._getframe(1)
        skipped.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}")

    setattr(Mark, "run", run)
    try:
        yield
    finally:
        setattr(Mark, "run", original)


# -- units -----------------------------------------------------------------------------------------------------

# ylabel text -> (what one call's amount is, its size per unit).  Checked in order: "TFLOPS" before "FLOPS".
_UNITS: list[tuple[re.Pattern[str], str, float]] = [
    (re.compile(r"\bTB/s\b", re.I), "bytes", 1e12), (re.compile(r"\bGiB/s\b", re.I), "bytes", 2.0 ** 30),
    (re.compile(r"\bGB/s\b", re.I), "bytes", 1e9), (re.compile(r"\bMB/s\b", re.I), "bytes", 1e6),
    (re.compile(r"\bTFLOP/?S\b", re.I), "flops", 1e12), (re.compile(r"\bGFLOP/?S\b", re.I), "flops", 1e9),
]


def read_units(returned: Any, ylabel: str) -> tuple[Work | None, str]:
    """What the function's return says about one call: the work it implies (a throughput) and a note for the log."""
    value = returned[0] if isinstance(returned, (list, tuple)) and returned else returned
    label = f"ylabel {ylabel!r}" if ylabel else "no ylabel"
    if not isinstance(value, Ms):
        return None, (f"its return ({label}) is not computed from do_bench's time in a way the tool can follow: "
                      "reported as time only")
    if value.power == 1:
        return None, f"it returns a time ({label}): reported as time"
    if value.power == -1:
        for pattern, kind, unit in _UNITS:
            if pattern.search(ylabel):
                amount = float(value) * unit * 1e-3  # value [unit/s] at 1 ms
                work = Work(bytes=amount) if kind == "bytes" else Work(flops=amount)
                return work, (f"it returns a throughput ({label}): reported as time, with throughput derived from "
                              f"{amount:.4g} {kind} per call")
        return None, f"it returns a throughput in units the {label} does not name: reported as time only"
    return None, f"its return ({label}) goes as ms^{value.power}: reported as time only"


# -- ops for the cells and for collection ----------------------------------------------------------------------

def _provider_value(op: BenchmarkOp, provider: str) -> Any:
    """The ``line_vals`` entry named ``provider`` (by value, or by its ``line_names`` label)."""
    assert op.bench is not None
    labels = op.line_names + [""] * len(op.line_vals)
    for value, label in zip(op.bench.line_vals, labels):
        if provider in (str(value), label):
            return value
    raise CampaignError(f"perf_report op {op.name!r} ({op.where}): no line_vals entry {provider!r} "
                        f"(it has {op.line_vals})")


def _cell_build(op: BenchmarkOp, provider: str, log: Callable[[str], None]) -> Callable[[Shape, str], Case]:
    """The op's ``build`` in a cell: call the function for ``provider`` and keep what it hands to do_bench."""
    fn, bench = op.fn, op.bench
    assert fn is not None and bench is not None
    value = _provider_value(op, provider)

    def build(shape: Shape, device: str) -> Case:
        point = {name: shape.params[name] for name in op.x_names}
        with _capturing() as calls:
            returned = fn(**point, **{op.line_arg: value}, **bench.args)
        what = f"perf_report {op.function} ({op.where}), {op.line_arg}={provider!r}, {shape.id}"
        if not calls:
            raise CampaignError(f"{what}: returned without calling triton.testing.do_bench or do_bench_cudagraph, "
                                "so there is no callable to time")
        if len(calls) > 1:
            sites = ", ".join(f"{c.timer} at {c.site}" for c in calls)
            raise CampaignError(f"{what}: called {len(calls)} timers ({sites}); an op times one callable: give each "
                                "measurement its own provider or perf_report function")
        call = calls[0]
        work, units = read_units(returned, op.ylabel)
        ignored = (f"; its {', '.join(call.ignored)} argument{'s are' if len(call.ignored) > 1 else ' is'} ignored "
                   "(the cell takes its own samples with its own timer)") if call.ignored else ""
        cleared = (f"; before each call .grad is set to None on the {call.cleared} tensor(s) of its grad_to_none, "
                   "as do_bench does") if call.cleared else ""
        log(f"[abbench] {what}: timing the callable given to {call.timer} at {call.site}{ignored}{cleared}; {units}")
        return Case(run=call.run, work=work)

    build.__name__ = f"build_{op.name}"
    setattr(build, "source_digest", op.source_digest)
    return build


def _not_in_this_process(op: BenchmarkOp) -> Callable[[Shape, str], Case]:
    def build(shape: Shape, device: str) -> Case:
        raise CampaignError(f"perf_report op {op.name!r}: built only in a cell (the script is not imported here)")

    build.__name__ = f"build_{op.name}"
    setattr(build, "source_digest", op.source_digest)
    return build


def _answer_for_interpreter() -> None:
    """Under ``TRITON_INTERPRET=1`` with no GPU driver, make the active driver answer for the IR target
    (``core/standin_driver.py``): the tutorials ask it for their device, target and properties at import."""
    if os.environ.get(envnames.TRITON_INTERPRET) != "1":
        return
    from triton.runtime import driver

    try:
        driver.active
    except RuntimeError:  # "0 active drivers": no GPU here
        standin_driver.install(standin_driver.target_text(), interpreter=True)


def import_script(path: Path, module_name: str, import_timeout_s: float | None) -> tuple[list[BenchmarkOp], list[str]]:
    """Import the script with the stand-ins in place and its ``benchmark.run(...)`` skipped: its ops, and the
    ``file:line`` of each skipped run."""
    install_stand_ins()
    _answer_for_interpreter()
    skipped: list[str] = []
    with _runs_skipped(path, skipped):
        module, _ = import_campaign_file(path, module_name=module_name, import_timeout_s=import_timeout_s)
    return benchmark_ops(module, path), skipped


def _campaign(path: Path, module_name: str, ops: Sequence[BenchmarkOp], providers: Providers,
              build_of: Callable[[BenchmarkOp], Callable[[Shape, str], Case]]) -> tuple[Campaign, list[str]]:
    """The ops that have both providers as a Campaign; the notices for those left out."""
    from types import ModuleType

    kept, left, line_args = [], [], []
    for op in ops:
        missing = [p for p in dict.fromkeys((providers.a, providers.b)) if not _has_provider(op, p)]
        if missing:
            left.append(f"{op.name} ({op.where}) has no {' or '.join(map(repr, missing))} among its line_vals "
                        f"{op.line_vals}")
        else:
            kept.append(Op(op.name, build=build_of(op), shapes=op.shapes()))
            line_args.append(op.line_arg)
    if not kept:
        raise CampaignError(f"{path}: no perf_report benchmark runs provider {providers.a!r}"
                            + (f" and {providers.b!r}" if providers.b != providers.a else "")
                            + ": " + "; ".join(left))
    for op_ in kept:
        check_shapes(op_, path)
    module = sys.modules.get(module_name) or ModuleType(module_name)
    return Campaign(path, module, kept, providers.switch(line_args), adapter=providers.spec()), left


def _has_provider(op: BenchmarkOp, provider: str) -> bool:
    return provider in op.line_vals or provider in op.line_names


def load_for_cell(path: Path, module_name: str, spec: str, side: str,
                  log: Callable[[str], None] = print) -> Campaign:
    """The script as a campaign inside a cell: its ops' builds run side ``side``'s provider."""
    providers = Providers.parse_spec(spec)
    ops, _ = import_script(Path(path).resolve(), module_name, None)
    provider = providers.of(side)
    campaign, _ = _campaign(Path(path).resolve(), module_name, ops, providers,
                            lambda op: _cell_build(op, provider, log))
    return campaign


def describe_script(path: Path, rootdir: Path | None, providers: Providers, import_timeout_s: float,
                    interpreter: bool, ir_target: str | None = None, level: str | None = None,
                    ir_only: bool = False) -> tuple[Campaign, list[str]]:
    """The script as a campaign for pytest's process, read by a probe process; the notices to show at collection.

    ``interpreter``: the probe imports it as the cells will, under Triton's interpreter (no GPU here), where the
    driver's answers are those of ``ir_target``.  ``level``: the session's, for the notice of an op whose core
    level times a subset of its points.  ``ir_only`` (with ``ir_target``): the probe imports it as an IR-only cell
    does, compiling for the target (``child/compile_probe.py``).
    """
    path = Path(path).resolve()
    module_name = module_name_for(path, rootdir)
    module = ["pytest_abbench.child.compile_probe", ir_target] if ir_only and ir_target else [__name__]
    answer = run_probe(path, lambda out: ["-m", *module, str(path), module_name, str(out), repr(import_timeout_s)],
                       "reading its perf_report functions", import_timeout_s, interpreter and not ir_only,
                       cwd=path.parent, ir_target=ir_target)
    ops = [BenchmarkOp(**fields) for fields in answer["ops"]]
    campaign, left = _campaign(path, module_name, ops, providers, _not_in_this_process)
    notices = [f"abbench: {path.name}: {where} calls benchmark.run(...) at import: skipped under --ab-providers "
               "(the cells time the benchmarks)" for where in answer["skipped_runs"]]
    notices += [f"abbench: {path.name}: op {why}: left out" for why in left]
    notices += [f"abbench: {path.name}: op {op.name}: the core level times {CORE_POINTS} of its {len(op.points)} "
                f"points, spread from the first to the last ({', '.join(s.id for s in op.shapes()['core'])}); "
                "--ab-level comprehensive times them all"
                for op in ops if level == "core" and len(op.points) > CORE_POINTS
                and any(o.name == op.name for o in campaign.ops)]
    return campaign, notices


def probe(path: Path, module_name: str, out: Path, import_timeout_s: float) -> None:
    """The probe process: import the script as a cell would and write its ops (or the error) to ``out``."""
    try:
        ops, skipped = import_script(path, module_name, import_timeout_s)
        for op in ops:  # a point of x_vals that is no JSON data: named here, where the values are
            check_shapes(Op(op.name, build=_not_in_this_process(op), shapes=op.shapes()), path)
        answer: dict[str, Any] = {"ops": [op.to_json() for op in ops], "skipped_runs": skipped}
    except CampaignError as exc:
        answer = {"error": str(exc)}
    out.write_text(json.dumps(answer))


if __name__ == "__main__":
    probe(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), float(sys.argv[4]))
    sys.stdout.flush()
    os._exit(0)  # threads the script started may still run; the answer is written
