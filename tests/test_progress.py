"""Progress while a campaign runs (one line per finished round) and where its time went (report.json, the end)."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from helpers import simple_campaign
from pytest_abbench.core.layout import CellKey
from pytest_abbench.core.status import COLUMNS
from pytest_abbench.session.progress import CELL_START_S, STEADY_SHAPE_S, RoundProgress, duration, estimate_before_round_1
from pytest_abbench.report import cost

FAST = ("--ab-ir-target", "none", "--ab-samples", "1", "-p", "no:cacheprovider")


def test_a_line_when_a_round_is_complete_with_the_time_left() -> None:
    cells = [CellKey(r, op, side) for r in (1, 2) for op in ("one", "two") for side in "AB"]
    progress = RoundProgress(cells, rounds=2, started=0.0)
    lines = [progress.cell_done(key, now=10.0 * (n + 1), elapsed_s=10.0) for n, key in enumerate(cells)]
    assert lines[:3] == [None, None, None]
    assert lines[3] == ("abbench: round 1 done, 1 of 2 rounds (4 of 8 cells), 40s elapsed, about 40s left "
                        "(rough: from round 1)")
    assert lines[7] == "abbench: round 2 done, 2 of 2 rounds (8 of 8 cells), 1m20s elapsed"
    assert progress.cell_done(cells[0]) is None, "a cell reported twice counts once"
    assert progress.cell_done(CellKey(3, "one", "A")) is None, "a cell the session did not select is ignored"
    assert [duration(s) for s in (5, 185, 7620)] == ["5s", "3m05s", "2h07m"]
    resumed = RoundProgress(cells, rounds=2, started=0.0)  # no cell ran here: the wall time per cell it is
    assert [resumed.cell_done(key, now=4.0 * (n + 1)) for n, key in enumerate(cells[:4])][3] == (
        "abbench: round 1 done, 1 of 2 rounds (4 of 8 cells), 16s elapsed, about 16s left "
        "(rough: from the wall time per cell)")


def test_the_time_left_counts_from_the_end_of_round_1_which_compiles() -> None:
    """Round 1's cells compile (100 s each here), later ones load from the cache (10 s): after round 2 the
    estimate uses the later rounds' pace, not the mean that round 1 inflates."""
    cells = [CellKey(r, "op", side) for r in (1, 2, 3, 4) for side in "AB"]
    progress = RoundProgress(cells, rounds=4, started=0.0)
    finish = [100.0, 200.0, 210.0, 220.0, 230.0, 240.0, 250.0, 260.0]
    lines = [progress.cell_done(key, now=at, elapsed_s=at - before)
             for key, at, before in zip(cells, finish, [0.0, *finish])]
    assert lines[1] == ("abbench: round 1 done, 1 of 4 rounds (2 of 8 cells), 3m20s elapsed, about 10m00s left "
                        "(rough: from round 1)")
    assert lines[3] == "abbench: round 2 done, 2 of 4 rounds (4 of 8 cells), 3m40s elapsed, about 40s left"
    assert lines[5] == "abbench: round 3 done, 3 of 4 rounds (6 of 8 cells), 4m00s elapsed, about 20s left"


def test_after_round_1_the_time_left_leaves_out_its_compile_seconds() -> None:
    """Round 1's cells took 100 s, 90 of them compiling (as their timing says): the rounds after it load the
    kernels, so the estimate after round 1 is 10 s a cell, not 100 (a topk campaign said 29 min for 66 s)."""
    cells = [CellKey(r, "op", side) for r in (1, 2, 3, 4) for side in "AB"]
    progress = RoundProgress(cells, rounds=4, started=0.0)
    lines = [progress.cell_done(cells[0], now=100.0, elapsed_s=100.0, compile_s=90.0),
             progress.cell_done(cells[1], now=200.0, elapsed_s=100.0, compile_s=90.0)]
    assert lines[1] == ("abbench: round 1 done, 1 of 4 rounds (2 of 8 cells), 3m20s elapsed, about 1m00s left "
                        "(rough: round 1 without its 3m00s of compiling and tuning)")
    gated = RoundProgress(cells + [CellKey(r, "same", s) for r in (1, 2, 3, 4) for s in "AB"], rounds=4, started=0.0)
    for n, key in enumerate([cells[0], cells[1], CellKey(1, "same", "A")]):
        gated.cell_done(key, now=100.0 * (n + 1), elapsed_s=100.0, compile_s=90.0)
    # The IR gate skips op "same" after round 1: its 6 cells left cost nothing; op's 6 cost 10 s each.
    assert gated.cell_done(CellKey(1, "same", "B"), now=400.0, elapsed_s=100.0, compile_s=90.0, gated=["same"]) == (
        "abbench: round 1 done, 1 of 4 rounds (4 of 16 cells), 6m40s elapsed, about 1m00s left "
        "(rough: round 1 without its 6m00s of compiling and tuning)")
    parallel = RoundProgress(cells, rounds=4, started=0.0, workers=2)  # two cells compiled at once
    parallel.cell_done(cells[0], now=98.0, elapsed_s=98.0, compile_s=90.0)
    assert parallel.cell_done(cells[1], now=100.0, elapsed_s=100.0, compile_s=90.0) == (
        "abbench: round 1 done, 1 of 4 rounds (2 of 8 cells), 1m40s elapsed, about 27s left "
        "(rough: round 1 without its 3m00s of compiling and tuning)")


