"""The GPU's state in the report: per op and side, the median clocks and power of its timed windows, the share
of windows under each clock-event reason and under the regime's condition; per shape, the conditions its windows
showed (GPU flags of ``flags.FLAGS``) and its energy per call.

Each cell reads NVML before and after each timed window of a shape (``child/gpustate.py``; results.jsonl's
``windows``, or ``gpu_state`` in records from before windows).  A window's clocks, power and temperature are those read right after it, the way the power-regime
probe of docs read them; its reasons are those NVML named at either edge.  A flag keeps the shape's numbers and
verdict: it says under which condition they were measured.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from pytest_abbench.core.regimes import BURST, MET, NOT_CHECKED, NOT_MET, STEADY
from pytest_abbench.core.results import REASON_BITS, GpuState, ShapeResult
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
NOT_IN_RESULTS = "results.jsonl has no gpu_state (written before pytest-abbench recorded it)"
# gpu_idle: a card idles at a window's edge where the timer waits between windows (the direct timer; a burst window's
# wait); sw_power_cap: always shown
LINE_SKIPS = ("gpu_idle", "sw_power_cap")
NOT_MET_FLAG = {STEADY: CLOCKS_NOT_SETTLED, BURST: BOOST_NOT_REACHED}  # a window whose condition was not met

Window = tuple[Optional[str], Optional[GpuState]]  # a timed window: its regime condition (None: before regimes), state


@dataclass
class ShapeGpu:
    """One shape's GPU evidence over the rounds, each round's side A and side B."""

    windows: list[tuple[list[Window], list[Window]]] = field(default_factory=list)
    energy_j: list[tuple[Optional[float], Optional[float]]] = field(default_factory=list)  # J per call per round


def record_windows(rec: ShapeResult) -> list[Window]:
    """A record's windows as the report reads them; a record from before windows has its one state (or none)."""
    if rec.windows:
        return [(w.condition, w.gpu_state) for w in rec.windows]
    return [(None, rec.gpu_state)]


def _recorded(windows: Sequence[Window]) -> list[GpuState]:
    return [s for _, s in windows if s is not None and s.not_recorded is None]


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _after(state: GpuState, name: str) -> float | None:
    value: float | None = getattr(state.after, name) if state.after is not None else None
    return value


def side_summary(windows: Sequence[Window]) -> dict[str, Any]:
    """One side's windows: how many, how many recorded, the medians of the after-window readings, the mean power
    over the window (energy counter / wall time), the share of windows under each reason, how many windows met
    their regime's condition (``conditions``), and why any were not recorded (the most frequent reason)."""
    recorded = _recorded(windows)
    out: dict[str, Any] = {"windows": len(windows), "recorded": len(recorded)}
    for name in READINGS:
        out[name] = _median([_after(s, name) for s in recorded])
    out["window_power_w"] = _median([s.energy_mj / s.window_s / 1000.0 for s in recorded
                                     if s.energy_mj is not None and s.window_s])
    seen = Counter(name for s in recorded for name in set(s.reasons))
    order = [name for _, name in REASON_BITS] + sorted(set(seen) - {name for _, name in REASON_BITS})
    out["reason_share"] = {name: seen[name] / len(recorded) for name in order if seen[name]}
    conditions = Counter(condition for condition, _ in windows if condition is not None)
    if conditions:
        out["conditions"] = {name: conditions[name] for name in (MET, NOT_MET, NOT_CHECKED) if conditions[name]}
    missing = Counter(NOT_IN_RESULTS if s is None else s.not_recorded for _, s in windows
                      if s is None or s.not_recorded is not None)
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


def _energy(rep: OpReport, per_shape: Sequence[ShapeGpu]) -> None:
    """Each shape's joules per call per side (median over rounds) and B's change against A with the time delta's
    statistics (median of the per-round changes, t-interval of their logs); the op's geomean of the changes."""
    geo: list[list[float]] = []
    for shape, gpu in zip(rep.shapes, per_shape):
        pairs = [(a, b) for a, b in gpu.energy_j if a and b]
        if not pairs:
            continue
        shape.energy_a_j = statistics.median(a for a, _ in pairs)
        shape.energy_b_j = statistics.median(b for _, b in pairs)
        logs = [math.log(b / a) for a, b in pairs]
        shape.energy_delta_pct = statistics.median(pct(x) for x in logs)
        ci = interval(logs)
        shape.energy_ci_pct = (pct(ci[0]), pct(ci[1])) if ci else None
        if len(pairs) == len(gpu.energy_j) == rep.rounds_expected:
            geo.append(logs)
    if geo and len(geo) == len(rep.shapes):
        rounds = [statistics.fmean(values) for values in zip(*geo)]
        rep.energy_geomean_pct = pct(statistics.fmean(rounds))
        ci = interval(rounds)
        rep.energy_geomean_ci_pct = (pct(ci[0]), pct(ci[1])) if ci else None


