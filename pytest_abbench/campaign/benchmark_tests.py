"""pytest-benchmark tests as campaigns (``--ab-pytest-benchmark``), without rewriting them.

Each test that requests pytest-benchmark's ``benchmark`` fixture is an op (a test in a class: ``TestAdd.test_small``),
each of its parametrizations a shape (its pytest id; one shape ``default`` when it has none).  Both sides run the
same test, side B under the switch (``--ab-switch-env``).  In a cell, ``build`` runs that one test in the cell's
process with a ``benchmark`` fixture that keeps the callable and arguments it is handed (``benchmark_pytest``), and
the cell's timers time ``fn(*args, **kwargs)``: the test's own timing never runs.

pytest's process never imports the test file for this: one probe process per file collects it as the session's
pytest would (``describe_tests``), as the cells do, so both read the same shapes and a file that puts tensors on the
GPU at import holds no CUDA context in pytest's process.  pytest-benchmark, where installed, stays loaded there and
times nothing: the file's tests are replaced by cells, which do not request ``benchmark``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Sequence

from pytest_abbench.campaign.loader import module_name_for
from pytest_abbench.campaign.model import Campaign, CampaignError, Case, Op, Shape, Switch, check_shapes, validate_name
from pytest_abbench.campaign.probe import run_probe
from pytest_abbench.core.cellconfig import LEVELS, PYTEST_BENCHMARK_ADAPTER

if TYPE_CHECKING:  # benchmark_pytest imports pytest: cells of other campaigns do not load it
    from pytest_abbench.campaign.benchmark_pytest import CollectedTest, PytestArgs

KIND = PYTEST_BENCHMARK_ADAPTER  # the adapter's name in a cell's --adapter spec
FIXTURE = "benchmark"
DEFAULT_SHAPE = "default"  # the one shape of a test that is not parametrized
_TEXT = re.compile(r"\bbenchmark\b")


class NoBenchmarkTests(CampaignError):
    """The file holds no test that requests ``benchmark``: it is collected as pytest would."""


def looks_like_benchmark_tests(path: Path) -> bool:
    """A .py file that mentions ``benchmark`` (read as text: collecting a folder starts no probe for other files);
    conftest.py files never are."""
    if path.suffix != ".py" or path.name.startswith("conftest"):
        return False
    try:
        return bool(_TEXT.search(path.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


def spec(args: "PytestArgs") -> str:
    """The cell's ``--adapter`` spec: the kind, then how pytest reads the file (``benchmark_pytest.PytestArgs``)."""
    return f"{KIND}:{json.dumps(args.to_json(), sort_keys=True)}"


def _pytest_args(spec_text: str) -> "PytestArgs":
    from pytest_abbench.campaign.benchmark_pytest import PytestArgs

    kind, _, rest = spec_text.partition(":")
    try:
        if kind != KIND:
            raise ValueError(kind)
        return PytestArgs.from_json(json.loads(rest))
    except (ValueError, KeyError, TypeError):
        raise CampaignError(f"adapter spec {spec_text!r} is not {KIND}:{{rootdir, inifile, import_mode, "
                            "overrides}}") from None


# -- the tests as ops ------------------------------------------------------------------------------------------

BuildOf = Callable[[str, "list[CollectedTest]"], Callable[[Shape, str], Case]]


def _tests_to_campaign(path: Path, module_name: str, tests: "Sequence[CollectedTest]", spec_text: str,
                       build_of: BuildOf) -> tuple[Campaign, list[str]]:
    """The tests that request ``benchmark`` as a Campaign, one op per test function; the notices for the others and
    for those pytest's skip marks skip here."""
    skipped = [t for t in tests if t.uses_benchmark and t.skipped]
    using = [t for t in tests if t.uses_benchmark and not t.skipped]
    others = [t for t in tests if not t.uses_benchmark]
    if not using:
        # Every benchmark test is skipped here, or there is none: pytest collects the file and says so itself.
        raise NoBenchmarkTests(f"{path}: no test requests the {FIXTURE} fixture" if not skipped else
                               f"{path}: every test that requests the {FIXTURE} fixture is skipped here")
    by_op: dict[str, list[CollectedTest]] = {}
    for test in using:
        by_op.setdefault(test.function, []).append(test)
    ops = []
    for function, of_op in by_op.items():
        name = validate_name(function, f"pytest-benchmark test {of_op[0].nodeid} ({of_op[0].where}): op", path)
        shapes = [Shape(t.shape or DEFAULT_SHAPE, t.params) for t in of_op]
        op = Op(name, build=build_of(name, of_op), shapes={level: shapes for level in LEVELS})
        check_shapes(op, path)
        ops.append(op)
    module = sys.modules.get(module_name) or ModuleType(module_name)
    notices = []
    if skipped:
        names = ", ".join(f"{t.nodeid.split('::', 1)[-1]} ({t.skipped})" for t in skipped[:5]) + (
            ", ..." if len(skipped) > 5 else "")
        notices.append(f"abbench: {path.name}: {len(skipped)} test(s) skipped here by their skip marks, as pytest "
                       f"would skip them, are not run: {names}")
    if others:
        names = ", ".join(t.nodeid.split("::", 1)[-1] for t in others[:5]) + (", ..." if len(others) > 5 else "")
        notices.append(f"abbench: {path.name}: {len(others)} test(s) do not request the {FIXTURE} fixture and are "
                       f"not run under --ab-pytest-benchmark: {names}")
    return Campaign(path, module, ops, Switch(), adapter=spec_text), notices