def test_under_auto_rounds_the_time_left_is_the_rounds_every_op_runs_then_the_most() -> None:
    """--ab-rounds auto (3 to 10): after round 1 the rounds every op runs are 2 and 3; the rest run only while a
    shape is unsettled, so they are the most it can take, not the time left (a Liger-Kernel run said 2m06s
    left with 28 s to go).  Once an op's later round is skipped as settled, its rounds cost nothing, and a round
    every op skipped prints no line of its own."""
    cells = [CellKey(r, op, side) for r in range(1, 11) for op in ("one", "two") for side in "AB"]
    progress = RoundProgress(cells, rounds=10, started=0.0, auto_min=3)
    lines = [progress.cell_done(key, now=10.0 * (n + 1), elapsed_s=10.0) for n, key in enumerate(cells[:12])]
    assert lines[3] == ("abbench: round 1 done, 1 of 10 rounds (4 of 40 cells), 40s elapsed, about 1m20s left "
                        "(rough: from round 1), up to 6m00s if ops need all 10 rounds (--ab-rounds auto)")
    assert lines[11] == ("abbench: round 3 done, 3 of 10 rounds (12 of 40 cells), 2m00s elapsed, up to 4m40s left "
                         "if ops need all 10 rounds (--ab-rounds auto)")
    # Round 4: op "one" settled (its cells skipped in no time), "two" ran on.
    line = None
    for key in cells[12:16]:
        line = progress.cell_done(key, now=130.0, elapsed_s=0.0 if key.op == "one" else 10.0, gated={"one"})
    assert line == ("abbench: round 4 done, 4 of 10 rounds (16 of 40 cells), 2m10s elapsed, up to 2m00s left "
                    "if ops need all 10 rounds (--ab-rounds auto)")
    # "two" settles at round 5: rounds 6 to 9 skip every cell and say nothing; the last round's line counts them.
    lines = [progress.cell_done(key, now=150.0, elapsed_s=10.0 if key.op == "two" else 0.0, gated={"one"})
             for key in cells[16:20]]
    assert lines[3] == ("abbench: round 5 done, 5 of 10 rounds (20 of 40 cells), 2m30s elapsed, up to 1m40s left "
                        "if ops need all 10 rounds (--ab-rounds auto)")
    lines = [progress.cell_done(key, now=151.0, elapsed_s=0.0, gated={"one", "two"}) for key in cells[20:]]
    assert [line for line in lines if line] == [
        "abbench: round 10 done, 10 of 10 rounds (40 of 40 cells), 2m31s elapsed"]
    fixed = RoundProgress(cells, rounds=10, started=0.0)  # a fixed number of rounds: every one runs
    assert [fixed.cell_done(key, now=10.0 * (n + 1), elapsed_s=10.0) for n, key in enumerate(cells[:4])][3] == (
        "abbench: round 1 done, 1 of 10 rounds (4 of 40 cells), 40s elapsed, about 6m00s left (rough: from round 1)")


def test_the_time_left_adds_up_each_ops_own_cost() -> None:
    """Ops differ in cost: a FlagGems mm cell took 25 s where its layer norm took 7, and the IR gate skipped the
    layer norm after round 1.  The cells left are mm's, so they cost what mm's cells cost (12.5 s each without
    round 1's compile), not the mean over every op's cells (10.75 s: 'about 34s left' when 51 s were left)."""
    cells = [CellKey(r, op, side) for r in (1, 2, 3) for op in ("mm", "ln") for side in "AB"]
    progress = RoundProgress(cells, rounds=3, started=0.0)
    ends, line = 0.0, None
    for key, elapsed, compile_s in [(CellKey(1, "mm", "A"), 25.0, 8.0), (CellKey(1, "mm", "B"), 8.0, 0.0),
                                    (CellKey(1, "ln", "A"), 11.0, 0.0), (CellKey(1, "ln", "B"), 7.0, 0.0)]:
        ends += elapsed
        line = progress.cell_done(key, now=ends, elapsed_s=elapsed, compile_s=compile_s, gated=["ln"])
    assert line == ("abbench: round 1 done, 1 of 3 rounds (4 of 12 cells), 51s elapsed, about 50s left "
                    "(rough: round 1 without its 8s of compiling and tuning)")
    for key, elapsed in [(CellKey(2, "mm", "A"), 17.0), (CellKey(2, "mm", "B"), 9.0),
                         (CellKey(2, "ln", "A"), 0.0), (CellKey(2, "ln", "B"), 0.0)]:
        ends += elapsed
        line = progress.cell_done(key, now=ends, elapsed_s=elapsed, gated=["ln"])
    assert line == "abbench: round 2 done, 2 of 3 rounds (8 of 12 cells), 1m17s elapsed, about 26s left"


