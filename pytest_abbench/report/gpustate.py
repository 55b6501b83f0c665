"""The GPU's state in the report: per op and side, the median clocks of its timed windows and their power from
NVML's energy counter, the share of windows under each clock-event reason and under the regime's condition; per
shape, the conditions its windows showed (GPU flags of ``flags.FLAGS``) and its energy per call; per op, which side
does more work per joule.

Each cell reads NVML before and after each timed window of a shape (``child/gpustate.py``; results.jsonl's
``windows``). A window's clocks, power and temperature are those
read right after it, the way the power-regime probe of docs read them; its reasons are those NVML named at either
edge. Each side's thermal state is named by the temperature at its first window's opening edge and its last window's
closing edge, per cell and shape (medians over them). A flag keeps the shape's numbers and verdict: it says under
which condition they were measured.

Power is the energy counter's increase over the windows' wall time, the windows taken together: NVML's power
figure (``power_w``) is an average the driver keeps over up to a second, which lags a kernel that just started
(layer_norm on the H200: 412 W by it, about 640 W by the counter over the same windows).  Where the windows are
too short for the counter's updates (``core/results.py`` ``ENERGY_MIN_S``) or have no energy figure, the line gives
NVML's figure and says so: ``412 W (NVML avg)``.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from pytest_abbench.core.regimes import BURST, MET, NOT_CHECKED, NOT_MET, STEADY
from pytest_abbench.core.results import REASON_BITS, GpuState, PooledEnergy, ShapeResult, pool_energy, withheld_why
from pytest_abbench.report.flags import (BOOST_NOT_REACHED, CLOCKS_DIFFER, CLOCKS_DIFFER_PCT, CLOCKS_NOT_SETTLED, FLAGS,
                                         HW_SLOWDOWN, POWER_CAPPED, THERMAL, ordered)
from pytest_abbench.report.model import OpReport, ShapeReport
from pytest_abbench.report.stats import interval, pct

FLAG_REASONS: dict[str, tuple[str, ...]] = {
    POWER_CAPPED: ("sw_power_cap",),
    THERMAL: ("hw_thermal_slowdown", "sw_thermal_slowdown"),
    HW_SLOWDOWN: ("hw_slowdown", "hw_power_brake"),
}
READINGS = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c")  # medians of the after-window readings
# gpu_idle: a card idles at a window's edge where the timer waits between windows (the direct timer; a burst window's
# wait); sw_power_cap: always shown
LINE_SKIPS = ("gpu_idle", "sw_power_cap")
NOT_MET_FLAG = {STEADY: CLOCKS_NOT_SETTLED, BURST: BOOST_NOT_REACHED}  # a window whose condition was not met

SPANS = "spans"  # OpReport.energy_basis: a steady span's figures (core/results.py EnergySpan)
MIXED = "mixed"  # some shapes' figures from spans, others from their windows (the direct timer's fallback)
Window = tuple[Optional[str], Optional[GpuState]]  # a timed window: its regime condition (None: before regimes), state


@dataclass
class ShapeGpu:
    """One shape's GPU evidence over the rounds, each round's side A and side B."""

    windows: list[tuple[list[Window], list[Window]]] = field(default_factory=list)
    # per round, each side's energy counter over its cell's windows (core/results.py cell_energy); None: no figure
    energy: list[tuple[Optional[PooledEnergy], Optional[PooledEnergy]]] = field(default_factory=list)


def record_windows(rec: ShapeResult) -> list[Window]:
    """A record's windows as the report reads them."""
    return [(w.condition, w.gpu_state) for w in rec.windows]


def _recorded(windows: Sequence[Window]) -> list[GpuState]:
    return [s for _, s in windows if s is not None and s.not_recorded is None]


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _after(state: GpuState, name: str) -> float | None:
    value: float | None = getattr(state.after, name) if state.after is not None else None
    return value


def thermal_ends(groups: Sequence[Sequence[Window]]) -> tuple[float | None, float | None]:
    """The temperature the timed windows started and ended at, each group one cell's windows of one shape: the
    medians over the groups of the first window's opening reading and the last window's closing one."""
    first, last = [], []
    for group in groups:
        states = _recorded(group)
        if not states:
            continue
        opening = states[0].before if states[0].before is not None else states[0].after
        closing = states[-1].after if states[-1].after is not None else states[-1].before
        first.append(None if opening is None else opening.temperature_c)
        last.append(None if closing is None else closing.temperature_c)
    return _median(first), _median(last)


