"""The session's hook object: campaign files become cell tests, outcomes are gathered, the report is printed.

Registered by ``plugin.pytest_configure``.  It imports what collection needs;
the runner, the caliber check, the IR gate and the report are imported when
cells exist.
"""

from __future__ import annotations

import json
import os
import socket
import time
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterable

import pytest

from pytest_abbench.campaign.model import (Campaign, CampaignError, CampaignSkipped, load_campaign, looks_like_campaign,
                                     why_not_campaign)
from pytest_abbench.session.cells import (CALIBER_PROPERTY, CELL_TEST_ATTR, GATE_PROPERTY, NOTICE_PROPERTY, PlannedCell,
                                        cell_test_for)
from pytest_abbench.session.gpuclaim import GpuClaim, claim_gpu
from pytest_abbench.core.layout import SIDES, CellKey, cell_key, run_log
from pytest_abbench.core import envnames
from pytest_abbench.core.settings import Settings, visible_gpus
from pytest_abbench.core.outcome import NO_IR_DIFF, OUTCOME_PROPERTY, CellOutcome
from pytest_abbench.core.plan import CampaignPlan
from pytest_abbench.session.progress import RoundProgress
from pytest_abbench.session.root import CampaignRoot, default_root, op_fingerprints
from pytest_abbench.session.transport import SERIAL_WORKER, SHIPPED_ATTR, CampaignLocator, ShippedCell, scratch_root
from pytest_abbench.core.wording import count

if TYPE_CHECKING:
    from pytest_abbench.checks import irgate
    from pytest_abbench.report import Report
    from pytest_abbench.spawn.runner import CellRunner

SESSION_KEY = pytest.StashKey["AbbenchSession"]()
SHIPPED_KEY = pytest.StashKey[ShippedCell]()  # a cell's payload until the report of the phase that recorded it
SEED_INPUT = "abbench_seed"  # workerinput: a resumed root's rows, gate decisions and records (transport.resume_seed)
CELL_MARK = "abbench"  # @pytest.mark.abbench(campaign=..., op=...): a test whose parameters are an op's cells
# pytest-timeout guards the parent side of a cell: above the cell's own
# timeout (which kills the child) plus time for the bookkeeping.
PARENT_TIMEOUT_SLACK_S = 300


def session_of(config: pytest.Config) -> "AbbenchSession":
    return config.stash[SESSION_KEY]


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


def controller_check() -> Callable[[], None] | None:
    """On an xdist worker: a check that stops the session once its controller (the worker's parent) is gone.

    A worker hears of a SIGKILLed controller only when execnet gives up on
    it (5 to 15 s later); its running cell must not measure, nor append a
    row, that long after the session died.  Elsewhere: None.
    """
    if envnames.PYTEST_XDIST_WORKER not in os.environ:
        return None
    controller = os.getppid()

    def check() -> None:
        if os.getppid() != controller:
            pytest.exit(f"abbench: the xdist controller (pid {controller}) is gone: the running cell was stopped "
                        "and wrote no row; --ab-resume runs it again")

    return check


