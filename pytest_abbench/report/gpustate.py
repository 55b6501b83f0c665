"""The GPU's state in the report: per op and side, the median clocks and power of its timed windows and the share
of windows under each clock-event reason; per shape, the conditions its windows showed (``GPU_FLAGS``).

Each cell reads NVML before and after each shape's timed window (``child/gpustate.py``; results.jsonl's
``gpu_state``).  A window's clocks, power and temperature are those read right after it, the way the power-regime
probe of docs read them; its reasons are those NVML named at either edge.  A flag keeps the shape's numbers and
verdict: it says under which condition they were measured.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any, Mapping, Sequence

from pytest_abbench.core.results import REASON_BITS, GpuState
from pytest_abbench.report.model import OpReport

# The sides' median SM clocks differing by more than this share: a compute-bound delta moves by about the clock gap
# (docs/reference/report.md, "GPU state", has the figures), and 1% is half the default margin of 2%.
CLOCKS_DIFFER_PCT = 1.0

POWER_CAPPED = "power_capped"
THERMAL = "thermal"
HW_SLOWDOWN = "hw_slowdown"
CLOCKS_DIFFER = "clocks_differ"
GPU_FLAGS: dict[str, str] = {  # every GPU flag name, in the order reports list them, and what it means
    POWER_CAPPED: "NVML named the software power cap (sw_power_cap) at a timed window: the card held its clocks "
                  "down to stay under its power limit, and the delta is the one of that regime",
    THERMAL: "NVML named a thermal slowdown (hw_thermal_slowdown or sw_thermal_slowdown) at a timed window",
    HW_SLOWDOWN: "NVML named a hardware slowdown (hw_slowdown or hw_power_brake) at a timed window",
    CLOCKS_DIFFER: f"the sides' median SM clocks differ by more than {CLOCKS_DIFFER_PCT:g}%: a compute-bound delta "
                   "moves by about as much",
}
FLAG_REASONS: dict[str, tuple[str, ...]] = {
    POWER_CAPPED: ("sw_power_cap",),
    THERMAL: ("hw_thermal_slowdown", "sw_thermal_slowdown"),
    HW_SLOWDOWN: ("hw_slowdown", "hw_power_brake"),
}
READINGS = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c")  # medians of the after-window readings
NOT_IN_RESULTS = "results.jsonl has no gpu_state (written before pytest-abbench recorded it)"
LINE_SKIPS = ("gpu_idle", "sw_power_cap")  # gpu_idle: the card idles at a window's edges; sw_power_cap: always shown

Windows = Sequence[tuple[GpuState | None, GpuState | None]]  # a shape's rounds: side A's window, side B's


def _recorded(states: Sequence[GpuState | None]) -> list[GpuState]:
    return [s for s in states if s is not None and s.not_recorded is None]


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _after(state: GpuState, name: str) -> float | None:
    value: float | None = getattr(state.after, name) if state.after is not None else None
    return value


def side_summary(states: Sequence[GpuState | None]) -> dict[str, Any]:
    """One side's windows: how many, how many recorded, the medians of the after-window readings, the mean power
    over the window (energy counter / wall time), the share of windows under each reason, and why any were not
    recorded (the most frequent reason)."""
    recorded = _recorded(states)
    out: dict[str, Any] = {"windows": len(states), "recorded": len(recorded)}
    for name in READINGS:
        out[name] = _median([_after(s, name) for s in recorded])
    out["window_power_w"] = _median([s.energy_mj / s.window_s / 1000.0 for s in recorded
                                     if s.energy_mj is not None and s.window_s])
    seen = Counter(name for s in recorded for name in set(s.reasons))
    order = [name for _, name in REASON_BITS] + sorted(set(seen) - {name for _, name in REASON_BITS})
    out["reason_share"] = {name: seen[name] / len(recorded) for name in order if seen[name]}
    missing = Counter(NOT_IN_RESULTS if s is None else s.not_recorded for s in states
                      if s is None or s.not_recorded is not None)
    if missing:
        out["not_recorded"] = missing.most_common(1)[0][0]
    return out


def shape_flags(windows: Windows) -> list[str]:
    """The GPU flags of one shape's windows over all rounds (names in ``GPU_FLAGS`` order)."""
    a = _recorded([pair[0] for pair in windows])
    b = _recorded([pair[1] for pair in windows])
    seen = {name for s in a + b for name in s.reasons}
    flags = [flag for flag, reasons in FLAG_REASONS.items() if seen.intersection(reasons)]
    clock_a = _median([_after(s, "sm_clock_mhz") for s in a])
    clock_b = _median([_after(s, "sm_clock_mhz") for s in b])
    if clock_a and clock_b and max(clock_a, clock_b) / min(clock_a, clock_b) - 1.0 > CLOCKS_DIFFER_PCT / 100.0:
        flags.append(CLOCKS_DIFFER)
    return flags


def summarise(rep: OpReport, windows: Mapping[str, Windows]) -> None:
    """``rep.gpu_state`` per side over the windows of its judged shapes, and each judged shape's ``gpu_flags``."""
    judged = [windows.get(s.shape, []) for s in rep.shapes]
    for index, side in enumerate(("A", "B")):
        rep.gpu_state[side] = side_summary([pair[index] for shape in judged for pair in shape])
    for shape, shape_windows in zip(rep.shapes, judged):
        shape.gpu_flags = shape_flags(shape_windows)


def _reading(summary: dict[str, Any]) -> str:
    clock, power = summary.get("sm_clock_mhz"), summary.get("power_w")
    return f"{'-' if clock is None else f'{clock:.0f}'} MHz {'-' if power is None else f'{power:.0f}'} W"


def _share(summary: dict[str, Any], name: str) -> str:
    if not summary.get("recorded"):
        return "-"
    return f"{100.0 * summary.get('reason_share', {}).get(name, 0.0):.0f}%"


def op_lines(o: OpReport) -> list[str]:
    """The op's GPU line: ``GPU: A 1980 MHz 148 W, B 1980 MHz 150 W; power cap in 0% / 0% of windows``, then the
    other reasons seen, the flagged shapes and any windows not recorded; or ``GPU state: not recorded (<why>)``."""
    a, b = o.gpu_state.get("A"), o.gpu_state.get("B")
    if a is None or b is None or not (a["windows"] or b["windows"]):
        return []
    if not (a["recorded"] or b["recorded"]):
        why = list(dict.fromkeys(str(s["not_recorded"]) for s in (a, b) if s.get("not_recorded")))
        return [f"   GPU state: not recorded ({'; '.join(why)})"]
    parts = [f"GPU: A {_reading(a)}, B {_reading(b)}", f"power cap in {_share(a, 'sw_power_cap')} / "
                                                        f"{_share(b, 'sw_power_cap')} of windows"]
    others = dict.fromkeys(name for s in (a, b) for name in s.get("reason_share", {}) if name not in LINE_SKIPS)
    parts += [f"{name.replace('_', ' ')} in {_share(a, name)} / {_share(b, name)}" for name in others]
    flagged = Counter(flag for s in o.shapes for flag in s.gpu_flags)
    if flagged:
        parts.append("flagged: " + ", ".join(f"{flag} on {flagged[flag]} of {len(o.shapes)} shapes"
                                             for flag in GPU_FLAGS if flagged[flag]))
    unrecorded = [f"{s['windows'] - s['recorded']} of {s['windows']} side {side} windows not recorded "
                  f"({s['not_recorded']})" for side, s in (("A", a), ("B", b)) if s["windows"] > s["recorded"]]
    return ["   " + "; ".join(parts + unrecorded)]
