"""``--ab-reference``: each judged op's two sides timed in one process, interleaved in pairs, beside the verdict.

Real pytest sessions on Triton's interpreter with real cells and a real reference process; the rule that flags a
reference outside the cells' interval is checked on a root written as cells write it, with stand-in reference rows.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import pytest

from helpers import simple_campaign, synthetic_root
from test_energy_report import back_to_back, with_windows
from pytest_abbench.campaign.flaggems import AGAINST_ATEN
from pytest_abbench.campaign.inprocess import build_env, why_not_in_one_process
from pytest_abbench.campaign.model import Campaign, Switch
from pytest_abbench.campaign.perf_report import Providers
from pytest_abbench.child.gpustate import GpuSampler
from pytest_abbench.child.reference import ClockWatch, time_pairs
from pytest_abbench.core import reference
from pytest_abbench.core.layout import RootLayout
from pytest_abbench.report import build_report
from pytest_abbench.report.html import render_html
from pytest_abbench.report.model import report_from_json
from pytest_abbench.report.render import render_text

FAST = ["--ab-ir-target", "none", "-p", "no:cacheprovider"]

# A kernel-variant switch: side B's build runs the kernel eight times over (planted extra work), chosen by a
# variable only the build reads, which the switch declares so.
VARIANT_CAMPAIGN = textwrap.dedent('''
    import os
    import triton
    import triton.language as tl
    from pytest_abbench import Case, Op, Switch


    @triton.jit
    def add_one(x_ptr, y_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) + 1)

    BUILT = set()  # the variants this process built: a cell builds one, the reference process both


    def build(shape, device):
        import torch
        variant = os.environ.get("ADD_VARIANT", "fast")
        BUILT.add(variant)
        if len(BUILT) > 1 and os.environ.get("CRASH_WITH_BOTH"):
            import ctypes
            ctypes.string_at(0)  # planted: a process that builds both sides dies
        if len(BUILT) > 1 and os.environ.get("CTRL_C_AFTER_S"):
            import signal, time
            time.sleep(float(os.environ["CTRL_C_AFTER_S"]))  # planted: the user presses Ctrl-C during the reference
            os.kill(os.getppid(), signal.SIGINT)
            time.sleep(60)
        x = torch.rand(shape["n"], device=device)
        y = torch.empty_like(x)
        repeats = 8 if variant == "slow" else 1

        def run():
            for _ in range(repeats):
                add_one[(1,)](x, y, N=shape["n"])
            return y

        return Case(run=run, expected=lambda: x + 1)


    OPS = [Op("add", build=build, shapes={"smoke": [{"n": 16}, {"n": 32}]})]
    SWITCH = Switch(env_b={"ADD_VARIANT": "slow"}, build_only_env=("ADD_VARIANT",))
''')


@pytest.fixture
def session_dir(campaign_dir: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester folder whose sessions import this checkout's package (pytester puts only its own folder on the
    path of the pytest it starts)."""
    root = str(Path(__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", root)
    return campaign_dir


def report_json(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / "report.json").read_text())
    return data


XDIST = [pytest.param(["-p", "no:xdist"], id="serial"), pytest.param(["-n", "2"], id="xdist")]


@pytest.mark.parametrize("workers", XDIST)
def test_a_kernel_variant_reference_shows_side_b_slower_and_writes_its_rows(session_dir: pytest.Pytester,
                                                                           workers: list[str]) -> None:
    session_dir.makepyfile(variant=VARIANT_CAMPAIGN)
    result = session_dir.runpytest_subprocess("variant.py", "--ab-reference", "--ab-root", "root", *FAST, *workers)
    out = result.stdout.str()
    assert result.ret == 0, out
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([
        "abbench: reference add: 2 shapes, side A and side B in one process, 3 pairs each ...",
        "abbench: reference add: 2 of 2 shapes timed in * s (no verdict changes)",
        "*reference (one process, A/B interleaved in pairs): 2 of 2 shapes, geomean +*%; *; no verdict changes",
        "*shape * 95% CI    in-process ref ?95% CI?  faster*",  # beside the cells' interval
    ])
    assert "does not apply" not in out
    root = session_dir.path / "root"
    found = reference.read_reference(RootLayout(root).reference)["add"]
    assert found.process is not None and found.process["rc"] == 0
    assert sorted(shape for shape, _ in found.shapes) == ["n=16", "n=32"]
    for rows in found.shapes.values():
        assert rows.error is None and rows.timers == {"A": "wall", "B": "wall"}
        assert len(rows.pairs) == 3  # the cells' samples per shape in the interpreter
        # Eight launches against one: B slower in most pairs (one wall-clock call can be preempted on a busy machine).
        assert sum(1 for a, b in rows.pairs if b > a) >= 2, rows.pairs
    shapes = report_json(root)["ops"][0]["shapes"]
    for shape in shapes:
        # B slower: the sign of B/A-1.  Eight times the work, so that a loaded 2-core machine preempting a
        # ~1 ms wall-clock call in two pairs of three cannot bring the median down to +50%.
        assert shape["reference_delta_pct"] > 50.0, shape
        assert len(shape["reference_per_pair_pct"]) == 3
    log = (root / "reference" / "add.log").read_text()
    assert "both sides in one process, 3 pairs each" in log


@pytest.mark.parametrize("workers", XDIST)
def test_an_env_switch_says_why_the_reference_does_not_apply(session_dir: pytest.Pytester, workers: list[str]) -> None:
    session_dir.makepyfile(knob=simple_campaign(ops='"one"', switch='Switch(env_b={"TRITON_X": "1"})'))
    result = session_dir.runpytest_subprocess("knob.py", "--ab-reference", "--ab-root", "root", *FAST, *workers)
    assert result.ret == 0, result.stdout.str()
    why = "side B's TRITON_X=1 is read by Triton when it compiles: the sides need their own processes"
    result.stdout.fnmatch_lines([f"abbench: --ab-reference does not apply to knob.py: {why}",
                                 f"*reference (--ab-reference): does not apply: {why}"])
    assert result.stdout.str().count(f"abbench: --ab-reference does not apply to knob.py: {why}") == 1
    root = session_dir.path / "root"
    assert not (root / "reference" / "one.log").exists()  # no reference process ran
    assert reference.read_reference(RootLayout(root).reference)["one"].not_applicable == why
    assert why in report_json(root)["ops"][0]["reference"]
    assert why in (root / "report.md").read_text()
    assert html.escape(why) in (root / "report.html").read_text()


def test_a_crashed_reference_process_is_reported_and_changes_no_verdict(session_dir: pytest.Pytester,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRASH_WITH_BOTH", "1")
    session_dir.makepyfile(variant=VARIANT_CAMPAIGN)
    result = session_dir.runpytest_subprocess("variant.py", "--ab-reference", "--ab-root", "root", *FAST)
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=4)  # the cells build one side each: none of them crashed
    result.stdout.fnmatch_lines([
        "abbench: reference add: 0 of 2 shapes timed in * s; the process ended rc 139 SEGFAULT (SIGSEGV), see "
        "*reference/add.log (no verdict changes)",
        "*reference (one process, A/B interleaved in pairs): 0 of 2 shapes; its process ended rc 139 SEGFAULT after "
        "* s (log reference/add.log): shapes without a row have no reference; no verdict changes",
    ])
    root = session_dir.path / "root"
    with_reference = report_json(root)["ops"][0]
    (root / "reference.jsonl").unlink()
    without = build_report(root).ops[0]
    assert [s["verdict"] for s in with_reference["shapes"]] == [s.verdict for s in without.shapes]
    assert [s["flags"] for s in with_reference["shapes"]] == [s.flags for s in without.shapes]
    assert all(s["reference_delta_pct"] is None and s["reference_note"] for s in with_reference["shapes"])


def test_a_reference_process_stopped_by_ctrl_c_keeps_the_time_it_ran(session_dir: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTRL_C_AFTER_S", "1.5")
    session_dir.makepyfile(variant=VARIANT_CAMPAIGN)
    result = session_dir.runpytest_subprocess("variant.py", "--ab-reference", "--ab-root", "root", *FAST)
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    result.stdout.fnmatch_lines(["abbench: reference add: interrupted; no later op's reference runs"])
    root = session_dir.path / "root"
    process = reference.read_reference(RootLayout(root).reference)["add"].process
    assert process is not None and process["status"] == "INTERRUPTED"
    # The process ran at least until the planted Ctrl-C, not "0.0 s".
    assert process["elapsed_s"] >= 1.5, process
    assert f"INTERRUPTED after {process['elapsed_s']:.1f} s" in (root / "report.md").read_text()


# -- the flag: a stand-in reference row against a root written as cells write it --------------------------------

def stand_in_rows(root: Path, shape: str, b_over_a: float, pairs: int = 6) -> None:
    """Stand-in for what a reference process appends: ``pairs`` pairs of A 1.0 ms and B ``b_over_a`` ms (give or
    take 0.1%), and its clean end.  No process ran: these rows stand for one."""
    rows = RootLayout(root).reference
    pairs_ms = [(1.0, b_over_a * (1.0 + 0.001 * (i % 3 - 1))) for i in range(pairs)]
    reference.append_shape(rows, "op", shape, "steady", {"A": "cudagraph", "B": "cudagraph"}, pairs_ms)
    reference.append_process(rows, "op", 0, "ok", 1.0, "reference/op.log")


def test_a_reference_outside_the_cells_interval_is_flagged_and_keeps_the_verdict(tmp_path: Path) -> None:
    cells = {"mm": [0.050, 0.052, 0.049, 0.051, 0.050, 0.048]}  # the cells: B about 5% slower in every round
    synthetic_root(tmp_path, cells)
    before = build_report(tmp_path).ops[0].shapes[0]
    assert before.verdict == "slower" and before.ci_pct is not None
    stand_in_rows(tmp_path, "mm", 1.20)  # one process says +20%: far above the cells' interval
    report = build_report(tmp_path)
    shape, op = report.ops[0].shapes[0], report.ops[0]
    assert shape.reference_delta_pct == pytest.approx(20.0, abs=0.2)
    assert shape.verdict == before.verdict  # a warning: the verdict stands
    assert shape.flags == ["reference_differs"] and op.flags == {"reference_differs": 1}
    text = render_text(report)
    assert "slower [reference_differs]" in text
    assert "outside the cells' interval in 1 (reference_differs; the cells time each side in its own processes" in text
    page = render_html(report)
    assert "in-process ref" in page and 'data-low="' in page and ">reference_differs</span>" in page
    again = report_from_json(json.loads(json.dumps(report.to_json())))  # report.json keeps it
    assert again.ops[0].shapes[0].reference_ci_pct == shape.reference_ci_pct
    assert render_text(again) == text


def test_a_differing_reference_names_each_sides_clock_in_the_pairs_and_in_the_cells(tmp_path: Path) -> None:
    # mm 4096^3 at the H200's power cap: alone, A settled at 1530 MHz and B at 1605 MHz; interleaved, both ran near
    # one controller state.  The line says so where the reference differs.
    synthetic_root(tmp_path, {"mm": [0.050, 0.052, 0.049, 0.051, 0.050, 0.048]})
    with_windows(tmp_path, lambda rnd, side, shape: back_to_back(10, 0.03, 690.0, 690.0,
                                                                 sm=1530.0 if side == "A" else 1605.0))
    rows = RootLayout(tmp_path).reference
    reference.append_shape(rows, "op", "mm", "steady", {"A": "cudagraph", "B": "cudagraph"},
                           [(1.0, 1.20), (1.0, 1.201), (1.0, 1.199)], clocks_mhz={"A": 1566.0, "B": 1572.0})
    reference.append_process(rows, "op", 0, "ok", 1.0, "reference/op.log")
    report = build_report(tmp_path)
    assert report.ops[0].shapes[0].reference_clocks_mhz == {"A": 1566.0, "B": 1572.0}
    assert report.ops[0].reference.endswith("; mm: SM clock in the pairs A 1566 / B 1572 MHz, in the cells A 1530 / "
                                            "B 1605 MHz; time per call in the pairs A 1 / B 1.2 ms, in the cells "
                                            "A 1 / B 1.05 ms (A +0.0%, B +14.3% in the pairs); no verdict changes"), \
        report.ops[0].reference
    again = report_from_json(json.loads(json.dumps(report.to_json())))
    assert render_text(again) == render_text(report)
    # A differing row without clocks (a reference from before they were read, or NVML without them) gives none.
    rows.unlink()
    stand_in_rows(tmp_path, "mm", 1.20)
    assert "SM clock in the pairs" not in build_report(tmp_path).ops[0].reference


def test_a_differing_reference_names_the_side_whose_time_moved_in_one_process(tmp_path: Path) -> None:
    # layer_norm 8192x4096 on an H100, both sides at 1980 MHz: ATen (A) read 0.0585 ms in its three cell processes
    # and 0.0644 ms in the reference's one, FlagGems (B) 0.0467 ms in both; the cells said -20.2%, the pairs -27.3%.
    # The line names A as the side whose time moved, which the delta alone cannot say.
    synthetic_root(tmp_path, {"ln": [-0.2017, -0.2009, -0.2025]})  # A 1.0 ms in every cell, B about 0.80
    rows = RootLayout(tmp_path).reference
    reference.append_shape(rows, "op", "ln", "steady", {"A": "cudagraph", "B": "cudagraph"},
                           [(1.10, 0.80), (1.101, 0.7995), (1.099, 0.8005)])
    reference.append_process(rows, "op", 0, "ok", 1.0, "reference/op.log")
    report = build_report(tmp_path)
    shape = report.ops[0].shapes[0]
    assert shape.flags == ["reference_differs"] and shape.reference_ms == {"A": 1.10, "B": 0.80}
    assert report.ops[0].reference.endswith(
        "; ln: time per call in the pairs A 1.1 / B 0.8 ms, in the cells A 1 / B 0.7983 ms (A +10.0%, B +0.2% in "
        "the pairs); no verdict changes"), report.ops[0].reference
    again = report_from_json(json.loads(json.dumps(report.to_json())))  # report.json keeps the side times
    assert again.ops[0].shapes[0].reference_ms == shape.reference_ms
    assert render_text(again) == render_text(report)


def test_the_clock_watch_gives_each_side_the_clock_its_windows_ran_at() -> None:
    # A real thread reads a stand-in for NVML's SM clock (1500 MHz while side A's window runs, 1600 MHz during
    # B's, nothing between) while real 20 ms windows run in pairs.
    running: list[str] = []

    class Sleeping(StandInTimer):
        def window(self) -> tuple[list[float], int]:
            running.append(self.side)
            time.sleep(0.02)
            running.remove(self.side)
            return super().window()

    calls: list[str] = []
    timers = {"A": Sleeping("A", 1.0, calls), "B": Sleeping("B", 2.0, calls)}
    windows: list[tuple[str, float, float]] = []
    with ClockWatch(lambda: {"A": 1500.0, "B": 1600.0}.get(running[0]) if running else None, 0.002) as watch:
        pairs = time_pairs(timers, "steady", GpuSampler(not_recorded="a test"), 6, cpu=True, windows=windows).pairs
    assert pairs == [(1.0, 2.0)] * 6 and [w[0] for w in windows] == ["A", "B", "B", "A"] * 3
    assert watch.side_medians(windows) == {"A": 1500.0, "B": 1600.0}
    assert not watch.thread.is_alive()


def test_a_reference_inside_the_cells_interval_is_not_flagged(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"mm": [0.050, 0.052, 0.049, 0.051, 0.050, 0.048]})
    stand_in_rows(tmp_path, "mm", 1.05)
    shape = build_report(tmp_path).ops[0].shapes[0]
    assert shape.reference_delta_pct == pytest.approx(5.0, abs=0.2)
    assert shape.flags == [] and shape.verdict == "slower"


# -- the pairs ----------------------------------------------------------------------------------------------------

class StandInTimer:
    """A timer that records what it was asked to do and answers ``ms`` per window."""

    marker = None
    reason = None

    def __init__(self, side: str, ms: float, calls: list[str]) -> None:
        self.timer, self.side, self.ms, self.calls = "wall", side, ms, calls

    def window(self) -> tuple[list[float], int]:
        self.calls.append(self.side)
        return [self.ms], 1

    def windows(self, count: int, at_edge: Callable[[], None], warm_s: float = 0.0) -> list[tuple[list[float], int]]:
        return [self.window() for _ in range(count)]

    def run_for(self, seconds: float) -> None:
        self.calls.append(f"warm {self.side}")

    def drain(self) -> None:
        pass


@pytest.mark.parametrize("regime", ["steady", "burst"])
def test_pairs_alternate_the_order_and_keep_a_then_b(regime: str) -> None:
    calls: list[str] = []
    timers = {"A": StandInTimer("A", 1.0, calls), "B": StandInTimer("B", 3.0, calls)}
    timed_pairs = time_pairs(timers, regime, GpuSampler(not_recorded="a test"), 4, cpu=True, pace=_no_wait())
    assert timed_pairs.pairs == [(1.0, 3.0)] * 4 and not timed_pairs.alone  # (A ms, B ms) whatever the order timed
    timed = [c for c in calls if not c.startswith("warm")]
    assert timed == ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert ("warm A" in calls and "warm B" in calls) == (regime == "steady")  # steady settles both sides first


class CappedCard:
    """Stands for an H200 at its 700 W cap running two kernels of the same work: the controller holds each side
    alone at the clock its draw allows (A 1400 MHz, B 1600 by default) and a mix of both (their last half second
    of running not all one side's) at another (1500).  ``state`` maps A, B and "mix" to (MHz, reasons, counter
    W).  A window's time is its work over the clock it runs at; NVML's clock and reasons show the state of the
    moment, the energy counter what the running side draws.  No GPU: the clocks are the test's."""

    CAPPED = ["sw_power_cap"]

    def __init__(self, state: dict[str, tuple[float, list[str], float]] | None = None) -> None:
        from test_regimes import FakeClock, StandInGpu

        self.state = state or {"A": (1400.0, self.CAPPED, 700.0), "B": (1600.0, self.CAPPED, 700.0),
                               "mix": (1500.0, self.CAPPED, 700.0)}
        self.clock = FakeClock()
        self.ran: list[tuple[float, float, str]] = []  # (from, to, side)
        self.energy_mj = 0.0
        self.gpu = StandInGpu(self.clock, lambda t: (self.now()[0], 640.0, self.now()[1], self.energy_mj),
                              power_limit=700.0)

    def now(self) -> tuple[float, list[str], float]:
        recent = {side for start, end, side in self.ran if end > self.clock.now - 0.5}
        return self.state[recent.pop() if len(recent) == 1 else "mix"]

    def mhz(self) -> float:
        return self.now()[0]

    def run(self, side: str, seconds: float) -> None:
        self.ran.append((self.clock.now, self.clock.now + seconds, side))
        # The counter adds what the running side draws at the clock it runs at (its own draw at its own clock,
        # scaled): NVML's clock and reasons lag a change of load by the controller's half second, the energy
        # counter does not.
        own_mhz, _, own_w = self.state[side]
        self.energy_mj += own_w * self.mhz() / own_mhz * seconds * 1e3
        self.clock.advance(seconds)

    def timer(self, side: str) -> Any:
        card = self

        class Kernel:
            """One side's prepared timer on the card: 30 ms windows of work 1.5 G cycles' worth per call."""

            timer, marker, reason, queues = "cudagraph", None, None, False

            def window(self) -> tuple[list[float], int]:
                ms = 1500.0 / card.mhz()  # the clock the window starts at holds through its 30 ms
                card.run(side, 0.03)
                return [ms], 1

            def run_for(self, seconds: float) -> None:
                card.run(side, seconds)

            def keep_busy(self, seconds: float) -> None:
                self.run_for(seconds)

            def drain(self) -> None:
                pass

        return Kernel()


def test_a_heavy_side_at_the_cap_beside_a_light_one_is_settled_alone_though_the_mix_reads_below_it() -> None:
    # ATen's layer_norm 8192x4096 held at the cap alone (1898 MHz on the H200) beside FlagGems' lighter kernel at
    # boost: settled together, their mix reads 1980 MHz, no reason, 600 W, below the cap, and the pairs would time A
    # at a clock its cells never see.
    card = CappedCard({"A": (1900.0, CappedCard.CAPPED, 700.0), "B": (1980.0, [], 600.0), "mix": (1980.0, [], 600.0)})
    timed = time_pairs({side: card.timer(side) for side in ("A", "B")}, "steady", card.gpu, 2, cpu=False,
                       pace=card.clock)
    assert timed.alone and timed.pairs == [(pytest.approx(1500.0 / 1900.0), pytest.approx(1500.0 / 1980.0))] * 2


def test_at_the_power_cap_each_window_follows_its_own_sides_settling_and_gives_the_cells_delta(
        tmp_path: Path) -> None:
    card = CappedCard()
    timers = {side: card.timer(side) for side in ("A", "B")}
    timed = time_pairs(timers, "steady", card.gpu, 4, cpu=False, pace=card.clock)
    # Alone each side runs at its own cap clock, as its cells do: B/A = 1400/1600, where pairs at the mixed clock
    # would read 0%.
    # A,B | B,A | A,B | B,A: a settling wherever the side changes, 5 for 8 windows; the second of two windows of a
    # side runs on the load of the first, as a cell's windows do.
    assert timed.alone and timed.alone_met == 5 and timed.alone_settlings == 5
    assert timed.pairs == [(pytest.approx(1500.0 / 1400.0), pytest.approx(1500.0 / 1600.0))] * 4
    # Each window came after a settling of its own side alone (at least two 0.5 s clock spans of it).
    windows = [(start, side) for start, end, side in card.ran if end - start == pytest.approx(0.03)]
    for start, side in windows:
        before = [r for r in card.ran if start - 1.0 <= r[0] < start]
        assert before and all(s == side for _, _, s in before), (start, side)
    runs = [(end - start, side) for start, end, side in card.ran]
    sides_in_order = [side for length, side in runs if length == pytest.approx(0.03)]
    assert sides_in_order == ["A", "B", "B", "A", "A", "B", "B", "A"]
    settlings = [side for i, (length, side) in enumerate(runs) if length != pytest.approx(0.03)
                 and (i == 0 or runs[i - 1][0] == pytest.approx(0.03) or runs[i - 1][1] != side)]  # their first spans
    # Each side alone once before the pairs, then one per change of side.
    assert settlings == ["A", "B"] + ["A", "B", "A", "B", "A"]
    # The record and the report say how the pairs were settled.
    synthetic_root(tmp_path, {"mm": [0.050, 0.0440, 0.0435, 0.0438, 0.0437, 0.0436]})
    rows = RootLayout(tmp_path).reference
    reference.append_shape(rows, "op", "mm", "steady", {"A": "cudagraph", "B": "cudagraph"}, timed.pairs,
                           settled_alone=(timed.alone_met, timed.alone_settlings))
    reference.append_process(rows, "op", 0, "ok", 1.0, "reference/op.log")
    assert reference.read_reference(rows)["op"].shapes[("mm", "steady")].settled_alone == (5, 5)
    report = build_report(tmp_path)
    assert report.ops[0].shapes[0].reference_settled_alone == [5, 5]
    assert ("at the power cap each side's windows after its own side's settling, as in a cell, in 1 shape (5 of 5 "
            "settlings met)") in report.ops[0].reference
    again = report_from_json(json.loads(json.dumps(report.to_json())))
    assert again.ops[0].shapes[0].reference_settled_alone == [5, 5]


@pytest.mark.parametrize("alone, expected", [({"met": 5, "settlings": 4}, "a count from 0 to settlings (4), got 5"),
                                             ({"met": 5, "windows": 4}, "a count from 0 to windows (4), got 5"),
                                             ({"met": "x", "settlings": 4}, "a whole number, got 'x'"),
                                             ([8, 8], "an object, got [8, 8]")])
def test_a_corrupt_settled_alone_names_the_file_line_and_field(tmp_path: Path, alone: Any, expected: str) -> None:
    rows = tmp_path / "reference.jsonl"
    reference.append_shape(rows, "op", "mm", "steady", {"A": "cudagraph", "B": "cudagraph"}, [(1.0, 1.1)],
                           settled_alone=(1, 2))
    record = json.loads(rows.read_text())
    rows.write_text(rows.read_text() + json.dumps({**record, "settled_alone": alone}) + "\n")
    with pytest.raises(Exception) as caught:
        reference.read_reference(rows)
    assert str(caught.value).startswith(f"{rows}:2: field 'settled_alone") and expected in str(caught.value), \
        str(caught.value)


def test_below_the_power_cap_the_pairs_run_back_to_back_after_one_settling_of_both() -> None:
    from test_regimes import FakeClock, StandInGpu, StandInKernel

    clock = FakeClock()
    gpu = StandInGpu(clock, lambda t: (1980.0, 300.0, [], 300.0 * t * 1e3), power_limit=700.0)
    calls: list[str] = []

    class Logged(StandInKernel):
        def window(self) -> tuple[list[float], int]:
            calls.append(f"{self.ms:g}")
            return super().window()

        def run_for(self, seconds: float) -> None:
            calls.append("run")
            super().run_for(seconds)

    timed = time_pairs({"A": Logged(clock, ms=1.0), "B": Logged(clock, ms=2.0)}, "steady", gpu, 3, cpu=False,
                       pace=clock)
    assert not timed.alone and timed.pairs == [(1.0, 2.0)] * 3
    first_window = calls.index("1")
    assert first_window > 0 and calls[first_window:] == ["1", "2", "2", "1", "1", "2"]  # no settling between pairs


def _no_wait() -> Any:
    from pytest_abbench.child.regime import Pace

    return Pace(sleep=lambda s: None, clock=lambda: 0.0)


# -- which switches allow it ------------------------------------------------------------------------------------

def campaign_with(switch: Switch, adapter: str | None = None) -> Campaign:
    return Campaign(Path("c.py"), ModuleType("c"), [], switch, adapter=adapter)


def setup_hook() -> None:
    """A compiler hook (a stand-in)."""


@pytest.mark.parametrize("switch, adapter, why", [
    (AGAINST_ATEN, None, None),
    (Providers("torch", "triton").switch(), Providers("torch", "triton").spec(), None),
    (Switch(env_b={"DISABLE_MMA_V3": "1"}), None, "side B's DISABLE_MMA_V3=1 is read by Triton when it compiles"),
    (Switch(env_b={"IMPL": "x"}), None, "side B's IMPL=x is not declared read only by the campaign's builds"),
    (Switch(env_b={"IMPL": "x", "TRITON_F32_DEFAULT": "ieee"}, build_only_env=("IMPL",)), None,
     "side B's TRITON_F32_DEFAULT=ieee is read by Triton"),
    (Switch(env_a={"IMPL": "a"}, env_b={"IMPL": "b"}, build_only_env=("IMPL",)), None, None),
    (Switch(setup_b=setup_hook), None, "side B's setup setup_hook() changes how Triton compiles"),
    (Switch(python_b="/opt/other/python"), None, "side B runs another Python (/opt/other/python"),
    (Switch(), "pytest-benchmark:x", "its cells run each test through pytest"),
])
def test_one_function_decides_which_switches_allow_a_reference(switch: Switch, adapter: str | None,
                                                                why: str | None) -> None:
    found = why_not_in_one_process(campaign_with(switch, adapter))
    if why is None:
        assert found is None
    else:
        assert found is not None and found.startswith(why), found


def test_each_side_builds_with_its_own_value_and_without_the_other_sides() -> None:
    switch = Switch(env_a={"ONLY_A": "1", "IMPL": "a"}, env_b={"IMPL": "b"}, build_only_env=("ONLY_A", "IMPL"))
    assert build_env(switch, "A") == {"IMPL": "a", "ONLY_A": "1"}
    assert build_env(switch, "B") == {"IMPL": "b", "ONLY_A": None}


def test_the_reference_process_does_not_import_pytest() -> None:
    code = "import sys, pytest_abbench.child.reference; print('pytest' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout.strip() == "False", done.stderr