class AbbenchSession:
    """Session state: settings, the root, the plan, round-1 gate decisions, the outcomes for the report."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.campaigns: dict[Path, Campaign] = {}
        self.plan = CampaignPlan(settings.rounds, settings.control, settings.ir_only)
        self.outcomes: dict[CellKey, CellOutcome] = {}
        self.caliber_lines_shown: set[str] = set()
        self.notices_shown: set[str] = set()
        self.gates: dict[str, irgate.GateDecision] = {}
        self.cell_folders: dict[str, Path] = {}
        self.final: Report | None = None
        self.plots: list[Path] = []
        self._runner: CellRunner | None = None
        self.landed: set[CellKey] = set()
        self.landed_gates: set[str] = set()
        self.locator: CampaignLocator | None = None  # the controller's own campaign files (xdist_hooks)
        workerinput = getattr(config, "workerinput", None)
        self.is_worker = workerinput is not None
        self.worker = str(workerinput["workerid"]) if workerinput is not None else SERIAL_WORKER
        self.seed = dict(workerinput.get(SEED_INPUT) or {}) if workerinput is not None else {}
        if workerinput is not None:
            # A worker measures into a private root of its own host; the controller alone writes the campaign root.
            path = scratch_root(settings.worker_scratch, self.worker)
        else:
            path = settings.root.resolve() if settings.root is not None else default_root(config.rootpath)
        self.root = CampaignRoot(path, settings.resume is not None, self.write_line)
        self._gpu: GpuClaim | None = None  # claimed at the first cell this process runs (an xdist controller runs none)
        self.started = time.monotonic()
        self.progress: RoundProgress | None = None  # set once the selected cells are known (never on a worker)
        self.workers_seen: set[str] = set()  # xdist workers that reported a cell (the controller's idle time)
        self.controller_check = controller_check()  # made now, while the controller that started a worker is alive

    # -- state the fixtures use -------------------------------------------------
    def campaign(self, path: Path) -> Campaign:
        """The loaded campaign file (``--ab-switch-env`` applied), imported once per session.

        Raises CampaignSkipped for ``SKIP``, and for ``SKIP_TIMED`` unless the session only compiles."""
        path = path.resolve()
        if path not in self.campaigns:
            campaign = load_campaign(path)
            if not self.settings.ir_only:
                campaign.require_timing()
            campaign.require_level(self.settings.level)
            campaign.check_interpreters()
            if self.settings.switch_env is not None:
                campaign.switch = campaign.switch.with_env_b(self.settings.switch_env)
            self.campaigns[path] = campaign
        return self.campaigns[path]

    def runner(self) -> "CellRunner":
        if self._runner is None:
            from pytest_abbench.spawn.runner import CellRunner

            self._runner = CellRunner(self.settings, self.root.layout, self.gpu, self.controller_check)
            self._runner.plan_servers([(self.campaign(Path(path)), CellKey(1, op, side))
                                       for op, path in self.plan.ops.items() for side in SIDES])
        return self._runner

    def gate_for(self, op: str) -> "irgate.GateDecision | None":
        if op not in self.gates:
            from pytest_abbench.checks import irgate

            decision = irgate.load_decision(self.root.path, op)
            if decision is not None:
                self.gates[op] = decision
        return self.gates.get(op)

    @property
    def gpu(self) -> str | None:
        return self.gpu_claim().gpu

    @property
    def gpu_problem(self) -> str | None:
        return self.gpu_claim().problem

    @property
    def claimed_gpu(self) -> str | None:
        """The GPU this process pinned its cells to, without claiming one."""
        return self._gpu.gpu if self._gpu is not None else None

    def gpu_claim(self) -> GpuClaim:
        if self._gpu is None:
            self._gpu = self.pin_gpu()
        return self._gpu

    def pin_gpu(self) -> GpuClaim:
        """This process's GPU, decided at its first cell and kept for the session.

        On CUDA each worker, and a serial run, claims a free GPU of its own
        host among --ab-gpus (auto: the visible GPUs) through a host-local
        lock (``gpuclaim.py``); every cell of an op runs on one worker (the
        plugin's op-scoped scheduler), hence on one GPU.  A worker that finds
        none fails each of its cells with that reason.  Without a GPU (the
        interpreter) nothing is claimed: an explicit list pins xdist worker
        gw<i> to its i-th entry (a serial run to the first), as before.
        """
        gpus = self.settings.gpus
        if self.settings.backend != "cuda":
            if gpus is None:
                return GpuClaim(None)
            if not self.is_worker:
                return GpuClaim(gpus[0])
            index = int(self.worker.removeprefix("gw"))
            if index >= len(gpus):
                return GpuClaim(None, f"xdist worker gw{index} has no GPU of its own (GPUs: {', '.join(gpus)}); "
                                      f"run with -n {len(gpus)} or fewer, or list more with --ab-gpus")
            return GpuClaim(gpus[index])
        candidates = gpus if gpus is not None else visible_gpus()
        if not candidates:
            return GpuClaim(None)  # nothing visible to claim: the cell's own CUDA error says so
        return claim_gpu(candidates, f"pid {os.getpid()} ({self.worker} on {socket.gethostname()})")

    def write_line(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(line)

    # -- collection ------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_collect_file(self, file_path: Path,
                            parent: pytest.Collector) -> Generator[None, list[Any], list[Any]]:
        collectors = yield
        if looks_like_campaign(file_path):
            # pytest's own Module collects a file named on the command line: it would import
            # the campaign a second time and report its import errors twice.
            return [CampaignModule.from_parent(parent, path=file_path),
                    *(c for c in collectors if not isinstance(c, pytest.Module))]
        why = why_not_campaign(file_path) if parent.session.isinitpath(file_path) else None
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
            campaign = self.campaign(path)
        except (CampaignError, CampaignSkipped) as exc:
            pytest.fail(f"{metafunc.definition.nodeid}: campaign error: {exc}", pytrace=False)
        names = [o.name for o in campaign.ops]
        if op not in names:
            raise pytest.UsageError(f"{metafunc.definition.nodeid}: campaign {path} has no op {op!r} "
                                    f"(it has: {', '.join(names)})")
        planned = [PlannedCell(key, campaign.path, names.index(op)) for key in self.plan.cells(op)]
        # The plugin's own xdist scheduler keeps an op's cells on one worker
        # (xdist_hooks.CellsByOp); the group marker says the same to any tool that reads it.
        params = [pytest.param(p, id=p.key.cell_id, marks=[pytest.mark.xdist_group(name=op)]) for p in planned]
        metafunc.parametrize("abbench_cell", params, indirect=True)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        cells = [(item, p) for item in items if (p := planned_cell(item)) is not None]
        if not cells:
            return
        owner: dict[str, Path] = {}
        for _, p in cells:
            first = owner.setdefault(p.key.op, p.campaign_path)
            if first != p.campaign_path:
                raise pytest.UsageError(f"op name {p.key.op!r} is declared by both {first} and "
                                        f"{p.campaign_path}: op names share one root and must be unique")
        files = {path: n for n, path in enumerate(dict.fromkeys(p.campaign_path for _, p in cells))}
        # Round-major across all collected campaigns, so each op's rounds spread over the session.
        cells.sort(key=lambda c: (c[1].key.round, files[c[1].campaign_path], c[1].op_index,
                                  self.plan.sort_key(c[1].key)))
        ordered = [item for item, _ in cells]
        chosen = set(ordered)
        items[:] = [i for i in items if i not in chosen] + ordered
        self.plan.ops = {p.key.op: str(p.campaign_path) for _, p in cells}
        if not self.is_worker:
            self.progress = RoundProgress((p.key for _, p in cells), self.plan.rounds, self.started)
        self.cell_folders = {item.nodeid: self.root.layout.cell(p.key) for item, p in cells}
        if config.pluginmanager.hasplugin("timeout"):
            for item in ordered:
                item.add_marker(pytest.mark.timeout(self.settings.cell_timeout_s + PARENT_TIMEOUT_SLACK_S))
        if listing_only(config):
            return
        unclaimed = not self.root.claimed
        # On a worker: its own scratch root.
        self.root.claim(list(files), self.settings.switch_env, self.plan,
                        op_fingerprints(self.plan.ops, self.campaign, self.settings.level))
        if unclaimed and self.seed:
            from pytest_abbench.session.transport import plant_seed

            plant_seed(self.root.layout, self.seed)

    def pytest_report_collectionfinish(self, config: pytest.Config, items: list[pytest.Item]) -> list[str]:
        cells = [p for item in items if (p := planned_cell(item)) is not None]
        if not cells:
            return []
        ops = {p.key.op for p in cells}
        return [f"abbench: {count(len(cells), 'cell')}, {count(len(ops), 'op')}, "
                f"{count(self.settings.rounds, 'round')}, "
                f"backend {self.settings.backend}, cell timeout {self.settings.cell_timeout_s:g}s "
                f"({self.settings.sources['cell_timeout']})"]

    # -- running ---------------------------------------------------------------
    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        # Outside the test's output capture: -v users see where to follow a long cell.
        folder = self.cell_folders.get(nodeid)
        if folder is not None and self.config.option.verbose > 0:
            self.write_line(f"running {nodeid.rsplit('::', 1)[-1]}: tail -f {run_log(folder)}")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """A recorded cell's payload rides on the report of the phase that recorded it, once."""
        report = yield
        shipped = item.stash.get(SHIPPED_KEY, None)
        if shipped is not None:
            del item.stash[SHIPPED_KEY]
            setattr(report, SHIPPED_ATTR, shipped.to_json())
        return report

    def land(self, report: pytest.TestReport) -> CellOutcome | None:
        """Write a cell's payload into the campaign root (the controller, or a serial session: never a worker)."""
        payload = getattr(report, SHIPPED_ATTR, None)
        props = dict(report.user_properties)
        gate = props.get(GATE_PROPERTY)
        if gate is not None and not self.is_worker:
            from pytest_abbench.checks import irgate

            decision = irgate.GateDecision.from_json(json.loads(str(gate)))
            if decision.op not in self.landed_gates:
                self.landed_gates.add(decision.op)
                irgate.save_decision(self.root.path, decision)
                self.gates.setdefault(decision.op, decision)
        if payload is None or self.is_worker:
            return None
        from pytest_abbench.session.transport import land

        shipped = ShippedCell.from_json(str(payload))
        if shipped.outcome.key in self.landed:
            return None
        self.landed.add(shipped.outcome.key)
        return land(shipped, self.root, self.controller_campaign(shipped))

    def controller_campaign(self, shipped: ShippedCell) -> str | None:
        """The controller's own path of the campaign file a cell ran (None in a serial session: the same file)."""
        if self.locator is None or not shipped.campaign_name:
            return None
        path = self.locator.locate(shipped.campaign_name)
        if path is None:
            return None
        from pytest_abbench.core.identity import file_hash

        if shipped.campaign_hash is not None and file_hash(path) != shipped.campaign_hash:
            line = (f"abbench: {shipped.worker} ({shipped.host}) ran {shipped.campaign_name} with content hash "
                    f"{shipped.campaign_hash}; the controller's {path} is {file_hash(path)}: the root's "
                    "campaign.json does not describe what ran")
            if line not in self.notices_shown:
                self.notices_shown.add(line)
                self.write_line(line)
        return str(path)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Land cells into the root, gather outcomes (here on the xdist controller too), print caliber lines."""
        node = getattr(report, "node", None)  # set by xdist on the controller only
        if node is not None:
            self.workers_seen.add(str(node.gateway.id))
        if report.when == "teardown" and self.progress is not None and not self.is_worker:
            key = cell_key(report.nodeid)
            line = self.progress.cell_done(key) if key is not None else None
            if line is not None:
                self.write_line(line)
        for name, value in report.user_properties:
            if name == NOTICE_PROPERTY and value not in self.notices_shown:
                self.notices_shown.add(str(value))
                self.write_line(str(value))
        landed = self.land(report)
        props = dict(report.user_properties)
        if OUTCOME_PROPERTY not in props:
            return
        measured = CellOutcome.from_json(str(props[OUTCOME_PROPERTY]))  # its folder where it ran
        outcome = landed or measured
        if outcome.key in self.outcomes and landed is None and not self.is_worker:
            outcome = self.outcomes[outcome.key]  # later reports of the cell carry the worker's record again
        if outcome.key not in self.outcomes and outcome.non_utf8_sequences:
            self.write_line(f"abbench: {run_log(measured.cell_dir)}: {outcome.non_utf8_sequences} byte sequence(s) "
                            "not UTF-8 (kept as written)")
        self.outcomes[outcome.key] = outcome
        if not self.plan.ops.get(outcome.key.op):
            self.plan.ops[outcome.key.op] = outcome.campaign
        for line in json.loads(str(props.get(CALIBER_PROPERTY, "[]"))):
            if line not in self.caliber_lines_shown:
                self.caliber_lines_shown.add(line)
                self.write_line(line)

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        if report.when == "setup" and report.skipped and NO_IR_DIFF in str(report.longrepr):
            return "skipped", "n", ("NO_IR_DIFF", {"yellow": True})
        return None

    # -- the end ---------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker or not self.outcomes:
            self.root.release()
            return
        from pytest_abbench import report

        settings = self.settings
        self.final = report.build_report(self.root.path, self.outcomes.values(), self.plan,
                                         margin_pct=settings.margin_pct, fail_if_slower_pct=settings.fail_if_slower_pct,
                                         allow_caliber_mismatch=settings.allow_caliber_mismatch,
                                         wall_s=time.monotonic() - self.started, workers=max(1, len(self.workers_seen)))
        session.exitstatus = self.final.decide_exit(int(session.exitstatus), settings.allow_caliber_mismatch)
        self.plots = report.write_report(self.root.path, self.final)
        self.root.release()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._runner is not None:
            self._runner.close()  # the fork servers; an in-process session (pytester) must not leave them running
        if self._gpu is not None:
            self._gpu.release()  # an in-process session (pytester) must not keep the GPU after it ends

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter, exitstatus: int,
                                config: pytest.Config) -> None:
        if self.final is None:
            return
        from pytest_abbench import report

        layout = self.root.layout
        terminalreporter.section("abbench report")
        for line in report.render_text(self.final).splitlines():
            terminalreporter.write_line(line)
        if self.plots:
            terminalreporter.write_line(f"plots: {layout.plots} ({count(len(self.plots), 'op')})")
        terminalreporter.write_line(f"report: {layout.report_md}, {layout.report_json}")
        terminalreporter.write_line(f"abbench root: {self.root.path}")
        terminalreporter.write_line(self.final.exit_line())
