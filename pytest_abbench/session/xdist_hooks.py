"""Hooks that exist only when pytest-xdist is loaded: op-scoped scheduling, most expensive op first,
the controller's root, and each worker's progress and busy time."""

from __future__ import annotations

import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import pytest

from pytest_abbench.session.balance import OpTimes, op_costs, op_work, root_times
from pytest_abbench.campaign.loader import looks_like_campaign
from pytest_abbench.campaign.model import CampaignError, CampaignSkipped
from pytest_abbench.core.cellfiles import Workers, write_workers
from pytest_abbench.core.layout import cell_key
from pytest_abbench.core.exitcodes import shell_rc
from pytest_abbench.core.outcome import OUTCOME_PROPERTY, WORKER_LOST, CellOutcome
from pytest_abbench.session.root import op_fingerprints
from pytest_abbench.core.settings import visible_gpus
from pytest_abbench.session.campaign_session import SEED_INPUT, AbbenchSession
from pytest_abbench.core.status import StatusFormatError
from pytest_abbench.core.private import NotPrivate, private_folder
from pytest_abbench.session.transport import (SHIPPED_ATTR, CampaignLocator, ShippedCell, campaign_name, resume_seed,
                                              scratch_base)

WORKER_GPU = "abbench_gpu"  # a worker's workeroutput key: the GPU it pinned its cells to
# The plugin's options whose value is a path on the controller's host.
PATH_OPTIONS = ("--ab-root", "--ab-resume", "--ab-costs-from")


def parse_tx(tx: str) -> tuple[int, Any]:
    """A ``--tx`` spec as (workers, execnet.XSpec): ``"8*ssh=host"`` is eight workers of one spec."""
    import execnet  # xdist's own dependency; this module exists only with xdist

    count, star, rest = tx.partition("*")
    many = bool(star and count.isdigit())
    return (int(count) if many else 1), execnet.XSpec(rest if many else tx)


def moves_arguments(tx: str) -> bool:
    """A ``--tx`` spec whose workers get their path arguments rewritten by xdist: another host, or a ``chdir``.

    ``-n N`` is N plain ``popen`` specs: those share the controller's folder and keep the arguments as given.
    """
    spec = parse_tx(tx)[1]
    return not spec.popen or bool(spec.chdir)


def local_workers(specs: Iterable[str]) -> int | None:
    """How many workers the ``--tx`` specs start on this host; None when any runs on another (it has its own GPUs)."""
    workers = 0
    for tx in specs:
        count, spec = parse_tx(tx)
        if not spec.popen or spec.via:
            return None
        workers += count
    return workers


def separate_path_arguments(args: Iterable[str]) -> list[tuple[str, str]]:
    """(option, path) for each PATH_OPTIONS value given as an argument of its own that names an existing path.

    xdist rewrites every argument that is an existing path, as written, relative to the rsync'd folders before
    it starts a worker with a ``chdir`` or on another host, and stops (INTERNALERROR: not relative to an rsync
    root) on one it cannot; a worker's pytest may also take such a path for its rootdir (docs/hosts.md).
    ``--option=PATH`` is one argument, which both leave alone.
    """
    args = list(args)
    return [(option, value) for option, value in zip(args, args[1:])
            if option in PATH_OPTIONS and Path(value).exists()]


@dataclass
class WorkerLoad:
    """What one worker ran this session: its cells' child time, their count, its ops in the order it got them."""

    busy_s: float = 0.0
    cells: int = 0
    ops: list[str] = field(default_factory=list)


