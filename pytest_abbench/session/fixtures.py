"""The cell test and the fixtures that give it its guarantees.

A campaign file's op becomes one test function parametrized over round x
role (``topk[r3-B]``).  It requests three fixtures, each replaceable by a
conftest fixture of the same name:

- ``abbench_cell``: the cell (its key, campaign, folder and settings); ``run()`` runs its child;
- ``abbench_ir_gate``: skips a cell whose op's round-1 TTGIR was identical on both sides,
  and decides that after round 1 (or before it, from the precompile's IR, with ``--ab-precompile``);
- ``abbench_caliber``: compares the cell's identity with the other side's (its round and
  round 1) once it ran; a mismatch makes the session exit 4.

A hand-written test gets the same cells and checks by requesting the same
fixtures and naming its campaign and op with ``@pytest.mark.abbench``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

from pytest_abbench.core.exitcodes import TIMEOUT, status_word
from pytest_abbench.core.layout import SIDES, CellKey, ir_dir, run_log
from pytest_abbench.core.outcome import ALL_FAILED, IMPORT_REFUSED, NO_GPU, NO_IR_DIFF, CellOutcome
from pytest_abbench.session.campaign_session import SHIPPED_KEY, AbbenchSession, session_of
from pytest_abbench.session.cells import CALIBER_PROPERTY, GATE_PROPERTY, NOTICE_PROPERTY, PlannedCell

if TYPE_CHECKING:
    from pytest_abbench.campaign.model import Campaign

class Cell:
    """What ``abbench_cell`` gives a test: one (round, op, role) of the session's plan."""

    def __init__(self, planned: PlannedCell, session: AbbenchSession, node: pytest.Item) -> None:
        self.planned = planned
        self.session = session
        self.node = node
        self.outcome: CellOutcome | None = None

    @property
    def key(self) -> CellKey:
        return self.planned.key

    @property
    def campaign(self) -> "Campaign":
        return self.session.campaign(self.planned.campaign_path)

    @property
    def folder(self) -> Path:
        return self.session.root.layout.cell(self.key)

    def record(self, outcome: CellOutcome, kernel_cache: Path | None = None) -> None:
        """Carry the outcome on the test's reports, and its files to the process that writes the root.

        That process (the xdist controller, or this one in a serial session)
        lands them and appends the status row (``transport.land``).  ``kernel_cache``: the Triton cache folder
        the cell's side used, kept in its ``origin.json``.
        """
        from pytest_abbench.session.transport import pack

        self.outcome = outcome
        session = self.session
        name = os.path.relpath(self.planned.campaign_path, session.config.rootpath)
        self.node.stash[SHIPPED_KEY] = pack(outcome, session.root.layout, session.worker, Path(name).as_posix(),
                                            outcome.measured, kernel_cache)
        self.node.user_properties.extend(outcome.report_properties())
        self.node.user_properties.extend((NOTICE_PROPERTY, line) for line in self.session.root.notices)
        self.session.root.notices.clear()

    def run(self) -> CellOutcome:
        """Run the cell's child (or take a finished outcome of a resumed root); a failed cell fails the test."""
        session = self.session
        finished = session.root.finished(self.key)
        if finished is not None:
            self.record(finished)
            return finished  # finished before the crash: its files are read from disk, not measured again
        not_needed = session.auto_rounds.round_not_needed(self.key)
        all_failed = session.runner().all_failed(self.campaign, self.key)
        if all_failed is not None:  # round 1 failed every shape alike: a later round would fail them again
            not_needed = ALL_FAILED, all_failed
        if not_needed is not None:  # --ab-rounds auto: the op settled, or the budget is spent
            status, why = not_needed
            self.record(CellOutcome(self.key, self.folder, status, self.campaign.switch.describe(),
                                    str(self.planned.campaign_path)))
            pytest.skip(why)
        session.root.check_alive()
        if session.gpu_problem is not None:
            self.record(CellOutcome(self.key, self.folder, NO_GPU, self.campaign.switch.describe(),
                                    str(self.planned.campaign_path), rc=0))
            pytest.fail(f"cell {self.key} not started: {session.gpu_problem}", pytrace=False)
        refused = session.runner().kernel_import_refusal(self.campaign, self.key, session.campaigns)
        if refused is not None:
            self.record(CellOutcome(self.key, self.folder, IMPORT_REFUSED, self.campaign.switch.describe(),
                                    str(self.planned.campaign_path), rc=0))
            pytest.fail(f"cell {self.key} not started: {refused}", pytrace=False)
        session.root.set_aside(self.key)
        started = time.monotonic()
        try:
            cell_run = session.runner().run(self.campaign, self.key)
        except pytest.fail.Exception:
            # pytest-timeout's guard (core.budget) fired in this process: the child's group is already killed
            # (cellrun); the cell still gets its row, as TIMEOUT, so the root says what happened and resumes.
            self.record(CellOutcome(self.key, self.folder, status_word(TIMEOUT), self.campaign.switch.describe(),
                                    str(self.planned.campaign_path), rc=TIMEOUT,
                                    elapsed_s=time.monotonic() - started))
            raise
        self.record(cell_run.outcome, cell_run.kernel_cache)
        self.node.user_properties.extend((NOTICE_PROPERTY, line) for line in cell_run.notices)
        if cell_run.failure is not None:
            pytest.fail(cell_run.failure, pytrace=False)
        return cell_run.outcome


