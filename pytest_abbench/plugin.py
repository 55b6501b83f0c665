"""The pytest hooks: campaign files become A/B cell items; each cell runs one child process.

This module is imported at pytest start-up, so it imports neither torch nor
triton (the cell child does).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from pytest_abbench import caliber, irgate, report, tunercache
from pytest_abbench.campaign import (SIDES, Campaign, CampaignError, CampaignSkipped, load_campaign,
                                     looks_like_campaign)
from pytest_abbench.cellconfig import CHILD_MODULE, CellConfig, autotune_mode_for
from pytest_abbench.cellrun import log_tail, run_child
from pytest_abbench.exitcodes import EXIT_CALIBER, EXIT_ROOT, EXIT_SLOWER, describe, status_word
from pytest_abbench.fileio import CorruptFileError, iter_jsonl, read_json, write_json_atomic
from pytest_abbench.identity import file_hash
from pytest_abbench.markers import MARKERS, scan_log
from pytest_abbench.options import Settings, detect_backend, register, resolve, visible_gpus
from pytest_abbench.status import StatusRow, append_status_row, read_status

PLUGIN_KEY = pytest.StashKey["AbbenchPlugin"]()
IR_ONLY = report.IR_ONLY
CELL_ID = re.compile(r"\[r\d+-[AB]\d?\](@\S+)?$")
CELL_PROPERTY = "abbench_cell"
LOCK_FILE = ".lock"
MANIFEST_FILE = "campaign.json"
ATTEMPTS_DIR = "attempts"  # earlier tries of cells a resumed session runs again
FINISHED = ("ok", irgate.NO_IR_DIFF, report.IR_ONLY)
PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
# pytest-timeout guards the parent side of a cell: above the cell's own
# timeout (which kills the child) plus time for the bookkeeping.
PARENT_TIMEOUT_SLACK_S = 300


CONTROL = "A2"  # the A/A control cell: side A's configuration timed again in the same round


def side_order(round_no: int, control: bool = False) -> tuple[str, ...]:
    """r1: A then B, r2: B then A, ...: alternation cancels one-directional drift.

    The control cell runs last in its round, after both sides, so the A/A
    pair is as far apart in time as the A/B pair can be.
    """
    order = SIDES if round_no % 2 == 1 else SIDES[::-1]
    return (*order, CONTROL) if control else order


@dataclass(frozen=True)
class CellSpec:
    campaign: Path
    op: str
    round: int
    side: str  # A, B, or A2 (the A/A control, configured as A)
    op_index: int

    @property
    def config_side(self) -> str:
        """The side whose switch configuration this cell runs."""
        return self.side[0]

    @property
    def cell_id(self) -> str:
        return f"r{self.round}-{self.side}"

    def folder(self, root: Path) -> Path:
        return root / f"r{self.round}_{self.side}" / self.op


class CellFailed(Exception):
    """A cell whose child failed; the message is the whole failure report."""


class CellItem(pytest.Item):
    """One (round, op, side): runs one ``python -m pytest_abbench.child`` child."""

    def __init__(self, *, spec: CellSpec, campaign: Campaign, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.campaign = campaign

    def runtest(self) -> None:
        self.config.stash[PLUGIN_KEY].run_cell(self)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CellFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.spec.op}[{self.spec.cell_id}]"


class CampaignFile(pytest.File):
    """A campaign file: yields every op's cells round by round."""

    def collect(self) -> Iterator[CellItem]:
        plugin: AbbenchPlugin = self.config.stash[PLUGIN_KEY]
        try:
            campaign = load_campaign(self.path)
        except CampaignSkipped as exc:
            pytest.skip(str(exc))
        except CampaignError as exc:
            raise self.CollectError(f"campaign error: {exc}") from None
        if plugin.settings.switch_env is not None:
            campaign.switch = campaign.switch.with_env_b(plugin.settings.switch_env)
        plugin.campaigns[self.path] = campaign
        for round_no in range(1, plugin.settings.rounds + 1):
            for op_index, op in enumerate(campaign.ops):
                for side in side_order(round_no, plugin.settings.control):
                    spec = CellSpec(self.path, op.name, round_no, side, op_index)
                    item = CellItem.from_parent(self, name=f"{op.name}[{spec.cell_id}]", spec=spec, campaign=campaign)
                    # The plugin's own xdist scheduler keeps an op's cells on one worker
                    # (XdistHooks.pytest_xdist_make_scheduler); the group marker says the same
                    # to any tool that reads it.
                    item.add_marker(pytest.mark.xdist_group(name=op.name))
                    yield item