def _with_digest(build: Callable[[Shape, str], Case], name: str,
                 tests: "Sequence[CollectedTest]") -> Callable[[Shape, str], Case]:
    """``build`` named for the op, standing for its test's source in the op's fingerprint (``--ab-resume``)."""
    build.__name__ = f"build_{name}"
    setattr(build, "source_digest", tests[0].source_digest)
    return build


def _not_in_this_process(name: str, tests: "list[CollectedTest]") -> Callable[[Shape, str], Case]:
    def build(shape: Shape, device: str) -> Case:
        raise CampaignError(f"pytest-benchmark op {name!r}: built only in a cell (the tests run there)")

    return _with_digest(build, name, tests)


def _cell_build(path: Path, args: "PytestArgs", log: Callable[[str], None], compile_only: bool,
                name: str, tests: "list[CollectedTest]") -> Callable[[Shape, str], Case]:
    """The op's ``build`` in a cell: run the shape's test, take the one callable it handed ``benchmark``."""
    from pytest_abbench.campaign.benchmark_pytest import run_test

    nodeids = {t.shape or DEFAULT_SHAPE: t.nodeid for t in tests}

    def build(shape: Shape, device: str) -> Case:
        nodeid = nodeids[shape.id]
        what = f"pytest-benchmark test {nodeid} (op {name}, shape {shape.id})"
        ran = run_test(path, nodeid, args)
        if ran.outcome == "not collected":
            raise CampaignError(f"{what}: not collected in this cell (its parametrization differs here?)")
        if ran.outcome == "other fixture":
            raise CampaignError(f"{what}: its {FIXTURE} fixture is a {ran.detail}, not the cell's capturing one: a "
                                f"conftest defines {FIXTURE}, or loads pytest-benchmark by module name "
                                "(pytest_plugins); the cells need their own")
        if ran.outcome == "failed" and not (compile_only and len(ran.calls) == 1):
            raise CampaignError(f"{what} failed {ran.detail}; pytest's report is in run.log above")
        if ran.outcome == "skipped":
            raise CampaignError(f"{what} was skipped ({ran.detail}): nothing to time")
        if not ran.calls:
            raise CampaignError(f"{what} passed without calling {FIXTURE}(...) or {FIXTURE}.pedantic(...): there is "
                                "no callable to time")
        if len(ran.calls) > 1:
            sites = ", ".join(f"{c.how} at {c.site}" for c in ran.calls)
            raise CampaignError(f"{what} called the {FIXTURE} fixture {len(ran.calls)} times ({sites}); an op times "
                                "one callable: give each measurement its own test")
        call = ran.calls[0]
        notes = []
        if ran.outcome == "failed":
            notes.append(f"the test failed {ran.detail} (compile-only: its outputs are not computed, so it is not "
                         "held against the op)")
        if call.ignored:
            notes.append(f"its {', '.join(call.ignored)} {'are' if len(call.ignored) > 1 else 'is'} ignored (the "
                         "cell takes its own samples)")
        if call.setup is not None:
            notes.append("its setup ran once more for the timed calls, not before each of them")
        log(f"[abbench] {what}: timing {call.name()} as handed to {call.how} at {call.site}"
            + "".join(f"; {note}" for note in notes))
        return Case(run=call.timed())

    return _with_digest(build, name, tests)


def load_for_cell(path: Path, module_name: str, spec_text: str, side: str, log: Callable[[str], None] = print,
                  compile_only: bool = False) -> Campaign:
    """The file as a campaign inside a cell: collected again here, each op's build running its test.

    Such a cell starts through ``session/benchmark_cell.py``, which hands this function to the child."""
    from pytest_abbench.campaign.benchmark_pytest import CollectionFailed, collect_tests

    path = Path(path).resolve()
    args = _pytest_args(spec_text)
    try:
        tests = collect_tests(path, args)
    except CollectionFailed as exc:
        raise CampaignError(f"{path}: collecting it as pytest does failed:\n{exc}") from None
    campaign, _ = _tests_to_campaign(path, module_name, tests, spec_text,
                                     lambda name, of_op: _cell_build(path, args, log, compile_only, name, of_op))
    return campaign


def describe_tests(path: Path, rootdir: Path | None, args: "PytestArgs", import_timeout_s: float,
                   interpreter: bool) -> tuple[Campaign, list[str]]:
    """The file's benchmark tests as a campaign for pytest's process, collected by a probe process; the notices to
    show at collection.  ``args``: how the session's pytest reads it (``benchmark_pytest.PytestArgs``).

    ``interpreter``: the probe imports it as the cells will, under Triton's interpreter (no GPU here).
    """
    from pytest_abbench.campaign.benchmark_pytest import CollectedTest

    path = Path(path).resolve()
    module_name = module_name_for(path, rootdir)
    spec_text = spec(args)
    answer = run_probe(path, lambda out: ["-m", __name__, str(path), str(out), spec_text], "collecting its tests",
                       import_timeout_s, interpreter)
    tests = [CollectedTest(**fields) for fields in answer["tests"]]
    return _tests_to_campaign(path, module_name, tests, spec_text, _not_in_this_process)


def _probe(path: Path, out: Path, spec_text: str) -> None:
    """The probe process: collect the file as the session's pytest would and write its tests (or the error)."""
    from pytest_abbench.campaign.benchmark_pytest import CollectionFailed, collect_tests

    try:
        tests = collect_tests(path, _pytest_args(spec_text))
        answer: dict[str, Any] = {"tests": [t.to_json() for t in tests]}
    except CollectionFailed as exc:
        answer = {"error": f"{path}: collecting it as pytest does failed:\n{exc}"}
    except CampaignError as exc:
        answer = {"error": str(exc)}
    out.write_text(json.dumps(answer))


if __name__ == "__main__":
    _probe(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
    sys.stdout.flush()
    os._exit(0)  # threads the test file started may still run; the answer is written
