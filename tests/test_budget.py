"""A cell's deadlines have one owner (core.budget): the guard covers round 1's compile, and the root records them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_abbench.core.budget import BUDGET_FILE, CellBudget, read_budget, write_budget
from pytest_abbench.core.fileio import CorruptFileError


def test_round_one_guard_covers_the_precompile_and_the_child() -> None:
    budget = CellBudget.from_cell_timeout(100.0)
    assert budget.guard_s(1) == 100.0 + 100.0 + budget.bookkeeping_s  # a compile may take its whole deadline first
    assert budget.guard_s(2) == 100.0 + budget.bookkeeping_s


def test_budget_round_trips_through_the_root(tmp_path: Path) -> None:
    write_budget(tmp_path, CellBudget.from_cell_timeout(7.5))
    assert read_budget(tmp_path) == CellBudget(7.5, 7.5)
    assert json.loads((tmp_path / BUDGET_FILE).read_text())["guard_s"]["round 1"] == 7.5 + 7.5 + 300.0
    assert read_budget(tmp_path / "nowhere") is None  # a root written before budgets were recorded
    (tmp_path / BUDGET_FILE).write_text(json.dumps({"child_s": 1, "precompile_s": 2, "bookkeeping_s": 3}))
    assert read_budget(tmp_path) == CellBudget(1.0, 2.0, 3.0)  # no version field: version 1


@pytest.mark.parametrize(("data", "message"), [
    ({"schema": 2, "child_s": 1, "precompile_s": 1, "bookkeeping_s": 1}, "field 'schema': expected 1, found 2"),
    ({"schema": 1, "precompile_s": 1, "bookkeeping_s": 1}, "field 'child_s': expected seconds as a number, found None"),
    ({"schema": 1, "child_s": "1", "precompile_s": 1, "bookkeeping_s": 1}, "field 'child_s'"),
])
def test_a_bad_budget_file_names_the_file_and_the_field(tmp_path: Path, data: dict[str, object], message: str) -> None:
    (tmp_path / BUDGET_FILE).write_text(json.dumps(data))
    with pytest.raises(CorruptFileError) as caught:
        read_budget(tmp_path)
    assert str(tmp_path / BUDGET_FILE) in str(caught.value) and message in str(caught.value)