class AbbenchPlugin:
    """Session state: settings, the root, round-1 gate decisions, cell records for the report."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.backend = detect_backend(settings.backend)
        self.campaigns: dict[Path, Campaign] = {}
        self.records: list[dict[str, Any]] = []
        self.caliber_lines_shown: set[str] = set()
        self.gates: dict[str, irgate.GateDecision] = {}
        self.cell_folders: dict[str, Path] = {}
        self._lock_fd: int | None = None
        self._finished: dict[tuple[int, str, str], StatusRow] | None = None
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None and "abbench_root" in workerinput:
            self.root = Path(workerinput["abbench_root"])
        elif settings.root is not None:
            self.root = settings.root.resolve()
        else:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            self.root = (config.rootpath / ".abbench" / f"{stamp}-{os.getpid()}").resolve()
        self.root_ready = False

    # -- the root --------------------------------------------------------------
    def claim_root(self, campaign_files: list[Path]) -> None:
        """Create the root and hold its lock for the session (controller / serial run only)."""
        if self.root_ready:
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            pytest.exit(f"abbench: cannot write the root {self.root}: {exc.strerror}", returncode=EXIT_ROOT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            pytest.exit(f"abbench: root {self.root} is in use by another pytest session (pid {holder}); "
                        "use another --ab-root", returncode=EXIT_ROOT)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd
        self.root_ready = True
        problem = self.check_manifest(campaign_files)
        if problem:
            self.release_root()
            pytest.exit(problem, returncode=EXIT_ROOT)
        self.write_line(f"abbench root: {self.root}" + (" (resumed)" if self.settings.resume else ""))

    def check_manifest(self, campaign_files: list[Path]) -> str | None:
        """Write ``<root>/campaign.json``, or on --ab-resume refuse a root written by another campaign or switch."""
        manifest = {"campaign_files": {str(p): file_hash(p) for p in sorted(set(campaign_files))},
                    "switch_env": self.settings.switch_env}
        path = self.root / MANIFEST_FILE
        if self.settings.resume is not None and path.exists():
            try:
                before = read_json(path)
            except CorruptFileError as exc:
                return f"abbench: cannot resume {self.root}: {exc}"
            for field_name, what in (("campaign_files", "campaign file(s)"), ("switch_env", "--ab-switch-env")):
                if before.get(field_name) != manifest[field_name]:
                    return (f"abbench: cannot resume {self.root}: it was written with {what} "
                            f"{before.get(field_name)!r}, this session has {manifest[field_name]!r}; "
                            "resume with the same campaign and switch, or start a new root")
            return None
        write_json_atomic(path, manifest)
        return None

    def release_root(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def write_line(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(line)

    # -- running a cell --------------------------------------------------------
    def cell_env(self, campaign: Campaign, side: str, cell_dir: Path) -> dict[str, str]:
        """The child's environment, as an explicit merge (README "Cell environment").

        Start from this process's environment; drop every variable either
        side's switch sets (so a variable exported in the shell cannot leak
        one side's switch into the other); apply this side's switch; then the
        plugin's own: a per-side TRITON_CACHE_DIR (many switches are not in
        Triton's cache key), the interpreter flag, and the package path.
        """
        switch = campaign.switch
        env = dict(os.environ)
        for key in set(switch.env_a) | set(switch.env_b):
            env.pop(key, None)
        env.update(switch.env(side))
        env["TRITON_CACHE_DIR"] = str(self.root / "cache" / f"triton_{side}")
        # Library tuners (FlagGems' LibTuner): a cache of the cell's own, or the one shared folder asked for.
        tuner_cache = self.tuner_cache(side, campaign)
        shared = tuner_cache.removeprefix("shared:") if tuner_cache.startswith("shared:") else None
        env[tunercache.CACHE_ENV] = shared or str(cell_dir / tunercache.CELL_CACHE_DIR)
        if self.backend == "interpreter" and not self.settings.ir_only:
            env["TRITON_INTERPRET"] = "1"
        else:
            env.pop("TRITON_INTERPRET", None)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        gpu = self.pinned_gpu()
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        env["ABBENCH_SPAWN_TIME"] = repr(time.time())
        return env

    def pinned_gpu(self) -> str | None:
        """This worker's GPU: xdist worker gw<i> gets the i-th of --ab-gpus (or of the visible GPUs).

        Every cell of an op runs on one worker (the plugin's op-scoped
        scheduler), hence on one GPU.  A serial run is pinned only when --ab-gpus is given.  More
        workers than GPUs would time two cells on one GPU at once: refused.
        """
        workerinput = getattr(self.config, "workerinput", None)
        gpus = self.settings.gpus
        if workerinput is None:
            return gpus[0] if gpus else None
        if gpus is None:
            gpus = visible_gpus() if self.backend == "cuda" else ()
        if not gpus:
            return None  # no GPU to share (the interpreter): nothing to pin
        index = int(str(workerinput.get("workerid", "gw0")).removeprefix("gw"))
        if index >= len(gpus):
            raise CellFailed(f"xdist worker gw{index} has no GPU of its own (GPUs: {', '.join(gpus)}); "
                             f"run with -n {len(gpus)} or fewer, or list more with --ab-gpus")
        return gpus[index]

    def cell_argv(self, spec: CellSpec, campaign: Campaign, cell_dir: Path) -> list[str]:
        s = self.settings
        side_opts = campaign.switch.options(spec.config_side)
        cuda = self.backend == "cuda"
        level = side_opts.get("level") or (s.level if s.level != "auto" else ("core" if cuda else "smoke"))
        timer = side_opts.get("timer") or (s.timer if s.timer != "auto" else ("cudagraph" if cuda else "wall"))
        samples = side_opts.get("samples") or s.samples or (10 if cuda else 3)
        # --ab-ir-only is triage: compile for the target through the stand-in driver, time nothing.
        # Without a GPU, round 1 compiles its kernels for the IR target so the gate has TTGIR to compare.
        ir_target = s.ir_target if s.ir_only or (not cuda and spec.round == 1) else None
        config = CellConfig(
            campaign=spec.campaign, op=spec.op, round_no=spec.round, side=spec.config_side, role=spec.side,
            out=cell_dir, backend=self.backend, timer=timer, level=level, samples=int(samples),
            direct_rep=int(side_opts.get("direct_rep") or s.direct_rep_ms),
            direct_warmup=int(side_opts.get("direct_warmup") or s.direct_warmup_ms),
            autotune_mode=autotune_mode_for(spec.round, spec.side),
            autotune_file=self.root / "autotune" / f"{spec.op}.json", switch=campaign.switch.describe(),
            tuner_cache=self.tuner_cache(spec.config_side, campaign), ir_target=ir_target, ir_only=s.ir_only,
        )
        return [campaign.switch.python(spec.config_side) or sys.executable, "-m", CHILD_MODULE, *config.to_argv()]

    def tuner_cache(self, side: str, campaign: Campaign) -> str:
        """The side's tuner cache as the identity names it (caliber axis ``tuner_cache``)."""
        return str(campaign.switch.options(side).get("tuner_cache") or self.settings.tuner_cache)

    def gate_for(self, op: str) -> irgate.GateDecision | None:
        if op not in self.gates:
            decision = irgate.load_decision(self.root, op)
            if decision is not None:
                self.gates[op] = decision
        return self.gates.get(op)

    def run_cell(self, item: CellItem) -> None:
        started = time.perf_counter()
        spec = item.spec
        cell_dir = spec.folder(self.root)
        switch_text = item.campaign.switch.describe()
        self.check_root_alive()
        no_diff_reason = (f"{irgate.NO_IR_DIFF}: round 1 TTGIR of {spec.op} is identical on both sides "
                          "(SWITCH_ALLOW_NO_IR_DIFF=1 or --ab-allow-no-ir-diff runs it anyway)")
        if self.settings.resume is not None:
            done = self.finished_rows().get((spec.round, spec.op, spec.side))
            if done is not None:
                self.attach(item, done, cell_dir)
                item.user_properties.append(("abbench_resumed", True))
                if done.status == irgate.NO_IR_DIFF:
                    pytest.skip(no_diff_reason)
                return  # finished before the crash: its files are read from disk, not measured again
            if cell_dir.exists():
                # An attempt that crashed or failed: kept aside, never mixed into this run's files.
                attempts = self.root / ATTEMPTS_DIR
                attempts.mkdir(exist_ok=True)
                cell_dir.rename(attempts / f"r{spec.round}_{spec.side}_{spec.op}_{time.time_ns()}")
        gate = self.gate_for(spec.op) if spec.round > 1 else None
        if gate is not None and gate.state == "no_diff" and not self.settings.allow_no_ir_diff:
            row = StatusRow(spec.round, spec.op, spec.side, switch_text, 0, irgate.NO_IR_DIFF, 0.0, 0, 0)
            self.append_row(row)
            self.attach(item, row, cell_dir)
            pytest.skip(no_diff_reason)

        log_path = cell_dir / "run.log"
        cell_dir.mkdir(parents=True, exist_ok=True)
        per_cell_tuner = self.tuner_cache(spec.config_side, item.campaign) == "per-cell"
        records_tuning = autotune_mode_for(spec.round, spec.side) == "record"
        if per_cell_tuner and not records_tuning:
            tunercache.seed_from_record(self.root, spec.op, cell_dir / tunercache.CELL_CACHE_DIR)
        result = run_child(self.cell_argv(spec, item.campaign, cell_dir),
                           self.cell_env(item.campaign, spec.config_side, cell_dir), log_path,
                           self.settings.cell_timeout_s)
        if per_cell_tuner and records_tuning:
            tunercache.keep_record(cell_dir / tunercache.CELL_CACHE_DIR, self.root, spec.op)
        problems: list[str]
        if self.settings.ir_only:
            success, failed, problems = len(irgate.ttgir_files(cell_dir / "ir")), 0, []
        else:
            success, failed, problems = count_shapes(cell_dir)
        scan = scan_log(log_path)
        markers = scan.markers
        status = status_word(result.rc)
        if result.rc == 0 and self.settings.ir_only:
            status = IR_ONLY
        elif result.rc == 0 and failed:
            status = "FAILED_SHAPES"
        elif result.rc == 0 and not success:
            status = "NO_SHAPES"
        row = StatusRow(spec.round, spec.op, spec.side, switch_text, result.rc, status, result.elapsed_s,
                        success, failed, *(markers[m] for m in MARKERS))
        self.append_row(row)
        self.attach(item, row, cell_dir)
        if scan.undecodable:
            item.user_properties.append(("abbench_non_utf8", f"{log_path}: {scan.undecodable} byte sequence(s) "
                                         "not UTF-8 (kept as written)"))

        if spec.round == 1:
            self.maybe_decide_gate(item)
        if not self.settings.ir_only:  # no latency, no identity: nothing to calibrate
            self.check_caliber(item)
        # The plugin's own cost of this cell: everything in run_cell except the child (benchmarks/plugin_scale.py).
        overhead_ms = (time.perf_counter() - started - result.elapsed_s) * 1000
        item.user_properties.append(("abbench_overhead_ms", round(overhead_ms, 2)))

        if status not in ("ok", IR_ONLY):
            header = f"cell {spec.op}[{spec.cell_id}] failed: {describe(result.rc)}"
            if result.rc == 0:
                header = f"cell {spec.op}[{spec.cell_id}] failed: {status} ({failed} failed, {success} ok shapes)"
            detail = "\n".join(problems[:20])
            raise CellFailed(f"{header} after {result.elapsed_s:.1f}s\n{detail}\n"
                             f"--- tail of {log_path} ---\n{log_tail(log_path)}")

    def check_root_alive(self) -> None:
        """A root deleted or unmounted mid-campaign stops the session instead of being silently recreated."""
        if not (self.root / LOCK_FILE).exists():
            pytest.exit(f"abbench: the root {self.root} vanished or lost its {LOCK_FILE} during the session; "
                        "every row written before is in its status.tsv if the folder still exists",
                        returncode=EXIT_ROOT)

    def append_row(self, row: StatusRow) -> None:
        try:
            append_status_row(self.root, row)
        except OSError as exc:
            why = "the root vanished" if not self.root.is_dir() else (exc.strerror or str(exc))
            pytest.exit(f"abbench: cannot append to {self.root / 'status.tsv'}: {why}", returncode=EXIT_ROOT)

    def finished_rows(self) -> dict[tuple[int, str, str], StatusRow]:
        """Cells of the resumed root that need not run again (the last row of each cell decides)."""
        if self._finished is None:
            rows = {(r.round, r.op, r.side): r for r in read_status(self.root)}
            self._finished = {key: row for key, row in rows.items() if row.status in FINISHED}
        return self._finished

    def attach(self, item: CellItem, row: StatusRow, cell_dir: Path) -> None:
        """Carry the cell's outcome on its report: junitxml gets it, xdist carries it to the controller."""
        for key in ("rc", "status", "elapsed_s", "success", "failed", *MARKERS):
            item.user_properties.append((f"abbench_{key}" if key not in MARKERS else key, getattr(row, key)))
        item.user_properties.append(("abbench_cell_dir", str(cell_dir)))
        record = {"round": row.round, "op": row.op, "side": row.side, "rc": row.rc, "status": row.status,
                  "cell_dir": str(cell_dir), "campaign": str(item.spec.campaign),
                  "markers": {m: getattr(row, m) for m in MARKERS}}
        item.user_properties.append((CELL_PROPERTY, json.dumps(record)))

    def maybe_decide_gate(self, item: CellItem) -> None:
        spec = item.spec
        dirs = {side: CellSpec(spec.campaign, spec.op, 1, side, spec.op_index).folder(self.root) for side in SIDES}
        if not all((d / "run.log").exists() for d in dirs.values()) or spec.op in self.gates:
            return  # the other side has not run yet (or was deselected)
        decision = irgate.decide(spec.op, dirs["A"] / "ir", dirs["B"] / "ir")
        irgate.save_decision(self.root, decision)
        self.gates[spec.op] = decision
        item.user_properties.append(("abbench_irgate", json.dumps(decision.to_json())))

    def check_caliber(self, item: CellItem) -> None:
        """Compare this cell with the other side's cell of its round and of round 1, as soon as both exist."""
        spec = item.spec
        mine = spec.folder(self.root)

        def folder(round_no: int, role: str) -> Path:
            return CellSpec(spec.campaign, spec.op, round_no, role, spec.op_index).folder(self.root)

        found = caliber.CaliberResult()
        for dir_a, dir_b in caliber.cell_pairs(spec.round, folder, control=self.settings.control):
            if mine in (dir_a, dir_b) and (dir_a / "run.log").exists() and (dir_b / "run.log").exists():
                found.extend(caliber.compare_identities(spec.op, dir_a, dir_b))
        if found.findings:
            item.user_properties.append(("abbench_caliber", json.dumps([f.line() for f in found.findings])))

    # -- hooks -----------------------------------------------------------------
    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if file_path.suffix == ".py" and not file_path.name.startswith(("test_", "conftest")) \
                and looks_like_campaign(file_path):
            return CampaignFile.from_parent(parent, path=file_path)
        return None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        cells = [i for i in items if isinstance(i, CellItem)]
        if not cells:
            return
        owner: dict[str, Path] = {}
        for cell in cells:
            first = owner.setdefault(cell.spec.op, cell.spec.campaign)
            if first != cell.spec.campaign:
                raise pytest.UsageError(f"op name {cell.spec.op!r} is declared by both {first} and "
                                        f"{cell.spec.campaign}: op names share one root and must be unique")
        files = {path: n for n, path in enumerate(dict.fromkeys(c.spec.campaign for c in cells))}
        # Round-major across all collected campaigns, so each op's rounds spread over the session.
        cells.sort(key=lambda c: (c.spec.round, files[c.spec.campaign], c.spec.op_index,
                                  side_order(c.spec.round, True).index(c.spec.side)))
        others = [i for i in items if not isinstance(i, CellItem)]
        items[:] = others + cells  # type: ignore[operator]
        self.cell_folders = {c.nodeid: c.spec.folder(self.root) for c in cells}
        if config.pluginmanager.hasplugin("timeout"):
            for cell in cells:
                cell.add_marker(pytest.mark.timeout(self.settings.cell_timeout_s + PARENT_TIMEOUT_SLACK_S))
        if not hasattr(config, "workerinput") and not config.option.collectonly:
            self.claim_root([c.spec.campaign for c in cells])

    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        # Outside the test's output capture: -v users see where to follow a long cell.
        folder = self.cell_folders.get(nodeid)
        if folder is not None and self.config.option.verbose > 0:
            self.write_line(f"running {location[2]}: tail -f {folder / 'run.log'}")

    def pytest_report_collectionfinish(self, config: pytest.Config, items: list[pytest.Item]) -> list[str]:
        cells = [i for i in items if isinstance(i, CellItem)]
        if not cells:
            return []
        ops = {c.spec.op for c in cells}
        return [f"abbench: {len(cells)} cells, {len(ops)} ops, {self.settings.rounds} rounds, backend {self.backend}, "
                f"cell timeout {self.settings.cell_timeout_s:g}s ({self.settings.sources['cell_timeout']})"]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        props = dict(report.user_properties)
        if CELL_PROPERTY not in props:
            return
        self.records.append(json.loads(str(props[CELL_PROPERTY])))
        # Caliber lines as soon as a cell shows them (here on the controller under xdist too).
        if "abbench_non_utf8" in props:
            self.write_line(f"abbench: {props['abbench_non_utf8']}")
        for line in json.loads(str(props.get("abbench_caliber", "[]"))):
            if line not in self.caliber_lines_shown:
                self.caliber_lines_shown.add(line)
                self.write_line(line)

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        if report.when == "call" and report.skipped and irgate.NO_IR_DIFF in str(report.longrepr):
            return "skipped", "n", ("NO_IR_DIFF", {"yellow": True})
        return None

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if hasattr(self.config, "workerinput") or not self.records:
            self.release_root()
            return
        self.final = report.build_report(self.root, self.settings, expected=self.records)
        self.plots = report.write_report(self.root, self.final)
        if self.final.caliber_mismatch and not self.settings.allow_caliber_mismatch:
            session.exitstatus = EXIT_CALIBER
        elif self.final.slower_ops and session.exitstatus == 0:
            session.exitstatus = EXIT_SLOWER
        self.release_root()

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        final = getattr(self, "final", None)
        if final is None:
            return
        terminalreporter.section("abbench report")
        for line in report.render_text(final).splitlines():
            terminalreporter.write_line(line)
        if getattr(self, "plots", None):
            terminalreporter.write_line(f"plots: {self.root / 'plots'} ({len(self.plots)} ops)")
        terminalreporter.write_line(f"report: {self.root / report.REPORT_MD}, {self.root / report.REPORT_JSON}")
        terminalreporter.write_line(f"abbench root: {self.root}")