def test_a_session_prints_each_round_and_where_the_time_went(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=simple_campaign())
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "2", "--ab-root", str(root), *FAST)
    result.assert_outcomes(passed=8)
    out = result.stdout.str()
    rounds = re.findall(r"abbench: round (\d) done, (\d) of 2 rounds \((\d) of 8 cells\)", out)
    assert rounds == [("1", "1", "4"), ("2", "2", "8")]
    assert re.search(r"round 1 done.*elapsed, about \S+ left", out)

    spent = json.loads((root / "report.json").read_text())["time_spent"]
    assert spent["cells"] == 8 and spent["cells_without_timing"] == 0 and spent["workers"] == 1
    parts = sum(spent[key] for key, _, _ in cost.PARTS)
    assert parts == pytest.approx(spent["cells_s"], abs=0.01), "every second of a cell is in exactly one part"
    assert spent["startup_s"] > 0 and spent["timing_s"] > 0
    assert spent["idle_s"] == pytest.approx(spent["wall_s"] - spent["cells_s"], abs=0.01)
    line = next(line for line in out.splitlines() if line.startswith("time: 8 cells"))
    assert re.search(r"start-up \d+%, inputs \d+%, compile \d+%, autotune \d+%, timing \d+%, checks \d+%, "
                     r"exit \d+%, other \d+%; "
                     r"wall \S+ s on 1 worker, idle \d+%", line), line


def test_an_ir_only_cell_counts_as_compile(tmp_path: Path) -> None:
    """IR triage's cells compile and time nothing (no cell_timing.json): their time is compile, not other."""
    from pytest_abbench.core.outcome import IR_ONLY, OK, CellOutcome

    ir_only = CellOutcome(CellKey(1, "op", "A"), tmp_path / "ir", IR_ONLY, elapsed_s=12.0)
    crashed = CellOutcome(CellKey(1, "op", "B"), tmp_path / "crashed", OK, elapsed_s=3.0)
    spent = cost.time_spent([ir_only, crashed])
    assert (spent["compile_s"], spent["other_s"], spent["cells_without_timing"]) == (12.0, 3.0, 1)
    assert cost.describe(spent).startswith("time: 2 cells 15.0 s: start-up 0%, inputs 0%, compile 80%")


def test_a_cells_exit_and_its_inputs_are_parts_of_their_own(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    """A cell whose process takes 1.5 s to leave (an exit handler, as a CUDA teardown would) and 0.5 s to build
    its tensors: the parent's exit_s and the child's build_s name those seconds instead of leaving them in other."""
    campaign_dir.makepyfile(c=simple_campaign(ops='"one"') + textwrap.dedent("""
        import atexit, time

        def slow_build(shape, device):
            atexit.register(time.sleep, 1.5)
            time.sleep(0.25)
            return build(shape, device)

        OPS = [Op("one", build=slow_build, shapes=OPS[0].shapes)]
    """))
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), *FAST)
    result.assert_outcomes(passed=2)
    for side in "AB":
        timing = json.loads((root / f"r1_{side}" / "one" / "cell_timing.json").read_text())
        assert 1.5 <= timing["exit_s"] < 5.0, timing
        assert timing["build_s"] >= 0.5, timing  # two shapes, 0.25 s each
    spent = json.loads((root / "report.json").read_text())["time_spent"]
    assert spent["exit_s"] >= 3.0 and spent["inputs_s"] >= 1.0
    assert spent["other_s"] < 1.5, "the exit handler's seconds are not counted as other"


def test_parts_that_outgrow_the_cells_time_come_off_its_exit(tmp_path: Path) -> None:
    """The child's spawn stamp comes a moment before the parent's clock starts, and exit_s ends after it stops."""
    timing = {"startup_s": 1.0, "build_s": 0.5, "first_call_s": 2.0, "timing_s": 3.0, "check_s": 0.5,
              "exit_s": 0.4}
    parts = cost.cell_parts(timing, elapsed_s=7.2, status="ok")
    assert parts is not None and parts["exit_s"] == pytest.approx(0.2) and parts["other_s"] == 0.0
    assert sum(parts.values()) == pytest.approx(7.2)


