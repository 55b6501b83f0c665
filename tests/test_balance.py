"""Balancing ops across xdist workers: the costliest op first, one worker per op, each worker's busy time."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from pytest_abbench.session.balance import OpWork, op_costs, op_work, order_ops, root_times
from pytest_abbench.core.layout import WORKERS_FILE
from pytest_abbench.core.plan import CampaignPlan
from pytest_abbench.session.root import CampaignRoot
from pytest_abbench.core.status import StatusRow, append_status_row, read_status

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
    plan = CampaignPlan(rounds=2)
    fresh = op_costs([OpWork(f"c.py::{op}", tuple(plan.cells(op)), n) for op, n in (("small", 1), ("mid", 2), ("big", 6))])
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
    times = root_times(tmp_path)
    shapes = {"done": 6, "small": 1, "mid": 2, "big": 6, "hand": None}
    work = [op_work(f"c.py::{op}", plan.cells(op), count, root.finished, times.get(op)) for op, count in shapes.items()]
    assert [(len(w.todo), w.times and dict(w.times.round1_s)) for w in work] == \
        [(0, {"A": 4.0, "B": 4.0}), (2, {"A": 30.0, "B": 30.0}), (3, {"B": 2.0}), (4, None), (4, None)]
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


def test_costs_from_an_earlier_root_round_one_as_timed_later_rounds_as_timed_or_gated(tmp_path: Path) -> None:
    # An earlier root at 3 rounds: topk compiles for long in round 1; "gated" ran round 1 only (the IR gate).
    def row(rnd: int, op: str, side: str, elapsed: float, status: str = "ok") -> None:
        append_status_row(tmp_path, StatusRow(rnd, op, side, "X=1", 0, status, elapsed, 1, 0))

    for op, r1, later in (("topk", (150.0, 35.0), (5.0, 5.0, 6.0, 4.0)), ("mm", (20.0, 20.0), (8.0,) * 4)):
        row(1, op, "A", r1[0]), row(1, op, "B", r1[1])
        row(2, op, "B", later[0]), row(2, op, "A", later[1]), row(3, op, "A", later[2]), row(3, op, "B", later[3])
    row(1, "gated", "A", 10.0), row(1, "gated", "B", 10.0)
    for rnd, side in ((2, "B"), (2, "A"), (3, "A"), (3, "B")):
        row(rnd, "gated", side, 0.0, "SWITCH_NO_IR_DIFF")
    row(1, "broken", "A", 99.0, "TIMEOUT")  # no ok cell: not a timing, the op is costed by its shapes
    times = root_times(tmp_path)
    assert sorted(times) == ["gated", "mm", "topk"]
    assert times["gated"].gated and not times["topk"].gated

    plan = CampaignPlan(rounds=3)
    shapes = {"topk": 2, "gated": 4, "mm": 8, "new": 4, "broken": 4, "hand": None}  # "new": not in that root
    work = [op_work(f"c.py::{op}", plan.cells(op), n, lambda key: None, times.get(op)) for op, n in shapes.items()]
    costs = op_costs(work)
    # topk: its round-1 cells (150 + 35) + 4 later cells at their mean (5); gated: round 1 only; mm: 2 x 20 + 4 x 8.
    # new and broken: 4 shapes x 6 cells x the timed ops' median round-1 seconds per shape (92.5/2, 10/4, 20/8 -> 2.5);
    # hand: 6 cells x the median round-1 cell (92.5, 10, 20, 10, 10 -> 10).
    assert costs == {"c.py::topk": 205.0, "c.py::gated": 20.0, "c.py::mm": 72.0, "c.py::new": 60.0,
                     "c.py::broken": 60.0, "c.py::hand": 60.0}
    assert order_ops(list(costs), costs)[:2] == ["c.py::topk", "c.py::mm"]
    # With --ab-allow-no-ir-diff the gate skips nothing: gated's later rounds cost as its round 1 did.
    assert op_costs(work, gate=False)["c.py::gated"] == 60.0
    # By shape counts alone topk, the slowest, would go last.
    counted = op_costs(OpWork(w.scope, w.todo, w.shapes) for w in work)
    assert order_ops(list(counted), counted)[-1] == "c.py::topk"

    # A session that runs only rounds 2 and 3 of topk (-k "r2 or r3") pays no round 1.
    later = op_costs([op_work("c.py::topk", plan.cells("topk")[2:], 2, lambda key: None, times["topk"])])
    assert later == {"c.py::topk": 20.0}


def test_costs_from_an_earlier_root_hand_out_its_slow_op_first(campaign_dir: pytest.Pytester,
                                                              tmp_path: Path) -> None:
    # An earlier root of the campaign, as its cells wrote status.tsv: "small" (one shape) took 40 s a cell.
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for op, seconds in (("small", 40.0), ("mid", 1.0), ("big", 2.0)):
        for side in ("A", "B"):
            append_status_row(earlier, StatusRow(1, op, side, "ABBENCH_TEST_SWITCH=1", 0, "ok", seconds, 1, 0))
    campaign_dir.makepyfile(c=UNEVEN_CAMPAIGN)
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), "-n", "2",
                                               "--ab-costs-from", str(earlier), *FAST)
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines([f"abbench: op costs from {earlier}: 3 of 3 ops measured there"])
    workers = json.loads((root / WORKERS_FILE).read_text())["workers"]
    # By shapes the two workers would begin with big (6) and mid (2); small's 40 s cells put it first, then big.
    assert {entry["ops"][0] for entry in workers.values()} == {"small", "big"}, workers


def test_costs_from_names_a_missing_root_a_folder_without_status_and_a_bad_line(campaign_dir: pytest.Pytester,
                                                                                  tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=UNEVEN_CAMPAIGN)
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = tmp_path / "bad"
    bad.mkdir()
    append_status_row(bad, StatusRow(1, "small", "A", "X=1", 0, "ok", 1.0, 1, 0))
    with (bad / "status.tsv").open("a") as f:
        f.write("1\tsmall\tB\tX=1\t0\tok\tfast\t1\t0\t0\t0\t0\n")
    for path, message in ((tmp_path / "nowhere", f"--ab-costs-from: '{tmp_path / 'nowhere'}' does not exist"),
                          (empty, f"--ab-costs-from: '{empty}' is not a campaign root (no status.tsv in it)"),
                          (bad, f"--ab-costs-from: {bad / 'status.tsv'}:3: column 'elapsed_s': expected a number, got 'fast'")):
        result = campaign_dir.runpytest_subprocess("c.py", "--ab-costs-from", str(path), *FAST)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"ERROR: {message}"])