class XdistHooks:
    """Hooks that exist only when pytest-xdist is loaded."""

    def __init__(self, plugin: AbbenchPlugin) -> None:
        self.plugin = plugin

    def pytest_configure_node(self, node: Any) -> None:
        # Workers write into the controller's root; they never choose their own.
        node.workerinput["abbench_root"] = str(self.plugin.root)

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """Every cell of an op on one worker, in collection order, whatever ``--dist`` load mode was asked for.

        The sides of an op must be timed on one GPU and round 1 side A must
        record before anything replays it.  xdist's own ``loadgroup`` relies on
        rewriting node ids, which pytest 9.2 no longer allows, so the grouping
        is done here, by scope: a cell's scope is its op; any other test is its own.
        """
        if config.getvalue("dist") in ("no", "each"):
            return None
        from xdist.scheduler import LoadScopeScheduling

        class CellsByOp(LoadScopeScheduling):  # type: ignore[misc]
            def _split_scope(self, nodeid: str) -> str:
                return op_scope(nodeid)

        return CellsByOp(config, log)

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        cells = [nodeid for nodeid in ids if CELL_ID.search(nodeid)]
        if cells:
            rootpath = node.config.rootpath
            self.plugin.claim_root([rootpath / nodeid.split("::")[0] for nodeid in cells])


