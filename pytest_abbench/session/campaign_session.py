"""The session's state: settings, the campaign root, the plan, loaded campaigns, gate decisions, outcomes, the GPU.

Made and registered by ``plugin.pytest_configure``; the hook objects that act
on it (``collection.CollectionHooks``, ``reporting.ReportHooks``,
``xdist_hooks.XdistHooks``) and the fixtures read it.  The runner and the IR
gate are imported when cells exist.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import pytest

from pytest_abbench.campaign.loader import load_campaign, looks_like_campaign
from pytest_abbench.campaign.model import Campaign
from pytest_abbench.campaign.benchmark_tests import KIND as PYTEST_BENCHMARK, looks_like_benchmark_tests
from pytest_abbench.campaign.perf_report import KIND as PERF_REPORT, looks_like_perf_report
from pytest_abbench.core.budget import write_budget
from pytest_abbench.core.layout import SIDES, CellKey
from pytest_abbench.core.outcome import CellOutcome
from pytest_abbench.core.plan import CampaignPlan
from pytest_abbench.core import envnames
from pytest_abbench.core.settings import Settings, visible_gpus
from pytest_abbench.session.autorounds import AutoRounds
from pytest_abbench.session.gpuclaim import GpuClaim, claim_gpu
from pytest_abbench.session.progress import RoundProgress
from pytest_abbench.session.root import CampaignRoot, default_root
from pytest_abbench.session.transport import SERIAL_WORKER, CampaignLocator, ShippedCell, scratch_root
from pytest_abbench.spawn import interrupts

if TYPE_CHECKING:
    from pytest_abbench.campaign.benchmark_pytest import PytestArgs
    from pytest_abbench.checks import irgate
    from pytest_abbench.spawn.runner import CellRunner

SESSION_KEY = pytest.StashKey["AbbenchSession"]()
SHIPPED_KEY = pytest.StashKey[ShippedCell]()  # a cell's payload until the report of the phase that recorded it
SEED_INPUT = "abbench_seed"  # workerinput: a resumed root's rows, gate decisions and records (transport.resume_seed)
CELL_MARK = "abbench"  # @pytest.mark.abbench(campaign=..., op=...): a test whose parameters are an op's cells


def session_of(config: pytest.Config) -> "AbbenchSession":
    return config.stash[SESSION_KEY]


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
    """Session state: settings, the root, the plan, round-1 gate decisions, the outcomes for the report (and the
    ``--ab-rounds auto`` decisions over them, ``autorounds.AutoRounds``)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.campaigns: dict[Path, Campaign] = {}
        self.collection_notices: list[str] = []  # found while collecting, shown after it
        self.notices_shown: set[str] = set()  # those shown (an xdist controller collects nothing, shows none)
        auto = settings.auto_min is not None
        self.plan = CampaignPlan(settings.rounds, settings.control, settings.ir_only, auto_min=settings.auto_min,
                                 energy_target_pct=settings.energy_target_pct if auto else None)
        self.outcomes: dict[CellKey, CellOutcome] = {}
        self.gates: dict[str, irgate.GateDecision] = {}
        self.gated_first: set[str] = set()  # ops whose gate the precompile's IR decided before round 1 (no code changed)
        self._runner: CellRunner | None = None
        self._servers_ended = False
        # The cells this process runs, by node id (a serial session's selected cells; on an xdist worker, those
        # of the ops it was handed so far: ``ops_coming``) and those that ended: a side's fork server ends with
        # its last cell (``CellRunner.cell_ended``).
        self.cells_planned: dict[str, tuple[Path, CellKey]] = {}
        self.cells_ended: set[str] = set()
        # A worker's collected cells, by op until the op is planned, and each cell's op.
        self.op_cells: dict[str, dict[str, tuple[Path, CellKey]]] = {}
        self.op_of: dict[str, str] = {}
        self.retirement_held = False  # a worker in the middle of an op, its next op not known (``ops_coming``)
        workerinput = getattr(config, "workerinput", None)
        self.is_worker = workerinput is not None
        self.worker = str(workerinput["workerid"]) if workerinput is not None else SERIAL_WORKER
        self.seed = dict(workerinput.get(SEED_INPUT) or {}) if workerinput is not None else {}
        if workerinput is not None:
            # A worker measures into a private root of its own host; the controller alone writes the campaign root.
            path, scratch_note = scratch_root(self.worker)
        else:
            path, scratch_note = (settings.root.resolve() if settings.root is not None
                                  else default_root(config.rootpath)), None
        self.root = CampaignRoot(path, settings.resume is not None, self.write_line)
        if scratch_note is not None:
            self.root.notices.append(scratch_note)
        self.auto_rounds = AutoRounds(self.root.path, self.plan, self.outcomes, settings.margin_pct,
                                      settings.rounds_budget_s)  # --ab-rounds auto
        # An xdist controller finds the campaign files its workers ran among its own (rsync'd folders included).
        self.locator: CampaignLocator | None = None
        if not self.is_worker and config.pluginmanager.hasplugin("xdist"):
            rsynced = [*(config.getoption("rsyncdir", None) or []), *config.getini("rsyncdirs")]
            self.locator = CampaignLocator(config.rootpath, (Path(p) for p in rsynced))
        self._gpu: GpuClaim | None = None  # claimed at the first cell this process runs (an xdist controller runs none)
        self.started = time.monotonic()
        self.progress: RoundProgress | None = None  # set once the selected cells are known (never on a worker)
        self.controller_check = controller_check()  # made now, while the controller that started a worker is alive
        interrupts.start_session()  # a Ctrl-C or SIGTERM from now on ends the session with its report

    # -- state the fixtures use -------------------------------------------------
    def campaign(self, path: Path) -> Campaign:
        """The loaded campaign file (``--ab-switch-env`` and ``--ab-switch-env-a`` applied), imported once per session.

        Raises CampaignSkipped for ``SKIP``, and for ``SKIP_TIMED`` unless the session only compiles."""
        path = path.resolve()
        if path not in self.campaigns:
            campaign = self._read_campaign(path)
            if campaign.import_threads:
                threads = ", ".join(map(repr, campaign.import_threads))
                # Collection's output is captured: the line is shown with the collection's summary lines.
                self.collection_notices.append(f"abbench: importing {path} started thread(s) {threads}: they run "
                                               "as daemons, so pytest and the cells exit while they still run")
            if not self.settings.ir_only:
                campaign.require_timing()
            campaign.require_level(self.settings.level)
            campaign.check_interpreters()
            if self.settings.switch_env is not None:
                campaign.switch = campaign.switch.with_env_b(self.settings.switch_env)
            if self.settings.switch_env_a is not None:
                campaign.switch = campaign.switch.with_env_a(self.settings.switch_env_a)
            if self.settings.reference:
                from pytest_abbench.campaign.inprocess import not_applicable_notice

                notice = not_applicable_notice(campaign)
                if notice is not None:
                    self.collection_notices.append(notice)
            self.campaigns[path] = campaign
        return self.campaigns[path]

    def is_campaign_file(self, path: Path) -> bool:
        """A campaign file, or a file this session reads as one (a perf_report script under --ab-providers, a
        test file that mentions ``benchmark`` under --ab-pytest-benchmark)."""
        return self.campaign_kind(path) is not None

    def campaign_kind(self, path: Path) -> str | None:
        """How this session reads ``path`` as a campaign: ``campaign`` (a campaign file), an adapter's kind
        (``perf_report.KIND``, ``benchmark_tests.KIND``), or None: it does not."""
        if looks_like_campaign(path):
            return "campaign"
        if self.settings.perf_report is not None and looks_like_perf_report(path):
            return PERF_REPORT
        if self.settings.pytest_benchmark and looks_like_benchmark_tests(path):
            return PYTEST_BENCHMARK
        return None

    def _read_campaign(self, path: Path) -> Campaign:
        kind = self.campaign_kind(path)
        # The probes only read the file: under IR triage without a GPU they read it in the interpreter too (a
        # script in the tutorials' form asks Triton's active driver for its device at import).
        interpreter = self.settings.backend == "interpreter"
        if kind == PERF_REPORT:
            from pytest_abbench.campaign.perf_report import Providers, describe_script

            assert self.settings.perf_report is not None
            campaign, notices = describe_script(path, self.config.rootpath, Providers(*self.settings.perf_report),
                                                self.settings.import_timeout_s, interpreter=interpreter,
                                                ir_target=self.settings.ir_target, level=self.settings.level,
                                                ir_only=self.settings.ir_only)
        elif kind == PYTEST_BENCHMARK:
            from pytest_abbench.campaign.benchmark_tests import describe_tests

            campaign, notices = describe_tests(path, self.config.rootpath, self.test_file_args(),
                                               self.settings.import_timeout_s, interpreter=interpreter)
        else:  # a campaign file, or one a hand-written @pytest.mark.abbench test names
            return load_campaign(path, rootdir=self.config.rootpath, import_timeout_s=self.settings.import_timeout_s)
        self.collection_notices.extend(notices)
        return campaign

    def test_file_args(self) -> "PytestArgs":
        """How this session's pytest reads a test file, for the processes that collect and run it again."""
        from pytest_abbench.campaign.benchmark_pytest import PytestArgs

        inipath = self.config.inipath
        return PytestArgs(rootdir=str(self.config.rootpath), inifile=str(inipath) if inipath else None,
                          import_mode=str(self.config.getoption("importmode")),
                          overrides=tuple(self.config.getoption("override_ini") or ()))

    def runner(self) -> "CellRunner":
        if self._runner is None:
            from pytest_abbench.spawn.runner import CellRunner

            self._runner = CellRunner(self.settings, self.root.layout, self.gpu, self.controller_check,
                                      lambda key: self.root.finished(key) is not None)
            self._runner.plan_servers([(self.campaign(Path(path)), CellKey(1, op, side))
                                       for op, path in self.plan.ops.items() for side in SIDES])
            self._runner.plan_cells((self.campaign(path), key) for nodeid, (path, key) in self.cells_planned.items()
                                    if nodeid not in self.cells_ended)
            self._runner.hold_retirement(self.retirement_held)
        return self._runner

    def ops_coming(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """On an xdist worker: ``item`` is about to run and ``nextitem`` is the test xdist handed it next (None:
        no more will come).

        The plugin's scheduler hands a worker every cell of an op together
        (``scheduler.CellsByOp``), so the op of either runs here whole: its
        cells are planned, and the next op's servers start now, while this
        test runs.  While ``nextitem`` is in ``item``'s op, the op after it
        is not known: a server whose cells here have all ended is held until
        it is, then ends unless that op needs it.  An op handed over later
        that needs an ended server starts it again.
        """
        ops = [self.op_of.get(test.nodeid) if test is not None else None for test in (item, nextitem)]
        for test, op in zip((item, nextitem), ops):
            if op is None or op not in self.op_cells:
                continue  # not a cell, or its op is planned already
            cells = self.op_cells.pop(op)
            self.cells_planned.update(cells)
            if self._runner is not None:
                self._runner.plan_cells((self.campaign(path), key) for path, key in cells.values())
                if test is nextitem:
                    path, key = next(iter(cells.values()))
                    self._runner.warm_op(self.campaign(path), key.op)
        self.retirement_held = nextitem is not None and ops[1] is not None and ops[0] == ops[1]
        if self._runner is not None:
            self._runner.hold_retirement(self.retirement_held)

    def cell_ended(self, nodeid: str) -> None:
        """A test ended: if it was a cell of this process, its side's fork server may end with it."""
        planned = self.cells_planned.get(nodeid)
        if planned is None or nodeid in self.cells_ended:
            return
        self.cells_ended.add(nodeid)
        if self._runner is not None:
            path, key = planned
            self._runner.cell_ended(self.campaign(path), key)

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

    def claim_root(self, campaign_files: list[Path], fingerprints: dict[str, dict[str, str]]) -> None:
        """Take the root for this session (``root.CampaignRoot.claim``) and record the cell budget in force."""
        self.root.claim(campaign_files, self.settings.switch_env, self.plan, fingerprints,
                        self.settings.kept_options())
        write_budget(self.root.path, self.settings.budget)

    def start_progress(self, keys: Iterable[CellKey], workers: int = 1) -> None:
        """Count rounds over the selected cells (the controller's, or a serial session's; never a worker's);
        ``workers``: the cells that run at once (xdist's)."""
        self.progress = RoundProgress(keys, self.plan.rounds, self.started, workers=max(1, workers),
                                      auto_min=self.plan.auto_min)

    def write_line(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(line)

    def end_servers(self) -> None:
        """End the session's fork servers, once.  An xdist worker calls it at its session's finish."""
        if self._runner is None or self._servers_ended:
            return
        self._servers_ended = True
        self._runner.close()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """End what the session started: its fork servers and its GPU claim."""
        self.end_servers()  # an in-process session (pytester) must not leave them running
        if self._gpu is not None:
            self._gpu.release()  # an in-process session (pytester) must not keep the GPU after it ends
