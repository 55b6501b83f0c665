"""Reporting: cells land in the root as their reports arrive, outcomes are gathered, the report is printed.

``ReportHooks`` runs in the process that writes the root (the xdist controller,
or a serial session) and on workers, where it only collects outcomes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator

import pytest

from pytest_abbench.core import envnames
from pytest_abbench.core.layout import CellKey, cell_key, run_log
from pytest_abbench.core.outcome import NO_IR_DIFF, NOT_NEEDED, OUTCOME_PROPERTY, CellOutcome
from pytest_abbench.core.fileio import CorruptFileError
from pytest_abbench.core.plan import CampaignPlan, read_plan
from pytest_abbench.report import cost
from pytest_abbench.session.campaign_session import SHIPPED_KEY, AbbenchSession
from pytest_abbench.session.cells import CALIBER_PROPERTY, GATE_PROPERTY, NOTICE_PROPERTY
from pytest_abbench.session.transport import SHIPPED_ATTR, ShippedCell
from pytest_abbench.spawn import interrupts

if TYPE_CHECKING:
    from pytest_abbench.report import Report


class ReportHooks:
    """Lands shipped cells, gathers outcomes into the session, prints notices, caliber lines and the report."""

    def __init__(self, session: AbbenchSession) -> None:
        self.session = session
        self.caliber_lines_shown: set[str] = set()
        self.notices_shown: set[str] = set()
        self.landed: set[CellKey] = set()
        self.landed_gates: set[str] = set()
        self.workers_seen: set[str] = set()  # xdist workers that reported a cell (the controller's idle time)
        self.stopped_ops: set[str] = set()  # ops --ab-rounds auto stopped: their later rounds cost nothing
        self.final: Report | None = None
        self.history_line: str | None = None  # what recording the run into the history file gave
        self.summary_line: str | None = None  # where the markdown summary went ($GITHUB_STEP_SUMMARY), or why it did not

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
        if gate is not None and not self.session.is_worker:
            from pytest_abbench.checks import irgate

            decision = irgate.GateDecision.from_json(json.loads(str(gate)))
            if decision.op not in self.landed_gates:
                self.landed_gates.add(decision.op)
                irgate.save_decision(self.session.root.path, decision)
                self.session.gates.setdefault(decision.op, decision)
        if payload is None or self.session.is_worker:
            return None
        from pytest_abbench.session.transport import land

        shipped = ShippedCell.from_json(str(payload))
        if shipped.outcome.key in self.landed:
            return None
        self.landed.add(shipped.outcome.key)
        return land(shipped, self.session.root, self.controller_campaign(shipped))

    def controller_campaign(self, shipped: ShippedCell) -> str | None:
        """The controller's own path of the campaign file a cell ran (None in a serial session: the same file)."""
        if self.session.locator is None or not shipped.campaign_name:
            return None
        path = self.session.locator.locate(shipped.campaign_name)
        if path is None:
            return None
        from pytest_abbench.core.identity import file_hash

        if shipped.campaign_hash is not None and file_hash(path) != shipped.campaign_hash:
            line = (f"abbench: {shipped.worker} ({shipped.host}) ran {shipped.campaign_name} with content hash "
                    f"{shipped.campaign_hash}; the controller's {path} is {file_hash(path)}: the root's "
                    "campaign.json does not describe what ran")
            if line not in self.notices_shown:
                self.notices_shown.add(line)
                self.session.write_line(line)
        return str(path)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Land cells into the root, gather outcomes (here on the xdist controller too), print caliber lines."""
        node = getattr(report, "node", None)  # set by xdist on the controller only
        if node is not None:
            self.workers_seen.add(str(node.gateway.id))
        if report.when == "teardown" and self.session.progress is not None and not self.session.is_worker:
            key = cell_key(report.nodeid)
            gated = set(self.stopped_ops)
            if not self.session.settings.allow_no_ir_diff:
                gated.update(op for op, gate in self.session.gates.items() if gate.state == "no_diff")
            line = None
            if key is not None:
                elapsed_s, compile_s = self.cell_cost(key)
                line = self.session.progress.cell_done(key, elapsed_s=elapsed_s, compile_s=compile_s, gated=gated)
            if line is not None:
                self.session.write_line(line)
        for name, value in report.user_properties:
            if name == NOTICE_PROPERTY and value not in self.notices_shown:
                self.notices_shown.add(str(value))
                self.session.write_line(str(value))
        landed = self.land(report)
        props = dict(report.user_properties)
        if OUTCOME_PROPERTY not in props:
            return
        measured = CellOutcome.from_json(str(props[OUTCOME_PROPERTY]))  # its folder where it ran
        outcome = landed or measured
        if outcome.key in self.session.outcomes and landed is None and not self.session.is_worker:
            outcome = self.session.outcomes[outcome.key]  # later reports of the cell carry the worker's record again
        if outcome.key not in self.session.outcomes and outcome.non_utf8_sequences:
            self.session.write_line(f"abbench: {run_log(measured.cell_dir)}: {outcome.non_utf8_sequences} byte sequence(s) "
                            "not UTF-8 (kept as written)")
        self.session.outcomes[outcome.key] = outcome
        if outcome.status in NOT_NEEDED:  # once stopped an op stays stopped (session.autorounds)
            self.stopped_ops.add(outcome.key.op)
        if not self.session.plan.ops.get(outcome.key.op):
            self.session.plan.ops[outcome.key.op] = outcome.campaign
        for line in json.loads(str(props.get(CALIBER_PROPERTY, "[]"))):
            if line not in self.caliber_lines_shown:
                self.caliber_lines_shown.add(line)
                self.session.write_line(line)

    def cell_cost(self, key: CellKey) -> tuple[float | None, float]:
        """A finished cell's seconds (None when this session did not run it) and how many of them compiled or
        tuned (its precompile and IR capture included), for the time left: later rounds do neither."""
        outcome = self.session.outcomes.get(key)
        if outcome is None or outcome.resumed:
            return None, 0.0
        if not outcome.measured:  # skipped by the IR gate, or failed before it measured: what it cost
            return outcome.elapsed_s, 0.0
        parts = cost.cell_parts(cost.read_timing(outcome.cell_dir), outcome.elapsed_s, outcome.status)
        return outcome.elapsed_s, parts["compile_s"] + parts["autotune_s"] if parts else 0.0

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        if report.when == "setup" and report.skipped and NO_IR_DIFF in str(report.longrepr):
            return "skipped", "n", ("NO_IR_DIFF", {"yellow": True})
        return None

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.session.is_worker or not self.session.outcomes:
            self.session.root.release()
            return
        from pytest_abbench import report

        settings = self.session.settings
        outcomes, plan = self.report_scope()

        def build() -> Report:
            return report.build_report(self.session.root.path, outcomes, plan, margin_pct=settings.margin_pct,
                                       fail_if_slower_pct=settings.fail_if_slower_pct,
                                       allow_caliber_mismatch=settings.allow_caliber_mismatch, gate=settings.gate,
                                       wall_s=time.monotonic() - self.session.started,
                                       workers=max(1, len(self.workers_seen)))

        self.final = build()
        if settings.reference and not interrupts.received:
            from pytest_abbench.session.reference import run_references

            # The judged ops' in-process reference; the report is read again to carry it beside the verdicts.
            if run_references(self.session, (o.op for o in self.final.ops if o.state == "verdict")):
                self.final = build()
        status = int(session.exitstatus)
        if interrupts.received and status in (0, int(pytest.ExitCode.TESTS_FAILED)):
            # The Ctrl-C or SIGTERM was recorded, but its KeyboardInterrupt did not reach pytest (raised where it
            # is swallowed: a finaliser, an at-fork callback): the run was still interrupted, and says so.
            status = int(pytest.ExitCode.INTERRUPTED)
        session.exitstatus = self.final.decide_exit(status, settings.allow_caliber_mismatch)
        report.write_report(self.session.root.path, self.final)
        # In a GitHub Actions step the summary goes where the reviewer looks without being asked for.
        step_summary = os.environ.get(envnames.GITHUB_STEP_SUMMARY, "")
        if step_summary:
            self.summary_line = step_summary_line(self.final, Path(step_summary))
        self.session.root.release()
        if settings.history is not None:
            self.history_line = self.record_history(settings.history, int(session.exitstatus))

    def record_history(self, history: Path, exit_code: int) -> str:
        """Add the finished root to the history file; the line that says how it went.

        Never raises and never changes the exit code: a locked or corrupt history file, or a root the
        record cannot read, is one line naming the file, and the root stays as written.
        """
        from pytest_abbench.campaign.switches import source_trees
        from pytest_abbench.history.record import record_root
        from pytest_abbench.history.store import HistoryError

        trees: dict[str, list[str]] = {}
        for campaign in self.session.campaigns.values():
            for side, folders in source_trees(campaign.switch).items():
                trees.setdefault(side, []).extend(f for f in folders if f not in trees.get(side, []))
        root = self.session.root.path
        try:
            run_id = record_root(history, root, exit_code, trees, self.session.settings.history_label)
        except (HistoryError, CorruptFileError, OSError, sqlite3.Error) as exc:
            return (f"abbench: history not recorded: {exc}; the root {root} and exit code {exit_code} are this "
                    "run's own (--ab-history PATH records elsewhere, --ab-history off not at all)")
        return f"history: run {run_id} recorded in {history}"

    def report_scope(self) -> tuple[list[CellOutcome], CampaignPlan]:
        """The cells and plan the report covers: this session's, and on --ab-resume the root's other ops too.

        A resumed root may hold ops this session did not select (a subset, another campaign file): report.md
        and report.json stay the root's report, not one of this session's ops alone.
        """
        outcomes = dict(self.session.outcomes)
        plan = self.session.plan
        if self.session.settings.resume is None:
            return list(outcomes.values()), plan
        from pytest_abbench.report.build import discover

        layout = self.session.root.layout
        for outcome in discover(layout, problems=[]):  # a bad line is named by the report's own read
            if outcome.key.op not in plan.ops:  # run by an earlier session: not this one's time
                outcomes.setdefault(outcome.key, dataclasses.replace(outcome, resumed=True))
        try:
            root_plan = read_plan(layout)
        except CorruptFileError:
            root_plan = None  # claim() refused an unreadable campaign.json: this cannot be reached
        return list(outcomes.values()), root_plan or plan

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter, exitstatus: int,
                                config: pytest.Config) -> None:
        if self.final is None:
            return
        from pytest_abbench.report.compact import terminal_lines

        layout = self.session.root.layout
        terminalreporter.section("abbench report")
        if "SIGTERM" in interrupts.received:
            terminalreporter.write_line("abbench: stopped by SIGTERM: the cell that was running was killed; "
                                        "cells not yet run are missing from this report")
        for line in terminal_lines(self.final, config.get_verbosity()):
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"report: {layout.report_md}, {layout.report_json}, {layout.report_html}")
        terminalreporter.write_line(f"abbench root: {self.session.root.path}")
        if self.summary_line is not None:
            terminalreporter.write_line(self.summary_line)
        if self.history_line is not None:
            terminalreporter.write_line(self.history_line)
        terminalreporter.write_line(self.final.exit_line())


def step_summary_line(final: Report, path: Path) -> str:
    """Append the markdown summary to ``$GITHUB_STEP_SUMMARY``'s file ``path``; the line that says where it went.  A
    file that cannot be written is that line, never another exit code: the report files and the exit code are the
    run's own."""
    from pytest_abbench.report.markdown import append_step_summary

    try:
        append_step_summary(final, path)
    except OSError as exc:
        return f"abbench: ${envnames.GITHUB_STEP_SUMMARY}: {path}: not written ({exc.strerror or exc})"
    return f"summary: ${envnames.GITHUB_STEP_SUMMARY} ({path})"
