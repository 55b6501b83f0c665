"""Balancing ops across xdist workers: the costliest op first, one worker per op, each worker's busy time."""

from __future__ import annotations

from pathlib import Path

from pytest_abbench.balance import OpWork, op_costs, op_work, order_ops
from pytest_abbench.plan import CampaignPlan
from pytest_abbench.root import CampaignRoot
from pytest_abbench.status import StatusRow, append_status_row


def test_costs_from_shapes_and_from_a_resumed_roots_round_one(tmp_path: Path) -> None:
    # Nothing timed: shapes x cells; a test that is not a cell keeps its slot in the queue.
    fresh = op_costs([OpWork("c.py::small", 4, 1), OpWork("c.py::mid", 4, 2), OpWork("c.py::big", 4, 6)])
    assert fresh == {"c.py::small": 4, "c.py::mid": 8, "c.py::big": 24}
    assert order_ops(["c.py::small", "t.py::test_plain", "c.py::mid", "c.py::big"], fresh) == \
        ["c.py::big", "t.py::test_plain", "c.py::mid", "c.py::small"]

    # A resumed root: round-1 times as status.tsv holds them; the last row of a cell decides.
    def row(rnd: int, op: str, side: str, elapsed: float, status: str = "ok") -> None:
        append_status_row(tmp_path, StatusRow(rnd, op, side, "X=1", 0 if status == "ok" else 124, status,
                                              elapsed, 1, 0))

    for rnd, side in ((1, "A"), (1, "B"), (2, "B"), (2, "A")):
        row(rnd, "done", side, 4.0)  # every cell finished: nothing left to run
    row(1, "small", "A", 30.0)
    row(1, "small", "B", 30.0)  # one shape, yet slow: its timings outrank its shape count
    row(1, "mid", "A", 50.0, "TIMEOUT")  # not finished, not a timing: it runs again
    row(1, "mid", "B", 2.0)
    root = CampaignRoot(tmp_path, resume=True, say=print)
    plan = CampaignPlan(rounds=2)
    shapes = {"done": 6, "small": 1, "mid": 2, "big": 6, "hand": None}
    work = [op_work(f"c.py::{op}", plan.cells(op), count, root.finished) for op, count in shapes.items()]
    assert [(w.cells, w.round1_s) for w in work] == [(0, (4.0, 4.0)), (2, (30.0, 30.0)), (3, (2.0,)), (4, ()), (4, ())]
    costs = op_costs(work)
    # Untimed "big": 6 shapes x the timed ops' median seconds per shape (4/6, 30, 1 -> 1); "hand" (shapes
    # unknown): the median cell of the others (4, 30, 2, 6 -> 5).
    assert costs == {"c.py::done": 0.0, "c.py::small": 60.0, "c.py::mid": 6.0, "c.py::big": 24.0, "c.py::hand": 20.0}
    assert order_ops(list(costs), costs) == ["c.py::small", "c.py::big", "c.py::hand", "c.py::mid", "c.py::done"]
