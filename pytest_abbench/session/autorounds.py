"""--ab-rounds auto: whether an op needs its next round, decided once per (op, round) in this process.

Held by the session (``campaign_session.AbbenchSession.auto_rounds``) and asked
by the cell test (``fixtures.Cell.run``) before a cell runs.  Every cell of an
op runs in one process (xdist's ``scheduler.CellsByOp``), so the op's earlier
rounds are all among this process's outcomes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from pytest_abbench.core.layout import CellKey
from pytest_abbench.core.outcome import OVER_BUDGET, SETTLED, CellOutcome
from pytest_abbench.core.plan import CampaignPlan


class AutoRounds:
    """The rounds an op does not need: after the first look, a settled op or a spent budget stops it."""

    def __init__(self, root: Path, plan: CampaignPlan, outcomes: Mapping[CellKey, CellOutcome],
                 margin_pct: float | None, budget_s: float | None) -> None:
        self.root = root
        self.plan = plan
        self.outcomes = outcomes  # the session's, filled as cells end (read, never written, here)
        self.margin_pct = margin_pct  # --ab-margin
        self.budget_s = budget_s  # --ab-rounds-budget
        # (op, round) -> None (the round runs) or (status, why not), decided once per round
        self.decided: dict[tuple[str, int], tuple[str, str] | None] = {}

    def round_not_needed(self, key: CellKey) -> tuple[str, str] | None:
        """(SETTLED or OVER_BUDGET, why) when ``key``'s round is one its op does not need, else None.

        Decided at the round's first cell, from the op's earlier rounds, and
        kept for the round's other cells: an op stops at a whole round, and
        once stopped it stays stopped."""
        plan = self.plan
        if plan.auto_min is None or key.round <= plan.auto_min:
            return None
        decided = (key.op, key.round)
        if decided not in self.decided:
            before = self.decided.get((key.op, key.round - 1))
            self.decided[decided] = before if before is not None else self._look(key.op, key.round - 1)
        return self.decided[decided]

    def _look(self, op: str, rounds: int) -> tuple[str, str] | None:
        """The look after ``rounds`` rounds of ``op`` (``report.build.settled_after``), then the budget."""
        from pytest_abbench.report.build import settled_after

        judged = settled_after(self.root, op, self.outcomes.values(), self.plan, self.margin_pct, rounds)
        if judged.settled:
            return SETTLED, (f"{SETTLED}: every shape of {op} settled after {rounds} rounds (--ab-rounds auto: "
                             f"{self.plan.auto_min} to {self.plan.rounds})")
        budget = self.budget_s
        spent = sum(o.elapsed_s for o in self.outcomes.values() if not o.resumed)
        if budget is not None and spent >= budget:
            left = (f"{len(judged.unsettled)} shape(s) unsettled" if judged.judged
                    else f"no verdict ({judged.reason})")
            return OVER_BUDGET, (f"{OVER_BUDGET}: this process's cells took {spent:.0f}s of the {budget:g}s "
                                 f"--ab-rounds-budget; {op} stops after {rounds} rounds, {left}")
        return None
