"""A cell's time budget: every deadline of a cell, decided in one place from ``--cell-timeout``.

A cell's child is killed (its whole process group) at ``child_s``; an op's
round 1 first runs a parallel compile, killed at ``precompile_s``; the
pytest-timeout guard around the parent's side of the cell (``guard_s``) sits
above both plus the parent's own bookkeeping, so it fires only when the parent
itself hangs.  The budget in force is written into the root (``budget.json``) for
people and tools; nothing in a session reads it back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_abbench.core.fileio import write_json_atomic

BUDGET_FILE = "budget.json"
SCHEMA = 1
# The parent's work around a child: reading its files, landing them, the caliber check and the IR gate.  Far
# above what they take (well under a second per cell); the guard is for a parent that hangs, not a slow one.
BOOKKEEPING_S = 300.0


@dataclass(frozen=True)
class CellBudget:
    """The deadlines of every cell of a session, in seconds."""

    child_s: float  # the cell's child: its compile, IR capture and timed work (--cell-timeout)
    precompile_s: float  # the parallel compile before an op's round 1 (GPU only)
    bookkeeping_s: float = BOOKKEEPING_S

    @classmethod
    def from_cell_timeout(cls, cell_timeout_s: float) -> CellBudget:
        return cls(child_s=cell_timeout_s, precompile_s=cell_timeout_s)

    def guard_s(self, round_no: int) -> float:
        """pytest-timeout's limit for a cell test: round 1 may compile first, then run its child."""
        return (self.precompile_s if round_no == 1 else 0.0) + self.child_s + self.bookkeeping_s

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **asdict(self), "guard_s": {"round 1": self.guard_s(1), "later": self.guard_s(2)}}


def write_budget(root: Path, budget: CellBudget) -> None:
    """Record the budget this session runs under (a resumed root records the resuming session's)."""
    write_json_atomic(root / BUDGET_FILE, budget.to_json())