def test_a_rerun_cell_that_dies_before_its_timing_file_keeps_nothing_of_an_earlier_attempt(
        campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    """Round 1 side B is killed (SIGKILL) before it writes cell_timing.json: the file an earlier attempt left in
    its folder must not count for it."""
    campaign_dir.makepyfile(c=simple_campaign(ops='"one"') + textwrap.dedent("""
        import os, signal

        def dying_build(shape, device):
            if os.environ.get("ABBENCH_TEST_SWITCH") == "1":
                os.kill(os.getpid(), signal.SIGKILL)
            return build(shape, device)

        OPS = [Op("one", build=dying_build, shapes=OPS[0].shapes)]
    """))
    root = tmp_path / "root"
    stale = root / "r1_B" / "one" / "cell_timing.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"startup_s": 90.0, "timing_s": 4.0, "spawned_at": 0.0, "total_s": 94.0}))
    # A root that holds a cell folder is used again only to continue it (an earlier attempt that wrote no row).
    (root / "status.tsv").write_text("\t".join(COLUMNS) + "\n")
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-resume", str(root), *FAST)
    assert result.ret == 1
    spent = json.loads((root / "report.json").read_text())["time_spent"]
    assert spent["cells_without_timing"] == 1 and spent["startup_s"] < 10.0, spent


def test_the_time_line_says_what_a_warm_rerun_would_spare() -> None:
    """The compile seconds shared out by kernel count: the Liger-Kernel cells' figures of a cold H200 run."""
    spent = {"cells": 6, "cells_s": 71.6, **{key: 0.0 for key, _, _ in cost.PARTS}, "compile_s": 29.4,
             "kernels": {"A": {"loaded": 60, "compiled": 40}, "B": {"loaded": 26, "compiled": 44}}}
    line = cost.describe(spent)
    assert "; a warm re-run compiles none of these 84: about 14.5 s less compile" in line, line
    spent["kernels"] = {"A": {"loaded": 98, "compiled": 0}, "B": {"loaded": 67, "compiled": 0}}
    assert "warm re-run" not in cost.describe(spent)  # a warm run: nothing left to spare
    # Round 1 side A tuned (--ab-retune, or a cold run): its kernel cache keeps the choices for the next session.
    spent["kept_tuning_s"] = 5.93
    assert ("; a warm re-run tunes none of round 1 side A's autotune keys (its kernel cache keeps them): 5.9 s less "
            "autotune") in cost.describe(spent)


def test_the_precompiles_wait_for_its_jobs_to_start_is_start_up_and_the_rest_compile() -> None:
    """The sides' fork servers import before the precompile's jobs can start: every session pays that once,
    compiling or not, so the time line counts it as start-up (runner.precompile's split)."""
    timing = {"startup_s": 0.2, "first_call_s": 0.5, "timing_s": 5.0, "precompile_s": 16.3,
              "precompile_wait_s": 11.6}
    parts = cost.cell_parts(timing, elapsed_s=22.0, status="ok")
    assert parts is not None
    assert parts["startup_s"] == pytest.approx(11.8) and parts["compile_s"] == pytest.approx(0.5 + 4.7)
    assert sum(parts.values()) == pytest.approx(22.0)
    older = cost.cell_parts({k: v for k, v in timing.items() if k != "precompile_wait_s"}, 22.0, "ok")
    assert older is not None and older["compile_s"] == pytest.approx(16.8)  # a root written before the split


def test_before_round_1_the_estimate_adds_up_each_cells_shapes() -> None:
    # Two ops of 31 and 8 shapes, 2 sides, auto rounds 3 to 10.
    cells = [(CellKey(rnd, op, side), n) for rnd in range(1, 11) for op, n in (("mm", 31), ("add", 8)) for side in "AB"]
    per_round = 2 * (2 * CELL_START_S + (31 + 8) * STEADY_SHAPE_S)
    line = estimate_before_round_1(cells, 3, 1)
    assert line.startswith(f"abbench: estimate before round 1: about {duration(3 * per_round)} for the 3 rounds "
                           f"every op runs, at most {duration(10 * per_round)} if every op needs every round (from "
                           "about 1.5 s per shape and 2 s per cell under steady, as measured on the H200"), line
    # Fixed rounds, two workers sharing the cells.
    fixed = estimate_before_round_1(cells, None, 2)
    assert fixed.startswith(f"abbench: estimate before round 1: about {duration(10 * per_round / 2)} (from"), fixed