def spans_pooled(cells: Sequence[Optional[PooledEnergy]]) -> PooledEnergy | None:
    """The cells' energy figures taken together where every one is a steady span (``core/results.py``
    ``span_energy``): their increase over their time, their edge errors added; None where any figure is not a
    span (a shape the direct timer fell back on), so the power is never half spans and half windows."""
    spans = [c for c in cells if c is not None]
    if not spans or any(c.edge_error_s is None for c in spans):
        return None
    return PooledEnergy(math.fsum(c.energy_mj for c in spans), math.fsum(c.window_s or 0.0 for c in spans),
                        math.fsum(c.calls for c in spans), len(spans), math.fsum(c.edge_error_s or 0.0 for c in spans))


def side_summary(windows: Sequence[Window], groups: Sequence[Sequence[Window]] | None = None,
                 energy: Sequence[Optional[PooledEnergy]] = ()) -> dict[str, Any]:
    """One side's windows: how many, how many recorded, the medians of the after-window readings (``power_w``:
    NVML's averaged figure), the mean power over the windows from the energy counter (``energy_power_w``; where
    the windows are too short for the counter, None and ``energy_power_withheld`` says why), the temperature at
    the first and the last window of each cell's shape (``temperature_first_c``, ``temperature_last_c``: medians
    over ``groups``, the windows cell by cell; by default one group), the share of windows under each reason, how
    many windows met their regime's condition (``conditions``), and why any were not recorded (the most frequent
    reason).

    The counter's power is its increase over all the windows' wall time, not a median of each window's: a window
    shorter than the counter's update reads 0 or a whole step, and the median of such figures can be 0 W.  Where
    cells have steady spans (``energy``: each cell's figure), their power is the spans' instead: the same windows,
    with the counter's updates placed to a few ms."""
    recorded = _recorded(windows)
    out: dict[str, Any] = {"windows": len(windows), "recorded": len(recorded)}
    for name in READINGS:
        out[name] = _median([_after(s, name) for s in recorded])
    out["temperature_first_c"], out["temperature_last_c"] = thermal_ends([windows] if groups is None else groups)
    pooled = spans_pooled(energy) or pool_energy([(s, 0) for s in recorded])
    out["energy_power_w"] = pooled.power_w() if pooled is not None else None
    if pooled is not None and pooled.withheld():
        out["energy_power_withheld"] = pooled.withheld()
    seen = Counter(name for s in recorded for name in set(s.reasons))
    order = [name for _, name in REASON_BITS] + sorted(set(seen) - {name for _, name in REASON_BITS})
    out["reason_share"] = {name: seen[name] / len(recorded) for name in order if seen[name]}
    conditions = Counter(condition for condition, _ in windows if condition is not None)
    if conditions:
        out["conditions"] = {name: conditions[name] for name in (MET, NOT_MET, NOT_CHECKED) if conditions[name]}
    missing = Counter(s.not_recorded for _, s in windows if s is not None and s.not_recorded is not None)
    if missing:
        out["not_recorded"] = missing.most_common(1)[0][0]
    return out


def shape_flags(rounds: Sequence[tuple[Sequence[Window], Sequence[Window]]], regime: str | None = None) -> list[str]:
    """The GPU flags of one shape's windows over all rounds (names in ``flags.FLAGS`` order)."""
    a = [w for pair in rounds for w in pair[0]]
    b = [w for pair in rounds for w in pair[1]]
    seen = {name for s in _recorded(a) + _recorded(b) for name in s.reasons}
    found = {flag for flag, reasons in FLAG_REASONS.items() if seen.intersection(reasons)}
    clock_a = _median([_after(s, "sm_clock_mhz") for s in _recorded(a)])
    clock_b = _median([_after(s, "sm_clock_mhz") for s in _recorded(b)])
    if clock_a and clock_b and max(clock_a, clock_b) / min(clock_a, clock_b) - 1.0 > CLOCKS_DIFFER_PCT / 100.0:
        found.add(CLOCKS_DIFFER)
    if regime in NOT_MET_FLAG and any(condition == NOT_MET for condition, _ in a + b):
        found.add(NOT_MET_FLAG[regime])
    return ordered(found)