@pytest.fixture
def abbench_cell(request: pytest.FixtureRequest) -> Cell:
    """The A/B cell this test measures: key (round, op, role), campaign, folder; ``.run()`` runs its child.

    Parametrized by pytest-abbench over the session's rounds and sides for
    the op named by ``@pytest.mark.abbench(campaign=..., op=...)`` (campaign files get it implicitly).
    """
    planned = getattr(request, "param", None)
    if not isinstance(planned, PlannedCell):
        raise pytest.UsageError(f"{request.node.nodeid} requests abbench_cell without a cell parameter: "
                                "mark the test @pytest.mark.abbench(campaign='file.py', op='name')")
    return Cell(planned, session_of(request.config), request.node)


@pytest.fixture
def abbench_ir_gate(abbench_cell: Cell, request: pytest.FixtureRequest) -> Iterator[None]:
    """IR gate: skip (SWITCH_NO_IR_DIFF) a cell whose op's round-1 TTGIR was identical on both sides.

    After round 1 it fingerprints both sides' TTGIR and saves the decision.
    ``--ab-allow-no-ir-diff`` runs every round anyway.
    """
    from pytest_abbench.checks import irgate

    cell = abbench_cell
    session = cell.session
    key = cell.key
    reason = (f"{NO_IR_DIFF}: round 1 TTGIR of {key.op} is identical on both sides "
              "(--ab-allow-no-ir-diff runs it anyway)")
    finished = session.root.finished(key)
    if finished is not None and finished.status == NO_IR_DIFF:
        cell.record(finished)
        pytest.skip(reason)
    precompile_s = 0.0  # the op's precompile, when it decided the gate here: this cell's time
    if finished is None and key.round == 1 and session.settings.gate_first and key.op not in session.gates:
        precompile_s = _decide_before_round_1(cell, request)
    if key.op in session.gated_first:
        reason = reason.replace("round 1 TTGIR", "the precompile's TTGIR (before round 1)")
    gate = session.gate_for(key.op) if key.round > 1 or key.op in session.gated_first else None
    if finished is None and gate is not None and gate.state == "no_diff" and not session.settings.allow_no_ir_diff:
        cell.record(CellOutcome(key, cell.folder, NO_IR_DIFF, cell.campaign.switch.describe(),
                                str(cell.planned.campaign_path), elapsed_s=precompile_s))
        pytest.skip(reason)
    yield
    if key.round != 1 or cell.outcome is None or cell.outcome.resumed:
        return
    folders = {side: session.root.layout.cell(CellKey(1, key.op, side)) for side in SIDES}
    if key.op in session.gates or not all(run_log(f).exists() for f in folders.values()):
        return  # decided already, or the other side has not run yet (or was deselected)
    basis = session.settings.ir_basis(cell.campaign.op(key.op).shapes)
    decision = irgate.decide(key.op, ir_dir(folders["A"]), ir_dir(folders["B"]), basis, cell.campaign.switch.variants())
    irgate.save_decision(session.root.path, decision)
    session.gates[key.op] = decision
    request.node.user_properties.append((GATE_PROPERTY, json.dumps(decision.to_json())))