class XdistHooks:
    """Registered by the plugin only when xdist is active."""

    def __init__(self, session: AbbenchSession) -> None:
        self.session = session
        self.started = time.monotonic()
        self.shown: set[str] = set()
        self.loads: dict[str, WorkerLoad] = {}
        self.gpus: dict[str, str | None] = {}
        self.origins: dict[str, tuple[str, int]] = {}  # worker -> (host, pid), as its shipped cells say
        self.down: dict[str, str] = {}  # worker -> xdist's error when it went down
        self.wall_s: float | None = None
        if not session.is_worker:
            config = session.config
            if any(moves_arguments(tx) for tx in config.getoption("tx", None) or ()):
                self.refuse_separate_paths(config.invocation_params.args)
            self.refuse_more_workers_than_gpus(config.getoption("tx", None) or ())
            if local_workers(config.getoption("tx", None) or ()):
                self.refuse_unwritable_scratch()

    def refuse_unwritable_scratch(self) -> None:
        """This host's workers measure into the temporary folder (``TMPDIR``): one they cannot write is a usage
        error naming it, before any worker starts (each worker would die at its first cell,
        seen here only as "worker died: lost")."""
        base = scratch_base()
        try:
            private_folder(base)
        except NotPrivate:
            return  # not this user's alone: each worker measures in a private folder of its own and says so
        except OSError:
            pass  # cannot be made: said below, with the OS's reason
        try:
            base.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=base):
                pass
        except OSError as exc:
            raise pytest.UsageError(f"worker scratch: cannot write {base}: {exc.strerror or exc}; xdist workers "
                                    "measure there (set TMPDIR to a folder they can write)") from None

    def refuse_more_workers_than_gpus(self, specs: Iterable[str]) -> None:
        """On CUDA, this host's workers each claim a GPU of their own: more workers than GPUs is a usage error.

        Started anyway, the workers without a GPU fail every cell they get (NO_GPU), half a campaign lost.
        Workers on other hosts claim among those hosts' GPUs, which this host cannot count.
        """
        settings = self.session.settings
        workers = local_workers(specs)
        gpus = settings.gpus if settings.gpus is not None else visible_gpus()
        if settings.backend != "cuda" or not workers or not gpus or workers <= len(gpus):
            return
        source = "--ab-gpus" if settings.gpus is not None else "visible on this host"
        raise pytest.UsageError(
            f"{workers} xdist workers on this host, but {len(gpus)} GPU(s) for them ({', '.join(gpus)}: {source}); "
            f"each worker times on a GPU of its own: use -n {len(gpus)} (or fewer), or list more GPUs with --ab-gpus")

    @staticmethod
    def refuse_separate_paths(args: Iterable[str]) -> None:
        """A usage error naming each path option that xdist would stop on (``separate_path_arguments``)."""
        found = separate_path_arguments(args)
        if found:
            named = ", ".join(f"{option} {value}" for option, value in found)
            fixed = " ".join(f"{option}={value}" for option, value in found)
            raise pytest.UsageError(
                f"{named}: with --tx, xdist rewrites an existing path given as an argument of its own relative "
                f"to the rsync'd folder, and stops on one it cannot; write it as one argument: {fixed} "
                "(docs/hosts.md)")

    def pytest_configure_node(self, node: Any) -> None:
        # Workers never see the controller's root: they measure into scratch roots of their own hosts and
        # ship each cell back on its report.  A resumed campaign sends what its remaining cells read.
        if self.session.settings.resume is not None:
            node.workerinput[SEED_INPUT] = resume_seed(self.session.root.layout, self.session.plan.auto)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.started = time.monotonic()

    # -- scheduling --------------------------------------------------------------
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """Every cell of an op on one worker, the costliest op first, whatever ``--dist`` load mode was asked for
        (``scheduler.CellsByOp``)."""
        if config.getvalue("dist") in ("no", "each"):
            return None
        from pytest_abbench.session.scheduler import CellsByOp

        return CellsByOp(config, log, costs_of=self.scope_costs, lost_op=self.take_lost_op,
                         fail_lost=self.fail_lost_cells)

    @staticmethod
    def take_lost_op(workload: Any) -> list[str]:
        """Remove from a dead worker's workload the op it was running; its cells still to run (xdist's order).

        xdist sends a worker its ops' cells in the order it assigned the ops,
        so the first op with cells still pending is the one in flight.
        """
        for scope, unit in (workload or {}).items():
            pending = [nodeid for nodeid, done in unit.items() if not done]
            if pending:
                if cell_key(pending[0]) is None:
                    return []  # not a cell: xdist's own crash report
                del workload[scope]
                return pending
        return []

    def worker_death(self, node: Any) -> tuple[str, int]:
        """Who died and how: ``worker gw1 (host h, pid 4242) died: killed by SIGKILL``, and a shell-style rc (0: unknown)."""
        worker = str(node.gateway.id)
        spec = node.gateway.spec
        host, pid = self.origins.get(worker, (None, None))
        # execnet's own process for the gateway: the worker itself for popen, the ssh client otherwise.
        process = getattr(getattr(node.gateway, "_io", None), "popen", None)
        local = bool(spec.popen) and not spec.via
        if host is None:
            host = socket.gethostname() if local else (spec.ssh or spec.socket or str(spec))
        rc = None
        if local and process is not None:
            pid = pid or process.pid
            try:
                rc = process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                rc = None
        if rc is not None and rc < 0:
            how = f"killed by {signal.Signals(-rc).name}" if -rc in signal.valid_signals() else f"killed by signal {-rc}"
        elif rc is not None:
            how = f"exited with status {rc}"
        else:
            how = f"lost ({self.down.get(worker) or 'no exit status known'})"
        who = f"worker {worker} (host {host}" + (f", pid {pid}" if pid else "") + ")"
        return f"{who} died: {how}", shell_rc(rc) if rc is not None else 0

    def fail_lost_cells(self, node: Any, nodeids: list[str]) -> None:
        """Report each cell of a dead worker's op as failed (WORKER_LOST); the controller writes its row."""
        session = self.session
        death, rc = self.worker_death(node)
        first = cell_key(nodeids[0])
        op = first.op if first is not None else "?"
        done = [o for o in session.outcomes.values() if o.key.op == op]
        switch = done[0].switch if done else ""
        resume = f"--ab-resume={session.root.path} runs them again"  # one argument: see docs/hosts.md
        self.say(f"abbench: {death}; {len(nodeids)} cell(s) of op {op} fail with it; {resume}")
        for nodeid in nodeids:
            key = cell_key(nodeid)
            assert key is not None
            outcome = CellOutcome(key, session.root.layout.cell(key), WORKER_LOST, switch,
                                  session.plan.ops.get(key.op, ""), rc)
            reason = (f"cell {key} {'was running' if nodeid == nodeids[0] else 'not run'}: {death}; the op's "
                      f"round-1 records were in that worker's scratch root; {resume}")
            report = pytest.TestReport(nodeid, (campaign_name(nodeid), None, nodeid.rsplit("::", 1)[-1]), {},
                                       "failed", reason, "call", user_properties=outcome.report_properties())
            shipped = ShippedCell(outcome, str(self.origins.get(str(node.gateway.id), ("", 0))[0] or ""),
                                  str(node.gateway.id), 0, "")
            setattr(report, SHIPPED_ATTR, shipped.to_json())
            report.node = node  # type: ignore[attr-defined]  # as xdist marks the reports of a worker
            session.config.hook.pytest_runtest_logreport(report=report)

    def scope_costs(self, units: Mapping[str, Iterable[str]]) -> dict[str, float]:
        """The cost of each op scope among xdist's work units (node ids by scope); other tests get none."""
        session = self.session
        cells = {scope: keys for scope, nodeids in units.items()
                 if (keys := [key for nodeid in nodeids if (key := cell_key(nodeid)) is not None])}
        times = self.earlier_times({keys[0].op for keys in cells.values()})
        work = []
        for scope, keys in cells.items():
            path = self.locator.locate(campaign_name(scope))
            op = keys[0].op
            work.append(op_work(scope, keys, self.shape_count(path, op), session.root.finished, times.get(op)))
        return op_costs(work, gate=not session.settings.allow_no_ir_diff)

    def earlier_times(self, ops: set[str]) -> dict[str, OpTimes]:
        """The ops' cell times in the root being resumed, else in --ab-costs-from; one line says where they came from."""
        settings = self.session.settings
        times: dict[str, OpTimes] = {}
        said: list[str] = []
        # The resumed root first: the same campaign on the same machine, and what it holds need not run again.
        for root, resumed in ((settings.resume, True), (settings.costs_from, False)):
            if root is None:
                continue
            try:
                # A resumed root's bad lines are named once, by CampaignRoot.finished; --ab-costs-from's stop at start.
                found = root_times(root, on_bad_line=(lambda exc: None) if resumed else None)
            except (OSError, StatusFormatError) as exc:  # changed since the options were checked
                self.say(f"abbench: op costs: cannot read {root}: {exc}; its ops are costed by their shapes")
                continue
            new = {op: t for op, t in found.items() if op in ops and op not in times}
            times.update(new)
            said.append(f"{root}{' (resumed)' if resumed else ''}: {len(new)} {'more ' if said else ''}"
                        f"of {len(ops)} ops measured there")
        if said:
            self.say("abbench: op costs from " + "; from ".join(said))
        return times

    @property
    def locator(self) -> CampaignLocator:
        assert self.session.locator is not None, "the controller's campaign locator is made with the hooks"
        return self.session.locator

    def shape_count(self, path: Path | None, op: str) -> int | None:
        """The op's shapes at the session's level; None when its file is not a campaign declaring it."""
        if path is None or not self.session.is_campaign_file(path):
            return None  # a hand-written @pytest.mark.abbench test: its scope does not name the op
        try:
            return len(self.session.campaign(path).op(op).shapes_for(self.session.settings.level))
        except (CampaignError, CampaignSkipped):
            return None

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """Claim the root once the first worker collected: its campaign files as the controller holds them.

        A worker's node ids are relative to its own rootdir; the locator finds
        the controller's copy by the name relative to the rsync'd folder
        (``transport.CampaignLocator``); each cell's content hash is checked
        against it when the cell lands.
        """
        session = self.session
        cells = [(nodeid, key) for nodeid in ids if (key := cell_key(nodeid)) is not None]
        if not cells or session.root.claimed:
            return
        files: list[Path] = []
        for name in dict.fromkeys(campaign_name(nodeid) for nodeid, _ in cells):
            path = self.locator.locate(name)
            if path is None:
                session.write_line(f"abbench: {node.gateway.id} collected {name}, which the controller cannot find "
                                   f"(looked in {self.locator.looked_in(name)}): campaign.json leaves it out")
            else:
                files.append(path)
        located: dict[str, Path] = {}
        for nodeid, key in cells:
            path = self.locator.locate(campaign_name(nodeid))
            session.plan.ops.setdefault(key.op, str(path) if path is not None else campaign_name(nodeid))
            if path is not None:
                located.setdefault(key.op, path)
        workers = sum(parse_tx(tx)[0] for tx in session.config.getoption("tx", None) or ())
        session.start_progress((key for _, key in cells), workers)
        session.claim_root(files, op_fingerprints(located, session.campaign, session.settings.level,
                                                   session.is_campaign_file))

    # -- progress on the controller ---------------------------------------------
    def say(self, line: str) -> None:
        reporter = self.session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        if getattr(reporter, "_width_of_current_line", 0):
            reporter.write("\n")  # after xdist's progress dots, which write_line does not end
        reporter.write_line(line)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """One line per cell as a worker finishes it: worker, op, cell, status, time."""
        node = getattr(report, "node", None)  # set by xdist on the controller only
        if node is None or report.nodeid in self.shown:
            return
        record = dict(report.user_properties).get(OUTCOME_PROPERTY)
        if record is None:
            return
        self.shown.add(report.nodeid)  # the record rides on the cell's later reports too
        outcome = CellOutcome.from_json(str(record))
        worker = str(node.gateway.id)
        payload = getattr(report, SHIPPED_ATTR, None)
        if payload is not None and worker not in self.origins:
            shipped = ShippedCell.from_json(str(payload))
            if shipped.pid:
                self.origins[worker] = (shipped.host, shipped.pid)
        load = self.loads.setdefault(worker, WorkerLoad())
        if outcome.key.op not in load.ops:
            load.ops.append(outcome.key.op)
        took = ""
        if outcome.resumed:
            took = " (resumed)"
        elif outcome.measured:
            load.busy_s += outcome.elapsed_s
            load.cells += 1
            took = f" ({outcome.elapsed_s:.1f} s)"
        self.say(f"abbench: {worker} {outcome.key.op} {outcome.key.cell_id} {outcome.status}{took}")

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        if error:
            self.down[str(node.gateway.id)] = str(error)
        output = getattr(node, "workeroutput", None) or {}
        if WORKER_GPU in output:
            self.gpus[str(node.gateway.id)] = output[WORKER_GPU]

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Keep each worker's busy time in ``<root>/workers.json`` (before the session releases the root)."""
        workeroutput = getattr(self.session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[WORKER_GPU] = self.session.claimed_gpu  # the controller reads it when this worker goes down
            self.session.end_servers()  # before pytest_unconfigure: the worker's servers go with its session
            return
        if not self.loads:
            return
        self.wall_s = time.monotonic() - self.started
        path = self.session.root.layout.workers
        data = Workers(wall_s=round(self.wall_s, 3),
                       workers={worker: {"gpu": self.gpus.get(worker), "busy_s": round(load.busy_s, 3),
                                         "cells": load.cells, "ops": load.ops}
                                for worker, load in self.workers()})
        try:
            write_workers(path, data)
        except OSError as exc:
            self.session.write_line(f"abbench: cannot write {path}: {exc.strerror or exc}")

    def workers(self) -> list[tuple[str, WorkerLoad]]:
        return sorted(self.loads.items(), key=lambda item: (len(item[0]), item[0]))  # gw2 before gw10

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.wall_s is None:
            return
        busy = ", ".join(f"{worker}{f' (GPU {gpu})' if (gpu := self.gpus.get(worker)) else ''} "
                         f"busy {load.busy_s:.1f} s" for worker, load in self.workers())
        terminalreporter.write_line(f"abbench: {busy} of {self.wall_s:.1f} s wall")
