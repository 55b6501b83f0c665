"""Balancing ops across xdist workers: the costliest op first, one worker per op, each worker's busy time."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from pytest_abbench.balance import OpWork, op_costs, op_work, order_ops
from pytest_abbench.layout import WORKERS_FILE
from pytest_abbench.plan import CampaignPlan
from pytest_abbench.root import CampaignRoot
from pytest_abbench.status import StatusRow, append_status_row, read_status

FAST = ("--ab-ir-target", "none", "-p", "no:cacheprovider")

# Three ops of 1, 2 and 6 shapes, declared cheapest first.
UNEVEN_CAMPAIGN = textwrap.dedent('''
    from pytest_abbench import Case, Op, Switch

    def build(shape, device):
        import torch
        x = torch.arange(shape["n"], dtype=torch.float32)
        return Case(run=lambda: x + 1, expected=lambda: x + 1)

    def shapes(count):
        return {"smoke": [{"n": 8 * (i + 1)} for i in range(count)]}

    OPS = [Op("small", build=build, shapes=shapes(1)), Op("mid", build=build, shapes=shapes(2)),
           Op("big", build=build, shapes=shapes(6))]
    SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
''')


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


PROGRESS = re.compile(r"^abbench: (gw\d) (\w+) (r\d-[AB]) ok \((\d+\.\d) s\)$", re.M)


def test_two_workers_start_with_the_two_costliest_ops_and_keep_each_op(campaign_dir: pytest.Pytester,
                                                                       tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=UNEVEN_CAMPAIGN)
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), "-n", "2", *FAST)
    result.assert_outcomes(passed=6)
    out = result.stdout.str()
    lines = PROGRESS.findall(out)
    assert len(lines) == 6, out
    by_worker: dict[str, list[tuple[str, str]]] = {}
    for worker, op, cell, _ in lines:
        by_worker.setdefault(worker, []).append((op, cell))
    # Collected small, mid, big: the two workers began with big and mid, and small came after one of them.
    assert {cells[0][0] for cells in by_worker.values()} == {"big", "mid"}, by_worker
    ops = ("small", "mid", "big")
    workers_of = {op: {w for w, cells in by_worker.items() for o, _ in cells if o == op} for op in ops}
    assert all(len(w) == 1 for w in workers_of.values()), workers_of
    for op in ops:  # side order within the op
        assert [c for cells in by_worker.values() for o, c in cells if o == op] == ["r1-A", "r1-B"]

    # The root keeps each worker's busy time: the sum of its cells' times in status.tsv.
    data = json.loads((root / WORKERS_FILE).read_text())
    elapsed = {(r.op, f"r{r.round}-{r.side}"): r.elapsed_s for r in read_status(root)}
    assert sorted(data["workers"]) == sorted(by_worker)
    for worker, cells in by_worker.items():
        entry = data["workers"][worker]
        assert entry["cells"] == 2 * len(entry["ops"]) == len(cells)
        assert entry["ops"] == list(dict.fromkeys(op for op, _ in cells))
        assert entry["busy_s"] == pytest.approx(sum(elapsed[c] for c in cells), abs=0.01)
        assert entry["gpu"] is None  # the interpreter pins no GPU
        assert 0 < entry["busy_s"] < data["wall_s"]
    summary = re.search(r"^abbench: gw0 busy (\d+\.\d) s, gw1 busy (\d+\.\d) s of (\d+\.\d) s wall$", out, re.M)
    assert summary is not None, out
    assert float(summary.group(3)) == pytest.approx(data["wall_s"], abs=0.1)
