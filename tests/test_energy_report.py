"""Power and energy in the report from NVML's energy counter (CI has no GPU: the windows are written as cells write
them, with made-up readings): the GPU line's power, energy per call withheld where the windows are too short for
the counter's updates, an older report.json, and the perf-per-watt line."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Callable

import pytest
from helpers import synthetic_root

from pytest_abbench.core.results import (ENERGY_COUNTER_UPDATE_S, ENERGY_MIN_S, GpuReading, GpuState, TimedWindow,
                                         cell_energy, pool_energy)
from pytest_abbench.checks import caliber
from pytest_abbench.report import build_report, render_text, write_report
from pytest_abbench.report.model import read_report

CALLS = 1000  # kernel calls in each window


def _reading(energy_mj: float, nvml_w: float, sm: float, reasons: tuple[str, ...]) -> GpuReading:
    return GpuReading(sm, 3201.0, nvml_w, 50.0, energy_mj, 0x4 if reasons else 0, list(reasons))


def back_to_back(count: int, window_s: float, watts: float, nvml_w: float, sm: float = 1980.0,
                 reasons: tuple[str, ...] = ()) -> list[TimedWindow]:
    """``count`` windows timed back to back (a steady cell): each window's last reading is the next one's first."""
    edges = [_reading(1e6 + i * watts * window_s * 1e3, nvml_w, sm, reasons) for i in range(count + 1)]
    return [TimedWindow("met", 0.0, CALLS, 1, GpuState(a, b, window_s, b.energy_mj - a.energy_mj, list(reasons)))
            for a, b in zip(edges, edges[1:])]


def apart(count: int, window_s: float, watts: float, nvml_w: float) -> list[TimedWindow]:
    """``count`` windows each after an idle gap (a burst cell): every window has edges of its own."""
    out = []
    for i in range(count):
        start = 1e6 + i * 50_000.0
        before, after = _reading(start, nvml_w, 1980.0, ()), _reading(start + watts * window_s * 1e3, nvml_w, 1980.0, ())
        out.append(TimedWindow("met", 0.05, CALLS, 1, GpuState(before, after, window_s, after.energy_mj - start, [])))
    return out


def with_windows(root: Path, windows: Callable[[int, str, str], list[TimedWindow]]) -> None:
    """Give every record of a synthetic root the timed windows ``windows(round, side, shape)``."""
    for results in root.glob("r*_*/*/results.jsonl"):
        rnd, side = int(results.parts[-3].split("_")[0][1:]), results.parts[-3].split("_")[1]
        records = []
        for line in results.read_text().splitlines():
            record = json.loads(line)
            record["regime"] = "steady"
            record["windows"] = [w.to_json() for w in windows(rnd, side, record["shape"])]
            records.append(json.dumps(record))
        results.write_text("\n".join(records) + "\n")


def _line(text: str, start: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(start))


def test_the_gpu_line_gives_the_energy_counters_power_not_nvmls_average(tmp_path: Path) -> None:
    # layer_norm on the H200: NVML's averaged figure said 412 W where the counter over the same windows gave ~640 W.
    synthetic_root(tmp_path, {"ln": [-0.35, -0.352, -0.351]})
    with_windows(tmp_path, lambda rnd, side, shape: back_to_back(
        10, 0.2, 640.0 if side == "A" else 600.0, 412.0, reasons=("sw_power_cap",)))
    report = build_report(tmp_path)
    text = render_text(report)
    assert _line(text, "   GPU:").startswith("   GPU: A 1980 MHz 640 W, B 1980 MHz 600 W; power cap in 100% / 100%")
    # The verdict's note gives the shape's own power the same way.
    assert "holds under the power cap: A 1980 MHz 640 W, B 1980 MHz 600 W)" in text
    shape = report.ops[0].shapes[0]
    assert shape.gpu["A"]["energy_power_w"] == pytest.approx(640.0) and shape.gpu["A"]["power_w"] == 412.0
    assert report.ops[0].gpu_state["B"]["energy_power_w"] == pytest.approx(600.0)
    write_report(tmp_path, report)
    assert render_text(read_report(tmp_path / "report.json")) == text


def test_a_report_json_without_the_counters_power_labels_nvmls_figure(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"ln": [-0.35, -0.352, -0.351]})
    with_windows(tmp_path, lambda rnd, side, shape: back_to_back(10, 0.2, 640.0, 412.0, reasons=("sw_power_cap",)))
    write_report(tmp_path, build_report(tmp_path))
    data = json.loads((tmp_path / "report.json").read_text())
    for op in data["ops"]:  # as a report.json written before the counter's power was kept
        for side in op["gpu_state"].values():
            del side["energy_power_w"]
        for shape in op["shapes"]:
            for side in shape["gpu"].values():
                del side["energy_power_w"]
    (tmp_path / "report.json").write_text(json.dumps(data))
    text = render_text(read_report(tmp_path / "report.json"))
    assert _line(text, "   GPU:").startswith("   GPU: A 1980 MHz 412 W (NVML avg), B 1980 MHz 412 W (NVML avg);")
    assert "A 1980 MHz 412 W (NVML avg), B 1980 MHz 412 W (NVML avg))" in text


def test_windows_apart_and_too_short_for_the_counter_withhold_energy_and_give_nvmls_power_labelled(
        tmp_path: Path) -> None:
    # A burst cell: ten 4 ms windows, each after an idle gap; the counter's steps come every few tens of ms.
    synthetic_root(tmp_path, {"small": [0.01, 0.012, 0.011], "big": [0.02, 0.021, 0.019]})
    with_windows(tmp_path, lambda rnd, side, shape: apart(10, 0.004, 300.0 if side == "A" else 320.0, 148.0))
    report = build_report(tmp_path)
    text = render_text(report)
    assert _line(text, "   GPU:").startswith("   GPU: A 1980 MHz 148 W (NVML avg), B 1980 MHz 148 W (NVML avg);")
    why = (f"withheld: 0.04 s of timed windows per cell in 10 separate stretches against the energy counter's "
           f"~{ENERGY_COUNTER_UPDATE_S * 1e3:.0f} ms updates (a figure needs {ENERGY_MIN_S:g} s a stretch)")
    assert _line(text, "   energy per call") == (
        f"   energy per call (NVML energy counter over the timed windows / calls): {why}")
    assert all(s.energy_a_j is None and s.energy_withheld == why for s in report.ops[0].shapes)
    assert report.ops[0].energy_withheld == why
    assert _line(text, "   perf per watt") == (
        f"   perf per watt: time B vs A {report.ops[0].geomean_pct:+.1f}% "
        f"[{report.ops[0].geomean_ci_pct[0]:+.1f} ~ {report.ops[0].geomean_ci_pct[1]:+.1f}%]; energy per call "
        "withheld (the energy line says why): which side does more work per joule is not stated")
    assert "[-" not in _line(text, "   energy per call")  # no interval at all, rather than a +-1000% one


def test_back_to_back_windows_shorter_than_the_threshold_in_all_are_withheld(tmp_path: Path) -> None:
    # Ten 50 ms windows back to back: 0.5 s, one stretch; their energy intervals were as wide as [-87.5 ~ +205.8%].
    synthetic_root(tmp_path, {"mul": [0.008, 0.009, 0.01]})
    seconds = ENERGY_MIN_S / 2
    with_windows(tmp_path, lambda rnd, side, shape: back_to_back(10, seconds / 10, 600.0 + rnd, 500.0))
    report = build_report(tmp_path)
    assert report.ops[0].shapes[0].energy_a_j is None
    assert report.ops[0].energy_withheld == (
        f"withheld: {seconds:.2g} s of timed windows per cell against the energy counter's "
        f"~{ENERGY_COUNTER_UPDATE_S * 1e3:.0f} ms updates (a figure needs {ENERGY_MIN_S:g} s a stretch)")
    # The same windows, long enough together: stated, one figure per round from the cell's windows pooled.
    with_windows(tmp_path, lambda rnd, side, shape: back_to_back(
        10, 2 * ENERGY_MIN_S / 10, (600.0 if side == "A" else 630.0) + rnd, 500.0))
    shape = build_report(tmp_path).ops[0].shapes[0]
    assert shape.energy_withheld == "" and shape.energy_a_j == pytest.approx(602.0 * 2 * ENERGY_MIN_S / 10 / CALLS)
    assert shape.energy_ci_pct is not None and shape.energy_ci_pct[1] - shape.energy_ci_pct[0] < 1.0


@pytest.mark.parametrize("watts_b, said", [
    (lambda rnd: 560.0 + rnd, "B does more work per joule"),  # faster and less energy per call
    (lambda rnd: 700.0 + rnd, "A does more work per joule"),
    (lambda rnd: 640.0 + (-3.0, 3.0, 0.0)[rnd - 1], "no measurable difference in work per joule"),
])
def test_perf_per_watt_says_which_side_does_more_work_per_joule(tmp_path: Path, watts_b: Callable[[int], float],
                                                               said: str) -> None:
    synthetic_root(tmp_path, {"ln": [-0.35, -0.352, -0.351], "mm": [0.1, 0.11, 0.105]})
    with_windows(tmp_path, lambda rnd, side, shape: back_to_back(
        5, 0.5, 640.0 + rnd if side == "A" else watts_b(rnd), 412.0))
    op = build_report(tmp_path).ops[0]
    line = _line(render_text(build_report(tmp_path)), "   perf per watt")
    assert op.energy_geomean_pct is not None and op.energy_geomean_ci_pct is not None
    assert line.startswith(f"   perf per watt: time B vs A {op.geomean_pct:+.1f}% [")
    assert f"energy per call B vs A {op.energy_geomean_pct:+.1f}% [" in line and said in line
    calls_per_joule = 100.0 * (1.0 / (1.0 + op.energy_geomean_pct / 100.0) - 1.0)
    assert f"(B {calls_per_joule:+.1f}% calls per joule" in line


def test_stretches_are_counted_by_shared_edges() -> None:
    steady = back_to_back(4, 0.5, 600.0, 412.0)
    pooled = cell_energy(steady)
    assert pooled is not None and pooled.stretches == 1 and pooled.window_s == pytest.approx(2.0)
    assert pooled.power_w() == pytest.approx(600.0) and pooled.per_call_j() == pytest.approx(600.0 * 2.0 / 4000)
    burst = cell_energy(apart(4, 0.5, 600.0, 412.0))
    assert burst is not None and burst.stretches == 4 and burst.withheld().startswith("withheld: 2 s of timed")
    assert burst.power_w() is None and burst.per_call_j() is None
    # A window with no energy figure between two others breaks the stretch.
    gap = [(w.gpu_state, w.calls) for w in steady[:2]] + [(GpuState(not_recorded="x"), CALLS)] + \
        [(w.gpu_state, w.calls) for w in steady[3:]]
    found = pool_energy(gap)
    assert found is not None and found.stretches == 2 and found.window_s == pytest.approx(1.5)
    assert pool_energy([(None, 1), (GpuState(not_recorded="no NVML"), 1)]) is None


def test_windows_without_an_energy_figure_say_energy_is_not_measured(tmp_path: Path) -> None:
    # A device whose NVML gives no energy counter: NVML's averaged power, said so, and no energy line.
    synthetic_root(tmp_path, {"ln": [-0.35, -0.352, -0.351]})

    def no_counter(rnd: int, side: str, shape: str) -> list[TimedWindow]:
        windows = back_to_back(5, 0.5, 640.0, 412.0)
        for w in windows:
            w.gpu_state.energy_mj = None
        return windows

    with_windows(tmp_path, no_counter)
    text = render_text(build_report(tmp_path))
    assert _line(text, "   GPU:").startswith("   GPU: A 1980 MHz 412 W (NVML avg), B 1980 MHz 412 W (NVML avg);")
    assert "energy per call (" not in text
    assert _line(text, "   perf per watt").endswith(
        "; energy per call not measured: which side does more work per joule is not stated")


def with_spans(root: Path, watts: Callable[[int, str], float], seconds: float = 0.6, edge_error_s: float = 0.007,
               shapes: tuple[str, ...] | None = None) -> None:
    """Give every record of a synthetic root a steady span (core/results.py EnergySpan) at ``watts(round, side)``."""
    for results in root.glob("r*_*/*/results.jsonl"):
        rnd, side = int(results.parts[-3].split("_")[0][1:]), results.parts[-3].split("_")[1]
        records = [json.loads(line) for line in results.read_text().splitlines()]
        for record in records:
            record.pop("energy_span", None)
            if shapes is None or record["shape"] in shapes:
                record["energy_span"] = {"energy_mj": watts(rnd, side) * seconds * 1e3, "seconds": seconds,
                                         "edge_error_s": edge_error_s}
        results.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_steady_spans_give_the_gpu_lines_power_and_energy_per_call_with_a_narrow_interval(tmp_path: Path) -> None:
    # layer_norm 8192x4096 under steady defaults: ten 31 ms windows a cell (0.31 s, too short for the windows' own
    # figure), each cell with a 0.6 s span around them: the counter's power is stated, and energy per call is the
    # span's power times the time per call (A 1 ms, B 1 ms + the delta).
    synthetic_root(tmp_path, {"ln": [-0.35, -0.352, -0.351]})
    with_windows(tmp_path, lambda rnd, side, shape: back_to_back(10, 0.031, 640.0, 412.0, reasons=("sw_power_cap",)))
    with_spans(tmp_path, lambda rnd, side: (640.0 if side == "A" else 600.0) + rnd)
    report = build_report(tmp_path)
    text = render_text(report)
    op = report.ops[0]
    assert _line(text, "   GPU:").startswith("   GPU: A 1980 MHz 642 W, B 1980 MHz 602 W;"), _line(text, "   GPU:")
    assert op.energy_basis == "spans" and _line(text, "   energy per call").startswith(
        "   energy per call (NVML energy counter from its update before the timed windows to its update after them,"
        " the kernel running throughout, x time per call): geomean B vs A ")
    shape = op.shapes[0]
    assert shape.energy_a_j == pytest.approx(642.0e-3) and shape.energy_b_j == pytest.approx(
        statistics.median((600.0 + r) * (1.0 + d) * 1e-3 for r, d in ((1, -0.35), (2, -0.352), (3, -0.351))))
    assert shape.energy_ci_pct is not None and shape.energy_ci_pct[1] - shape.energy_ci_pct[0] < 2.0
    write_report(tmp_path, report)
    assert render_text(read_report(tmp_path / "report.json")) == text
    # Spans whose updates were placed no better than a tenth of their length say so rather than give a figure.
    with_spans(tmp_path, lambda rnd, side: 640.0, seconds=0.1, edge_error_s=0.01)
    report = build_report(tmp_path)
    assert report.ops[0].shapes[0].energy_a_j is None
    assert report.ops[0].energy_withheld == ("withheld: the energy counter's updates were placed within 10 ms over a "
                                             "0.1 s span (more than 5% of it)")
    assert _line(render_text(report), "   GPU:").startswith("   GPU: A 1980 MHz 412 W (NVML avg)")


def test_shapes_read_by_span_and_by_windows_say_so_and_the_power_is_never_half_of_each(tmp_path: Path) -> None:
    # One shape fell back to the direct timer (its windows give the figure), the other had spans: the line names
    # both readings, and the GPU line's power comes from the windows throughout rather than from spans alone.
    synthetic_root(tmp_path, {"big": [0.02, 0.021, 0.019], "small": [0.01, 0.012, 0.011]})
    with_windows(tmp_path, lambda rnd, side, shape: back_to_back(10, 2 * ENERGY_MIN_S / 10, 500.0, 412.0))
    with_spans(tmp_path, lambda rnd, side: 640.0, shapes=("big",))
    report = build_report(tmp_path)
    op = report.ops[0]
    assert op.energy_basis == "mixed" and _line(render_text(report), "   energy per call").startswith(
        "   energy per call (NVML energy counter: from its update before the timed windows to its update after them "
        "x time per call where the graph timer ran, over the timed windows / calls where not): ")
    assert op.gpu_state["A"]["energy_power_w"] == pytest.approx(500.0)  # the windows', not 640 W from one shape
    assert op.shapes[0].gpu["A"]["energy_power_w"] == pytest.approx(640.0)  # the spanned shape's own line


def test_auto_rounds_add_a_round_while_a_shapes_energy_interval_is_wider_than_the_target(
        tmp_path: Path, pytester: pytest.Pytester) -> None:
    # The H200's mm 4096^3 at the 700 W cap: slower by 35% in every round (settled), but side A's power over its
    # windows 676-706 W from round to round, so B's energy per call against A's spreads over 4 points and its
    # 3-round interval is about +-10%: the op adds rounds for it.  The layer_norm's rounds agree (settled).
    from pytest_abbench.core.layout import CellKey, RootLayout
    from pytest_abbench.core.outcome import SETTLED
    from pytest_abbench.core.plan import CampaignPlan
    from pytest_abbench.report.build import build_op, discover, settled_after
    from pytest_abbench.report.render import _rounds_text
    from pytest_abbench.session.autorounds import AutoRounds

    synthetic_root(tmp_path, {"mm": [0.35, 0.35, 0.35], "ln": [-0.35, -0.35, -0.35]})
    watts_a = {1: 706.0, 2: 676.0, 3: 700.0}
    with_windows(tmp_path, lambda rnd, side, shape: back_to_back(
        5, 0.5, (watts_a[rnd] if shape == "mm" else 640.0) if side == "A" else 690.0, 412.0))
    plan, cells = CampaignPlan(10, auto_min=3, energy_target_pct=5.0), discover(RootLayout(tmp_path), [])
    look = settled_after(tmp_path, "op", cells, plan, None, 3)
    mm = next(s for s in look.reports[0].shapes if s.shape == "mm")
    assert mm.verdict == "slower" and mm.energy_ci_pct is not None
    half = (mm.energy_ci_pct[1] - mm.energy_ci_pct[0]) / 2
    assert half > 5.0
    assert look.judged and not look.settled and look.unsettled == [f"mm (energy per call +-{half:.1f}% > +-5%)"]
    for off in (0.0, None, half + 0.1):  # the target off, or wide enough
        assert settled_after(tmp_path, "op", cells, dataclasses.replace(plan, energy_target_pct=off), None, 3).settled
    # The session's question before round 4: its plan's target decides.
    outcomes = {o.key: o for o in cells}
    planned = CampaignPlan(10, ops={"op": "c.py"}, auto_min=3, energy_target_pct=5.0)
    assert AutoRounds(tmp_path, planned, outcomes, None, None).round_not_needed(CellKey(4, "op", "A")) is None
    off = dataclasses.replace(planned, energy_target_pct=0.0)
    stopped = AutoRounds(tmp_path, off, outcomes, None, None).round_not_needed(CellKey(4, "op", "A"))
    assert stopped is not None and stopped[0] == SETTLED
    # An op that ran to the cap with only its energy unsettled: the report's rounds line counts that shape.
    capped = build_op("op", cells, None, dataclasses.replace(plan, rounds=3), 2.0, caliber.CaliberResult())
    assert _rounds_text(capped, 3) == (f"rounds 3 of up to 3 (the cap reached; held by 1 shape(s): mm (energy per "
                                       f"call +-{half:.1f}% > +-5%))")
    # The option: a percentage, and only where rounds are added.
    result = pytester.runpytest("--ab-rounds", "6", "--ab-energy-target", "5", "-p", "no:cacheprovider")
    result.stderr.fnmatch_lines(["*--ab-energy-target 5: a target that adds rounds needs --ab-rounds auto*"])
    result = pytester.runpytest("--ab-energy-target", "five", "-p", "no:cacheprovider")
    result.stderr.fnmatch_lines(["*--ab-energy-target*expected a percentage like 2 or 2.5%, got 'five'*"])
