"""Collection: campaign files become cell tests, parametrized over the plan's rounds and sides, in round-major order.

``CollectionHooks`` owns what collection decides (the order of cells, their
folders for ``-v``); the plan, the root and the progress it starts are the
session's (``campaign_session.AbbenchSession``).
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any, Generator, Iterable

import pytest

from pytest_abbench.campaign.benchmark_tests import KIND as PYTEST_BENCHMARK, NoBenchmarkTests
from pytest_abbench.campaign.loader import why_not_campaign
from pytest_abbench.campaign.model import Campaign, CampaignError, CampaignSkipped
from pytest_abbench.campaign.perf_report import looks_like_perf_report
from pytest_abbench.core.layout import run_log
from pytest_abbench.core.regimes import STEADY
from pytest_abbench.core.wording import count
from pytest_abbench.session.campaign_session import CELL_MARK, AbbenchSession, session_of
from pytest_abbench.session.cells import CELL_TEST_ATTR, PlannedCell, cell_test_for
from pytest_abbench.session.progress import estimate_before_round_1
from pytest_abbench.session.root import op_fingerprints


def listing_only(config: pytest.Config) -> bool:
    """--collect-only, --fixtures and --fixtures-per-test collect cells but run none: no root is claimed."""
    return bool(config.option.collectonly or config.getoption("showfixtures", False)
                or config.getoption("show_fixtures_per_test", False))


def planned_cell(item: pytest.Item) -> PlannedCell | None:
    """The cell a collected test runs, if it is a cell test."""
    # Read from the parametrization, not from a marker: every marker name is a -k keyword, and
    # "-k 'A and not r1'" must select side A's cells, not every test carrying a marker spelled with an "a".
    callspec = getattr(item, "callspec", None)
    planned = callspec.params.get("abbench_cell") if callspec is not None else None
    return planned if isinstance(planned, PlannedCell) else None


class CampaignModule(pytest.Module):
    """A campaign file: one test function per op, each parametrized over the plan's rounds and sides.

    The campaign is imported once, by the plugin's loader (its stable module
    name keys the autotune records); pytest collects the cell tests from a
    namespace holding them, not from the campaign's own globals.
    """

    def istestfunction(self, obj: object, name: str) -> bool:
        return getattr(obj, CELL_TEST_ATTR, None) is not None

    def collect(self) -> Iterable[pytest.Item | pytest.Collector]:
        session = session_of(self.config)
        try:
            campaign = session.campaign(self.path)
        except CampaignSkipped as exc:
            pytest.skip(str(exc))
        except CampaignError as exc:
            raise self.CollectError(f"campaign error: {exc}") from None
        return self.cell_tests(campaign)

    def cell_tests(self, campaign: Campaign) -> list[pytest.Item | pytest.Collector]:
        """The campaign's cell tests, one test function per op; an op name another collected file declares too is
        this file's collection error (op names share one root: its cells' folders, its report)."""
        mine = self.path.resolve()  # the session keys campaigns by resolved path: a symlinked folder is one file
        for path, other in session_of(self.config).campaigns.items():
            shared = sorted({o.name for o in campaign.ops} & {o.name for o in other.ops}) if path != mine else []
            if shared:
                raise self.CollectError(
                    f"op name {shared[0]!r} is declared by both {path} and {self.path}: op names share one root and "
                    "must be unique; rename one (a perf_report's plot_name, a test's name) or run the files in "
                    "separate sessions")
        cells = types.ModuleType(f"{campaign.module.__name__}.cells")
        cells.__file__ = str(self.path)
        for op in campaign.ops:
            setattr(cells, op.name, cell_test_for(self.path, op.name))
        self.obj = cells
        items: list[pytest.Item | pytest.Collector] = []
        for op in campaign.ops:
            made = self.ihook.pytest_pycollect_makeitem(collector=self, name=op.name, obj=getattr(cells, op.name))
            items.extend(made if isinstance(made, list) else [made] if made is not None else [])
        return items


class BenchmarkTestModule(CampaignModule):
    """A test file under ``--ab-pytest-benchmark``: its tests that request pytest-benchmark's ``benchmark`` fixture
    become ops and are collected as cells (``campaign/benchmark_tests.py``); a file with none is collected as pytest
    would, its tests run as tests."""

    plain = False  # no test of it requests benchmark

    def istestfunction(self, obj: object, name: str) -> bool:
        return pytest.Module.istestfunction(self, obj, name) if self.plain else super().istestfunction(obj, name)

    def collect(self) -> Iterable[pytest.Item | pytest.Collector]:
        try:
            campaign = session_of(self.config).campaign(self.path)
        except NoBenchmarkTests:
            self.plain = True
            return pytest.Module.collect(self)
        except CampaignSkipped as exc:
            pytest.skip(str(exc))
        except CampaignError as exc:
            raise self.CollectError(f"pytest-benchmark tests: {exc}") from None
        return self.cell_tests(campaign)


class NamedModule(pytest.Module):
    """A file named on the command line that mentions pytest_abbench or OPS but is no campaign.

    Collected as pytest would; when it holds no test, the collection error
    says why it is not a campaign instead of a silent "collected 0 items".
    """

    not_campaign = ""

    def collect(self) -> Iterable[pytest.Item | pytest.Collector]:
        items = list(super().collect())
        if not items:
            raise self.CollectError(f"{self.path} is not a campaign: {self.not_campaign}")
        return items


class PerfReportScript(pytest.File):
    """A perf_report script named on the command line without ``--ab-providers``: not imported (its
    ``benchmark.run(...)`` would time and plot every provider in pytest's process); the error says how to run it."""

    def collect(self) -> Iterable[pytest.Item | pytest.Collector]:
        raise self.CollectError(f"{self.path} holds triton.testing.perf_report benchmarks: run it as a campaign with "
                                "--ab-providers NAME (side B under --ab-switch-env) or A,B (one provider per side)")


class CollectionHooks:
    """Turns campaign files and ``@pytest.mark.abbench`` tests into the session's cells."""

    def __init__(self, session: AbbenchSession) -> None:
        self.session = session
        self.cell_folders: dict[str, Path] = {}  # node id -> cell folder, for the -v "tail -f" line

    @pytest.hookimpl(wrapper=True)
    def pytest_collect_file(self, file_path: Path,
                            parent: pytest.Collector) -> Generator[None, list[Any], list[Any]]:
        collectors = yield
        kind = self.session.campaign_kind(file_path)
        if kind == PYTEST_BENCHMARK:
            # A file pytest collects as a test module; others (helpers that mention benchmark) stay as they are.
            return [BenchmarkTestModule.from_parent(parent, path=file_path) if isinstance(c, pytest.Module) else c
                    for c in collectors]
        if kind is not None:
            # pytest's own Module collects a file named on the command line: it would import
            # the campaign a second time and report its import errors twice.
            return [CampaignModule.from_parent(parent, path=file_path),
                    *(c for c in collectors if not isinstance(c, pytest.Module))]
        on_command_line = parent.session.isinitpath(file_path)
        if on_command_line and looks_like_perf_report(file_path):
            return [PerfReportScript.from_parent(parent, path=file_path)]
        why = why_not_campaign(file_path) if on_command_line else None
        if why is None:
            return collectors
        named = [c for c in collectors if type(c) is pytest.Module]
        if not named:
            return collectors
        module = NamedModule.from_parent(parent, path=file_path)
        module.not_campaign = why
        return [module if c in named else c for c in collectors]

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """A test marked ``abbench(campaign, op)`` that requests ``abbench_cell`` runs once per planned cell."""
        if "abbench_cell" not in metafunc.fixturenames:
            return
        target = getattr(metafunc.function, CELL_TEST_ATTR, None)
        mark = metafunc.definition.get_closest_marker(CELL_MARK)
        if target is None and mark is None:
            return  # the fixture's own error names the missing marker
        if target is None and mark is not None:
            try:
                target = (mark.kwargs["campaign"], mark.kwargs["op"])
            except KeyError as exc:
                raise pytest.UsageError(f"{metafunc.definition.nodeid}: @pytest.mark.abbench needs campaign= and "
                                        f"op= (missing {exc.args[0]})") from None
        assert target is not None
        campaign_arg, op = target
        path = Path(campaign_arg)
        if not path.is_absolute():
            path = metafunc.definition.path.parent / path
        try:
            campaign = self.session.campaign(path)
        except (CampaignError, CampaignSkipped) as exc:
            pytest.fail(f"{metafunc.definition.nodeid}: campaign error: {exc}", pytrace=False)
        names = [o.name for o in campaign.ops]
        if op not in names:
            raise pytest.UsageError(f"{metafunc.definition.nodeid}: campaign {path} has no op {op!r} "
                                    f"(it has: {', '.join(names)})")
        planned = [PlannedCell(key, campaign.path, names.index(op)) for key in self.session.plan.cells(op)]
        # The plugin's own xdist scheduler keeps an op's cells on one worker
        # (scheduler.CellsByOp); the group marker says the same to any tool that reads it.
        params = [pytest.param(p, id=p.key.cell_id, marks=[pytest.mark.xdist_group(name=op)]) for p in planned]
        metafunc.parametrize("abbench_cell", params, indirect=True)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        cells = [(item, p) for item in items if (p := planned_cell(item)) is not None]
        if not cells:
            return
        files = {path: n for n, path in enumerate(dict.fromkeys(p.campaign_path for _, p in cells))}
        # Round-major across all collected campaigns, so each op's rounds spread over the session.
        cells.sort(key=lambda c: (c[1].key.round, files[c[1].campaign_path], c[1].op_index,
                                  self.session.plan.sort_key(c[1].key)))
        ordered = [item for item, _ in cells]
        chosen = set(ordered)
        items[:] = [i for i in items if i not in chosen] + ordered
        self.session.plan.ops = {p.key.op: str(p.campaign_path) for _, p in cells}
        if not self.session.is_worker:
            self.session.start_progress(p.key for _, p in cells)
        self.cell_folders = {item.nodeid: self.session.root.layout.cell(p.key) for item, p in cells}
        if not self.session.is_worker:
            self.session.cells_planned = {item.nodeid: (p.campaign_path, p.key) for item, p in cells}
        else:  # a worker runs the ops it is handed, not every cell collected: it plans an op as it comes
            for item, p in cells:
                self.session.op_cells.setdefault(p.key.op, {})[item.nodeid] = (p.campaign_path, p.key)
                self.session.op_of[item.nodeid] = p.key.op
        if config.pluginmanager.hasplugin("timeout"):
            budget = self.session.settings.budget
            for item, p in cells:  # the outer guard: above the cell's own deadlines (core.budget)
                item.add_marker(pytest.mark.timeout(budget.guard_s(p.key.round)))
        if listing_only(config):
            return
        unclaimed = not self.session.root.claimed
        # On a worker: its own scratch root.
        self.session.claim_root(list(files), op_fingerprints(self.session.plan.ops, self.session.campaign,
                                                             self.session.settings.level,
                                                             self.session.is_campaign_file))
        if unclaimed and self.session.seed:
            from pytest_abbench.session.transport import plant_seed

            plant_seed(self.session.root.layout, self.session.seed)

    def pytest_report_collectionfinish(self, config: pytest.Config, items: list[pytest.Item]) -> list[str]:
        cells = [p for item in items if (p := planned_cell(item)) is not None]
        notices = list(self.session.collection_notices)
        self.session.notices_shown.update(notices)
        if not cells:
            return notices
        ops = {p.key.op for p in cells}
        settings = self.session.settings
        lines = [f"abbench: {count(len(cells), 'cell')}, {count(len(ops), 'op')}, {count(settings.rounds, 'round')}, "
                 f"backend {settings.backend}, cell timeout {settings.cell_timeout_s:g}s "
                 f"({settings.sources['cell_timeout']})"]
        if settings.backend == "cuda" and settings.regime == STEADY and not settings.ir_only:
            shapes = [(p.key, len(self.session.campaign(p.campaign_path).op(p.key.op).shapes_for(settings.level)))
                      for p in cells]
            lines.append(estimate_before_round_1(shapes, self.session.plan.auto_min,
                                                 self.session.progress.workers if self.session.progress else 1))
        return notices + lines

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        # On an xdist worker, ``nextitem`` is the next test xdist handed it (None: no more will come).
        if self.session.is_worker:
            self.session.ops_coming(item, nextitem)

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        self.session.cell_ended(nodeid)

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        # Outside the test's output capture: -v users see where to follow a long cell.
        folder = self.cell_folders.get(nodeid)
        if folder is not None and self.session.config.option.verbose > 0:
            self.session.write_line(f"running {nodeid.rsplit('::', 1)[-1]}: tail -f {run_log(folder)}")
