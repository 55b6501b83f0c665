"""Running a shape's timed windows under a timing regime (``core/regimes.py``), and recording per window whether
the regime's condition held.

burst: before each short window, wait (bounded) until NVML names no power cap or slowdown and the SM clock is back
near its maximum, so every window starts at boost.  steady: run the kernel untimed until the last readings of SM
clock and power agree, or show it at boost with no holding reason (bounded), then time the windows back to back.
Without GPU state (the interpreter, no NVML) neither condition can be checked: burst waits a plain gap, steady
warms up by time, and every window says ``not_checked``.  The sampler and the clock are parameters so a test can
stand in for a GPU.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from pytest_abbench.child.gpustate import Edge, GpuSampler
from pytest_abbench.child.timers import Windows
from pytest_abbench.core import regimes
from pytest_abbench.core.results import GpuReading, GpuState, TimedWindow


@dataclass
class RegimeTiming:
    """A shape's samples under one regime, and its windows."""

    regime: str
    timer: str
    samples_ms: list[float] = field(default_factory=list)
    windows: list[TimedWindow] = field(default_factory=list)
    marker: str | None = None


@dataclass
class Pace:
    """Waiting and telling time: ``time.sleep`` and ``time.monotonic`` in a cell, a stand-in in tests."""

    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic


def at_boost(reading: GpuReading | None, max_clock: float | None) -> bool:
    """Whether a reading shows a card free to run at boost: no holding reason, and the SM clock near its maximum
    or the card idle (an idle card's clock drops until the next launch raises it)."""
    if reading is None or reading.reasons_mask is None:
        return False
    if any(name in reading.reasons for name in regimes.HOLDING_REASONS):
        return False
    if max_clock is None or reading.sm_clock_mhz is None or "gpu_idle" in reading.reasons:
        return True
    return reading.sm_clock_mhz >= regimes.BURST_CLOCK_SHARE * max_clock


def wait_for_boost(sampler: GpuSampler, max_clock: float | None, pace: Pace) -> tuple[str, float, str]:
    """The idle gap before a burst window: (condition, seconds waited, what was seen)."""
    start = pace.clock()
    if sampler.not_recorded is not None:
        pace.sleep(regimes.BURST_PLAIN_GAP_S)
        return regimes.NOT_CHECKED, round(pace.clock() - start, 4), f"a plain {regimes.BURST_PLAIN_GAP_S:g} s gap"
    pace.sleep(regimes.BURST_MIN_GAP_S)
    while True:
        reading = sampler.read()
        waited = round(pace.clock() - start, 4)
        if at_boost(reading, max_clock):
            clock = "-" if reading is None or reading.sm_clock_mhz is None else f"{reading.sm_clock_mhz:.0f}"
            return regimes.MET, waited, f"{clock} MHz, no holding reason after {waited:.3g} s"
        if waited >= regimes.BURST_MAX_WAIT_S:
            held = [] if reading is None else [r for r in reading.reasons if r in regimes.HOLDING_REASONS]
            what = ", ".join(held) or ("no reading" if reading is None else
                                       f"{reading.sm_clock_mhz or 0:.0f} MHz below boost")
            return regimes.NOT_MET, waited, f"still {what} after {waited:.3g} s"
        pace.sleep(regimes.BURST_POLL_S)


def _spread_ok(values: list[float], tolerance: float, floor: float = 0.0) -> bool:
    return max(values) - min(values) <= max(floor, tolerance * statistics.median(values))


def free_at_boost(readings: list[GpuReading | None], max_clock: float | None) -> bool:
    """Whether every reading shows the kernel running at boost with no holding reason: a card below its power cap,
    with nothing to settle into although NVML's averaged power figure may still be climbing."""
    # at_boost's test, without its allowances for an unknown maximum, a missing clock or an idle card.
    return max_clock is not None and bool(readings) and all(
        r is not None and r.sm_clock_mhz is not None and "gpu_idle" not in r.reasons and at_boost(r, max_clock)
        for r in readings)


def settled(readings: list[GpuReading | None], max_clock: float | None = None) -> bool | None:
    """Whether the last ``STEADY_LAST_K`` readings agree on SM clock and power (each within its tolerance), or on
    the clock while the card runs free at boost (``max_clock`` known); None when they carry neither figure."""
    last = readings[-regimes.STEADY_LAST_K:]
    if len(last) < regimes.STEADY_LAST_K or any(r is None for r in last):
        return False
    clocks = [r.sm_clock_mhz for r in last if r is not None]
    powers = [r.power_w for r in last if r is not None]
    checks = []
    if all(c is not None for c in clocks):
        checks.append(_spread_ok([float(c or 0) for c in clocks], regimes.STEADY_CLOCK_TOL,
                                 regimes.STEADY_CLOCK_STEP_MHZ))
    if all(p is not None for p in powers) and not free_at_boost(last, max_clock):
        checks.append(_spread_ok([float(p or 0) for p in powers], regimes.STEADY_POWER_TOL))
    return all(checks) if checks else None