def cells_withheld(cells: Sequence[PooledEnergy]) -> str:
    """Why the energy of these cells is not stated: the median span's reason where spans were withheld, else the
    median cell's timed seconds and stretches; "" where no cell's figure is withheld."""
    withheld = [c for c in cells if c.withheld()]
    if not withheld:
        return ""
    spans = sorted((c for c in withheld if c.edge_error_s is not None),
                   key=lambda c: (c.edge_error_s or 0.0) / (c.window_s or 1.0))
    if spans:  # the median span's reason
        return spans[len(spans) // 2].withheld()
    if any(c.window_s is None for c in withheld):
        return withheld[0].withheld()
    return withheld_why(statistics.median(c.window_s or 0.0 for c in withheld),
                        statistics.median(c.stretches for c in withheld), " per cell")


def _energy(rep: OpReport, per_shape: Sequence[ShapeGpu]) -> None:
    """Each shape's joules per call per side (median over rounds) and B's change against A with the time delta's
    statistics (median of the per-round changes, t-interval of their logs); the op's geomean of the changes.  A
    round's figure is its cell's steady span, or its windows taken together; a shape none of whose rounds has a
    figure on both sides gets the reason instead (``energy_withheld``); ``energy_basis`` says which reading the
    figures are."""
    geo: list[list[float]] = []
    every_cell: list[PooledEnergy] = []
    for shape, gpu in zip(rep.shapes, per_shape):
        cells = [c for pair in gpu.energy for c in pair if c is not None]
        every_cell += cells
        figures = [(a.per_call_j() if a else None, b.per_call_j() if b else None) for a, b in gpu.energy]
        pairs = [(a, b) for a, b in figures if a and b]
        if not pairs:
            shape.energy_withheld = cells_withheld(cells)
            continue
        shape.energy_a_j = statistics.median(a for a, _ in pairs)
        shape.energy_b_j = statistics.median(b for _, b in pairs)
        logs = [math.log(b / a) for a, b in pairs]
        shape.energy_delta_pct = statistics.median(pct(x) for x in logs)
        ci = interval(logs)
        shape.energy_ci_pct = (pct(ci[0]), pct(ci[1])) if ci else None
        if len(pairs) == len(gpu.energy) == rep.rounds_expected:
            geo.append(logs)
    # The line names its reading: spans where every figure is one, the windows where none is, both otherwise.
    kinds = {c.edge_error_s is not None for c in every_cell}
    rep.energy_basis = "" if kinds <= {False} else SPANS if kinds == {True} else MIXED
    if geo and len(geo) == len(rep.shapes):
        rounds = [statistics.fmean(values) for values in zip(*geo)]
        rep.energy_geomean_pct = pct(statistics.fmean(rounds))
        ci = interval(rounds)
        rep.energy_geomean_ci_pct = (pct(ci[0]), pct(ci[1])) if ci else None
    elif not any(s.energy_a_j is not None for s in rep.shapes):
        rep.energy_withheld = cells_withheld(every_cell)


def summarise(rep: OpReport, shapes: Mapping[str, ShapeGpu]) -> None:
    """``rep.gpu_state`` per side over the windows of its judged shapes, each judged shape's GPU flags (added to its
    ``flags``: they keep its verdict) and its energy per call."""
    judged = [shapes.get(s.shape, ShapeGpu()) for s in rep.shapes]
    for index, side in enumerate(("A", "B")):
        cells = [pair[index] for shape in judged for pair in shape.windows]
        rep.gpu_state[side] = side_summary([w for cell in cells for w in cell], cells,
                                           [pair[index] for shape in judged for pair in shape.energy])
    for shape, gpu in zip(rep.shapes, judged):
        shape.flags = ordered(set(shape.flags) | set(shape_flags(gpu.windows, rep.regime or None)))
        shape.gpu = shape_summary(gpu)
    _energy(rep, judged)


def shape_summary(gpu: ShapeGpu) -> dict[str, Any]:
    """One shape's own GPU state per side (the op's line mixes its shapes: a small shape never reaches the power
    cap a large one sits at): median SM clock and power after its windows, the share of them under the power cap,
    the temperature at its first and last window (medians over the rounds).  Empty where no window of the shape
    was recorded."""
    out: dict[str, Any] = {}
    for index, side in enumerate(("A", "B")):
        cells = [pair[index] for pair in gpu.windows]
        summary = side_summary([w for cell in cells for w in cell], cells, [pair[index] for pair in gpu.energy])
        if summary["recorded"]:
            out[side] = {"sm_clock_mhz": summary["sm_clock_mhz"], "power_w": summary["power_w"],
                         "energy_power_w": summary["energy_power_w"],
                         "power_cap_share": summary["reason_share"].get("sw_power_cap", 0.0),
                         "temperature_first_c": summary["temperature_first_c"],
                         "temperature_last_c": summary["temperature_last_c"]}
    return out


def shape_clocks(s: ShapeReport) -> str:
    """``A 1492 MHz 691 W, B 1845 MHz 692 W``: a shape's own clocks and power (``W (NVML avg)`` where the energy
    counter gave none), for the note of a verdict a GPU flag keeps; empty without them."""
    return ", ".join(f"{side} {_reading(s.gpu[side])}" for side in ("A", "B") if side in s.gpu)


def recorded_anywhere(ops: Sequence[OpReport]) -> bool:
    """Whether any op's windows carry GPU state."""
    return any(side.get("recorded") for o in ops for side in o.gpu_state.values())


def conditions_checked(ops: Sequence[OpReport]) -> bool:
    """Whether any op's regime condition was checked through NVML (met or not): with the window edges unread the
    windows carry no state, yet the regime still waited and settled on NVML's readings."""
    return any(side.get("conditions", {}).keys() & {MET, NOT_MET} for o in ops for side in o.gpu_state.values())


def not_recorded_why(ops: Sequence[OpReport]) -> str:
    """Why no op has GPU state: the reasons the windows gave, most frequent first."""
    why = Counter(str(side["not_recorded"]) for o in ops for side in o.gpu_state.values() if side.get("not_recorded"))
    return "; ".join(reason for reason, _ in why.most_common(2)) or "no timed window"


def power_text(summary: dict[str, Any]) -> str:
    """``640 W`` from the energy counter; ``412 W (NVML avg)`` where the counter gave no figure for the windows
    (a report.json written before the counter's power has none either); ``- W`` without either."""
    counter, averaged = summary.get("energy_power_w"), summary.get("power_w")
    if counter is not None:
        return f"{counter:.0f} W"
    return "- W" if averaged is None else f"{averaged:.0f} W (NVML avg)"


def _reading(summary: dict[str, Any]) -> str:
    clock = summary.get("sm_clock_mhz")
    return f"{'-' if clock is None else f'{clock:.0f}'} MHz {power_text(summary)}"


def temperature_text(a: dict[str, Any], b: dict[str, Any]) -> str:
    """``temperature first/last window A 45/62 C, B 44/61 C``: the thermal state each side's windows started and
    ended in; empty where neither side read one."""
    def ends(summary: dict[str, Any]) -> str:
        first, last = summary.get("temperature_first_c"), summary.get("temperature_last_c")
        return "/".join("-" if value is None else f"{value:.0f}" for value in (first, last))

    if all(s.get(key) is None for s in (a, b) for key in ("temperature_first_c", "temperature_last_c")):
        return ""
    return f"temperature first/last window A {ends(a)} C, B {ends(b)} C"


def _share(summary: dict[str, Any], name: str) -> str:
    if not summary.get("recorded"):
        return "-"
    return f"{100.0 * summary.get('reason_share', {}).get(name, 0.0):.0f}%"


def _joules(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("J", 1.0), ("mJ", 1e-3), ("uJ", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} nJ"


def energy_lines(o: OpReport) -> list[str]:
    """The op's energy per call (NVML's energy counter over the timed windows / the calls in them): the geomean of
    B's change, then each shape, or why it is withheld; nothing where no window had an energy figure."""
    measured = [s for s in o.shapes if s.energy_a_j is not None]
    if not measured and not o.energy_withheld:
        return []
    head = {SPANS: "   energy per call (NVML energy counter from its update before the timed windows to its update "
                   "after them, the kernel running throughout, x time per call): ",
            MIXED: "   energy per call (NVML energy counter: from its update before the timed windows to its update "
                   "after them x time per call where the graph timer ran, over the timed windows / calls where "
                   "not): "}.get(o.energy_basis, "   energy per call (NVML energy counter over the timed windows / calls): ")
    if o.energy_geomean_pct is not None:
        head += f"geomean B vs A {o.energy_geomean_pct:+.1f}% [{_interval(o.energy_geomean_ci_pct)}]"
    elif measured:
        head += f"{len(measured)} of {len(o.shapes)} shapes measured"
    else:
        return [head + o.energy_withheld]
    shown = [s for s in o.shapes if s.energy_delta_pct is not None or s.energy_withheld]
    width = max(len(s.shape) for s in shown)
    return [head] + [f"     {s.shape:<{width}}  " + (
        s.energy_withheld if s.energy_delta_pct is None else
        f"A {_joules(s.energy_a_j)}, B {_joules(s.energy_b_j)}, B vs A {s.energy_delta_pct:+.1f}% "
        f"[{_interval(s.energy_ci_pct)}]") for s in shown]


def _work_per_joule(energy_pct: float) -> float:
    """B's calls per joule against A's, in percent, from B's energy per call against A's."""
    return 100.0 * (1.0 / (1.0 + energy_pct / 100.0) - 1.0)


def perf_per_watt_line(o: OpReport) -> str:
    """``perf per watt: time B vs A -35.2% [...], energy per call B vs A -20.0% [...]: B does more work per joule
    (+25.0% calls per joule [...])``; the energy part says ``withheld: <why>`` or ``not measured`` instead."""
    time = "time B vs A " + ("-" if o.geomean_pct is None else
                             f"{o.geomean_pct:+.1f}% [{_interval(o.geomean_ci_pct)}]")
    if o.energy_geomean_pct is None:
        measured = sum(1 for s in o.shapes if s.energy_a_j is not None)
        if o.energy_withheld:
            why = "energy per call withheld (the energy line says why)"
        elif measured:
            why = f"energy per call measured on {measured} of {len(o.shapes)} shapes, no op-wide figure"
        else:
            why = "energy per call not measured"
        return f"   perf per watt: {time}; {why}: which side does more work per joule is not stated"
    energy = f"energy per call B vs A {o.energy_geomean_pct:+.1f}% [{_interval(o.energy_geomean_ci_pct)}]"
    ci = o.energy_geomean_ci_pct
    work = f"{_work_per_joule(o.energy_geomean_pct):+.1f}% calls per joule"
    if ci is None:
        said = f"which side does more work per joule is not established (no interval; B {work})"
    elif ci[0] > 0.0 or ci[1] < 0.0:
        side = "A" if ci[0] > 0.0 else "B"
        said = (f"{side} does more work per joule (B {work} "
                f"[{_work_per_joule(ci[1]):+.1f} ~ {_work_per_joule(ci[0]):+.1f}%])")
    else:
        said = f"no measurable difference in work per joule (B {work})"
    return f"   perf per watt: {time}, {energy}: {said}"


def _interval(ci: tuple[float, float] | None) -> str:
    return "-" if ci is None else f"{ci[0]:+.1f} ~ {ci[1]:+.1f}%"


def _conditions(s: dict[str, Any]) -> str:
    counts = s.get("conditions", {})
    return f"{counts.get(MET, 0)}/{sum(counts.values())}" if counts else "-"


def op_lines(o: OpReport, header_said: bool = False) -> list[str]:
    """The op's GPU line: ``GPU: A 1980 MHz 640 W, B 1980 MHz 610 W; power cap in 0% / 0% of windows`` (power from
    the energy counter, or ``412 W (NVML avg)``), the temperature each side's windows started and ended at
    (``temperature first/last window A 45/62 C, B 44/61 C``: medians over its cells), then the other reasons seen, the regime's condition, the flagged
    shapes and any windows not recorded; or ``GPU state: not recorded (<why>)`` (unless ``header_said`` so for the
    whole report); then its energy per call and its perf per watt."""
    a, b = o.gpu_state.get("A"), o.gpu_state.get("B")
    if a is None or b is None or not (a["windows"] or b["windows"]):
        return []
    checked = o.regime and conditions_checked([o])
    condition = f"{o.regime} condition met in {_conditions(a)} / {_conditions(b)} windows" if checked else ""
    if not (a["recorded"] or b["recorded"]):
        if header_said:
            return ["   " + condition] if condition else []
        why = list(dict.fromkeys(str(s["not_recorded"]) for s in (a, b) if s.get("not_recorded")))
        return [f"   GPU state: not recorded ({'; '.join(why)})" + (f"; {condition}" if condition else "")]
    parts = [f"GPU: A {_reading(a)}, B {_reading(b)}", f"power cap in {_share(a, 'sw_power_cap')} / "
                                                        f"{_share(b, 'sw_power_cap')} of windows"]
    thermal = temperature_text(a, b)
    parts += [thermal] if thermal else []
    others = dict.fromkeys(name for s in (a, b) for name in s.get("reason_share", {}) if name not in LINE_SKIPS)
    parts += [f"{name.replace('_', ' ')} in {_share(a, name)} / {_share(b, name)}" for name in others]
    if o.regime and (a.get("conditions") or b.get("conditions")):
        parts.append(f"{o.regime} condition met in {_conditions(a)} / {_conditions(b)} windows")
    gpu_flags = [name for name in FLAGS if FLAGS[name].gpu]
    flagged = Counter(flag for s in o.shapes for flag in s.flags if flag in gpu_flags)
    if flagged:
        parts.append("flagged: " + ", ".join(f"{flag} on {flagged[flag]} of {len(o.shapes)} shapes"
                                             for flag in gpu_flags if flagged[flag]))
    unrecorded = [f"{s['windows'] - s['recorded']} of {s['windows']} side {side} windows not recorded "
                  f"({s['not_recorded']})" for side, s in (("A", a), ("B", b)) if s["windows"] > s["recorded"]]
    return ["   " + "; ".join(parts + unrecorded)] + energy_lines(o) + [perf_per_watt_line(o)]