def _decide_before_round_1(cell: Cell, request: pytest.FixtureRequest) -> float:
    """``--ab-precompile`` (auto on a GPU, or on): before the op's first round-1 cell, run its precompile and decide
    the gate from the IR it compiled for both sides.  Only "no code changed" is decided here: the precompile compiles every autotune
    candidate, so a difference may lie in candidates no cell runs; round 1 then decides as it always did.  Not
    when a round-1 cell of the op already finished (a resumed root): round 1 decides.  Returns the precompile's
    seconds where it decided "no code changed" (the cell it skips carries them), else 0: the op's first timed
    cell carries them."""
    from pytest_abbench.checks import irgate

    session, key = cell.session, cell.key
    if any(session.root.finished(CellKey(1, key.op, role)) is not None for role in SIDES):
        return 0.0
    runner = session.runner()
    cell.folder.mkdir(parents=True, exist_ok=True)
    runner.precompile(cell.campaign, key, run_log(cell.folder))
    folders = runner.precompile_ir.get(key.op)
    if folders is None:
        return 0.0  # no precompile ran, or a job failed: round 1 decides
    basis = session.settings.ir_basis(cell.campaign.op(key.op).shapes)
    decision = irgate.decide(key.op, folders[0], folders[1], f"{basis}, the precompile's IR before round 1",
                             cell.campaign.switch.variants())
    if decision.state != "no_diff":
        return 0.0
    irgate.save_decision(session.root.path, decision)
    session.gates[key.op] = decision
    session.gated_first.add(key.op)
    request.node.user_properties.append((GATE_PROPERTY, json.dumps(decision.to_json())))
    return runner.carry_precompile(key.op, cell.folder)


@pytest.fixture
def abbench_caliber(abbench_cell: Cell, request: pytest.FixtureRequest) -> Iterator[None]:
    """Caliber check: once the cell ran, compare its identity with the other side's (its round and round 1).

    A mismatch prints ``!!! [caliber]`` and the session exits 4 (``--allow-caliber-mismatch`` reports it only).
    """
    yield
    outcome = abbench_cell.outcome
    session = abbench_cell.session
    if outcome is None or outcome.resumed or not outcome.measured or session.settings.ir_only:
        return  # nothing ran, or nothing timed: nothing to calibrate
    from pytest_abbench.checks import caliber

    layout = session.root.layout
    key = abbench_cell.key
    mine = layout.cell(key)

    def folder(round_no: int, role: str) -> Path:
        return layout.cell(CellKey(round_no, key.op, role))

    found = caliber.CaliberResult()
    for dir_a, dir_b in caliber.cell_pairs(key.round, folder, control=session.settings.control):
        if mine in (dir_a, dir_b) and run_log(dir_a).exists() and run_log(dir_b).exists():
            found.extend(caliber.compare_identities(key.op, dir_a, dir_b))
    for first, later in caliber.side_pairs(key.round, folder):
        if mine in (first, later) and run_log(first).exists():
            found.extend(caliber.compare_side_rounds(key.op, first, later))
    if found.findings:
        request.node.user_properties.append((CALIBER_PROPERTY, json.dumps([f.line() for f in found.findings])))