def op_scope(nodeid: str) -> str:
    """The xdist scheduling scope of a test: ``campaign::op`` for a cell, the node id for anything else."""
    match = CELL_ID.search(nodeid)
    return nodeid[: match.start()] if match else nodeid


def pytest_addoption(parser: pytest.Parser) -> None:
    register(parser)


def pytest_configure(config: pytest.Config) -> None:
    plugin = AbbenchPlugin(config, resolve(config))
    config.stash[PLUGIN_KEY] = plugin
    config.pluginmanager.register(plugin, "abbench-session")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(plugin), "abbench-xdist")


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.stash.get(PLUGIN_KEY, None)
    if plugin is not None:
        plugin.release_root()


def count_shapes(cell_dir: Path) -> tuple[int, int, list[str]]:
    """(measured, failed, problem lines) from a cell's results.jsonl; a corrupt file counts as a failure."""
    path = cell_dir / "results.jsonl"
    success = failed = 0
    problems: list[str] = []
    if not path.exists():
        return 0, 0, [f"{path}: missing (the child wrote no result)"]
    try:
        for rec in iter_jsonl(path):
            if rec.get("status") == "ok":
                success += 1
            else:
                failed += 1
                problems.append(f"shape {rec.get('shape')}: {rec.get('status')}: {rec.get('error', '')}")
    except CorruptFileError as exc:
        failed += 1
        problems.append(str(exc))
    return success, failed, problems