def settle(timer: Windows, sampler: GpuSampler, cpu: bool, pace: Pace) -> tuple[str, float, str, float | None]:
    """Run the kernel until clocks and power settle: (condition, seconds, what was seen, the settled SM clock)."""
    start = pace.clock()
    if sampler.not_recorded is not None:
        warmup = regimes.STEADY_CPU_WARMUP_S if cpu else regimes.STEADY_PLAIN_WARMUP_S
        timer.run_for(warmup)
        return regimes.NOT_CHECKED, round(pace.clock() - start, 4), f"a warm-up of {warmup:g} s by time", None
    max_clock = sampler.max_sm_clock_mhz()
    readings: list[GpuReading | None] = []
    while True:
        timer.run_for(regimes.STEADY_CHUNK_MS / 1e3)
        readings.append(sampler.read())
        elapsed = round(pace.clock() - start, 4)
        state = settled(readings, max_clock) if elapsed >= regimes.STEADY_MIN_S else False
        if state is None:
            return regimes.NOT_CHECKED, elapsed, "NVML gave neither SM clock nor power", None
        last = [r for r in readings[-regimes.STEADY_LAST_K:] if r is not None and r.sm_clock_mhz is not None]
        clock = statistics.median(float(r.sm_clock_mhz or 0) for r in last) if last else None
        shown = "-" if clock is None else f"{clock:.0f}"
        if state:
            how = (" (at boost, no holding reason)" if free_at_boost(readings[-regimes.STEADY_LAST_K:], max_clock)
                   else "")
            return regimes.MET, elapsed, f"settled at {shown} MHz{how} after {elapsed:.3g} s", clock
        if elapsed >= regimes.STEADY_MAX_S:
            return regimes.NOT_MET, elapsed, f"not settled after {elapsed:.3g} s (last {shown} MHz)", clock


def still_settled(clock: float | None, after: GpuReading | None) -> bool:
    """A steady window's clock stayed within the settling tolerance of the settled clock."""
    if clock is None or after is None or after.sm_clock_mhz is None:
        return True  # nothing to compare: the settling decides
    return abs(after.sm_clock_mhz - clock) <= max(regimes.STEADY_CLOCK_STEP_MHZ, regimes.STEADY_CLOCK_TOL * clock)


EDGES_OFF = "window edges not read (--ab-gpu-state off)"


def run_regime(regime: str, timer: Windows, sampler: GpuSampler, count: int, cpu: bool,
               pace: Pace | None = None, read_edges: bool = True) -> RegimeTiming:
    """``count`` timed windows of ``timer`` under ``regime``, each with its GPU state and condition.

    With ``read_edges`` false the windows carry no GPU state (the regime's own waiting and settling still read
    NVML): a run that shows what the edge reads cost.
    """
    pace = pace or Pace()
    out = RegimeTiming(regime, timer.timer, marker=timer.marker)

    def timed(runs: int, warm_s: float) -> list[tuple[list[float], int, GpuState]]:
        """``runs`` windows back to back, each with the state between its two edges."""
        edges: list[Edge] = []
        windows = timer.windows(runs, (lambda: edges.append(sampler.start())) if read_edges else (lambda: None),
                                warm_s)
        states = ([sampler.between(a, b) for a, b in zip(edges, edges[1:])] if read_edges
                  else [GpuState(not_recorded=EDGES_OFF)] * runs)
        out.samples_ms.extend(ms for samples, _ in windows for ms in samples)
        return [(samples, calls, state) for (samples, calls), state in zip(windows, states, strict=True)]

    if regime == regimes.BURST:
        max_clock = sampler.max_sm_clock_mhz()
        for _ in range(count):
            condition, waited, detail = wait_for_boost(sampler, max_clock, pace)
            # A GPU's clock ramps up from idle in an untimed run right before the window, not inside it.
            [(samples, calls, state)] = timed(1, 0.0 if cpu else regimes.BURST_WARM_S)
            out.windows.append(TimedWindow(condition, waited, calls, len(samples), state, detail))
        return out
    condition, waited, detail, clock = settle(timer, sampler, cpu, pace)
    for index, (samples, calls, state) in enumerate(timed(count, 0.0)):
        window = TimedWindow(condition, waited if index == 0 else 0.0, calls, len(samples), state, detail)
        if condition == regimes.MET and not still_settled(clock, state.after):
            window.condition = regimes.NOT_MET
            after = state.after
            window.detail = f"{detail}; the window ended at {after.sm_clock_mhz if after is not None else 0:.0f} MHz"
        out.windows.append(window)
    return out