def summarise(rep: OpReport, shapes: Mapping[str, ShapeGpu]) -> None:
    """``rep.gpu_state`` per side over the windows of its judged shapes, each judged shape's GPU flags (added to its
    ``flags``: they keep its verdict) and its energy per call."""
    judged = [shapes.get(s.shape, ShapeGpu()) for s in rep.shapes]
    for index, side in enumerate(("A", "B")):
        rep.gpu_state[side] = side_summary([w for shape in judged for pair in shape.windows for w in pair[index]])
    for shape, gpu in zip(rep.shapes, judged):
        shape.flags = ordered(set(shape.flags) | set(shape_flags(gpu.windows, rep.regime or None)))
        shape.gpu = shape_summary(gpu)
    _energy(rep, judged)


def shape_summary(gpu: ShapeGpu) -> dict[str, Any]:
    """One shape's own GPU state per side (the op's line mixes its shapes: a small shape never reaches the power
    cap a large one sits at): median SM clock and power after its windows, the share of them under the power cap.
    Empty where no window of the shape was recorded."""
    out: dict[str, Any] = {}
    for index, side in enumerate(("A", "B")):
        summary = side_summary([w for pair in gpu.windows for w in pair[index]])
        if summary["recorded"]:
            out[side] = {"sm_clock_mhz": summary["sm_clock_mhz"], "power_w": summary["power_w"],
                         "power_cap_share": summary["reason_share"].get("sw_power_cap", 0.0)}
    return out


def shape_clocks(s: ShapeReport) -> str:
    """``A 1492 MHz 691 W, B 1845 MHz 692 W``: a shape's own clocks and power, for the note of a verdict a GPU
    flag keeps; empty without them."""
    return ", ".join(f"{side} {_reading(s.gpu[side])}" for side in ("A", "B") if side in s.gpu)


def recorded_anywhere(ops: Sequence[OpReport]) -> bool:
    """Whether any op's windows carry GPU state."""
    return any(side.get("recorded") for o in ops for side in o.gpu_state.values())


def conditions_checked(ops: Sequence[OpReport]) -> bool:
    """Whether any op's regime condition was checked through NVML (met or not): with ``--ab-gpu-state off`` the
    windows carry no state, yet the regime still waited and settled on NVML's readings."""
    return any(side.get("conditions", {}).keys() & {MET, NOT_MET} for o in ops for side in o.gpu_state.values())


def not_recorded_why(ops: Sequence[OpReport]) -> str:
    """Why no op has GPU state: the reasons the windows gave, most frequent first."""
    why = Counter(str(side["not_recorded"]) for o in ops for side in o.gpu_state.values() if side.get("not_recorded"))
    return "; ".join(reason for reason, _ in why.most_common(2)) or "no timed window"


def _reading(summary: dict[str, Any]) -> str:
    clock, power = summary.get("sm_clock_mhz"), summary.get("power_w")
    return f"{'-' if clock is None else f'{clock:.0f}'} MHz {'-' if power is None else f'{power:.0f}'} W"


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
    B's change, then each shape; nothing where no window had an energy figure."""
    shapes = [s for s in o.shapes if s.energy_a_j is not None]
    if not shapes:
        return []
    head = "   energy per call (NVML energy counter over the timed windows / calls): "
    head += (f"geomean B vs A {o.energy_geomean_pct:+.1f}% [{_interval(o.energy_geomean_ci_pct)}]"
             if o.energy_geomean_pct is not None else f"{len(shapes)} of {len(o.shapes)} shapes measured")
    width = max(len(s.shape) for s in shapes)
    return [head] + [f"     {s.shape:<{width}}  A {_joules(s.energy_a_j)}, B {_joules(s.energy_b_j)}, "
                     f"B vs A {s.energy_delta_pct:+.1f}% [{_interval(s.energy_ci_pct)}]" for s in shapes
                     if s.energy_delta_pct is not None]


def _interval(ci: tuple[float, float] | None) -> str:
    return "-" if ci is None else f"{ci[0]:+.1f} ~ {ci[1]:+.1f}%"


def _conditions(s: dict[str, Any]) -> str:
    counts = s.get("conditions", {})
    return f"{counts.get(MET, 0)}/{sum(counts.values())}" if counts else "-"


def op_lines(o: OpReport, header_said: bool = False) -> list[str]:
    """The op's GPU line: ``GPU: A 1980 MHz 148 W, B 1980 MHz 150 W; power cap in 0% / 0% of windows``, then the
    other reasons seen, the regime's condition, the flagged shapes and any windows not recorded; or ``GPU state:
    not recorded (<why>)`` (unless ``header_said`` so for the whole report); then its energy per call."""
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
    return ["   " + "; ".join(parts + unrecorded)] + energy_lines(o)
