"""A cell's deadlines have one owner (core.budget): the guard covers round 1's compile, and the root records them."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_abbench.core.budget import BUDGET_FILE, CellBudget, write_budget


def test_round_one_guard_covers_the_precompile_and_the_child() -> None:
    budget = CellBudget.from_cell_timeout(100.0)
    assert budget.guard_s(1) == 100.0 + 100.0 + budget.bookkeeping_s  # a compile may take its whole deadline first
    assert budget.guard_s(2) == 100.0 + budget.bookkeeping_s


def test_the_budget_in_force_is_written_into_the_root(tmp_path: Path) -> None:
    write_budget(tmp_path, CellBudget.from_cell_timeout(7.5))
    assert json.loads((tmp_path / BUDGET_FILE).read_text()) == {
        "schema": 1, "child_s": 7.5, "precompile_s": 7.5, "bookkeeping_s": 300.0,
        "guard_s": {"round 1": 7.5 + 7.5 + 300.0, "later": 7.5 + 300.0}}
