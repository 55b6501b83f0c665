"""Running a shape's timed windows under a timing regime (``core/regimes.py``), and recording per window whether
the regime's condition held.

burst: before each short window, wait (bounded) until NVML names no power cap or slowdown and the SM clock is back
near its maximum, so every window starts at boost.  steady: run the kernel untimed until its power (by the energy
counter), SM clock and (where the power controller holds the clock) temperature settle (at the power cap, the
clock's median over spans of readings; bounded),
then time the windows back to back.
Without GPU state (the interpreter, no NVML) neither condition can be checked: burst waits a plain gap, steady
warms up by time, and every window says ``not_checked``.  The sampler and the clock are parameters so a test can
stand in for a GPU.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from pytest_abbench.child.gpustate import Edge, GpuSampler
from pytest_abbench.child.timers import Windows
from pytest_abbench.core import regimes
from pytest_abbench.core.results import EnergySpan, GpuReading, GpuState, TimedWindow

# A read of the energy counter: when the read began, when it returned (on the H200 one read took 3.4 ms, as long as
# a full reading of every field), and the value in mJ.
CounterPoint = tuple[float, float, float]


@dataclass
class RegimeTiming:
    """A shape's samples under one regime, and its windows."""

    regime: str
    timer: str
    samples_ms: list[float] = field(default_factory=list)
    windows: list[TimedWindow] = field(default_factory=list)
    marker: str | None = None
    energy_span: EnergySpan | None = None  # steady with a queueing timer: the counter around the windows
    spent_s: dict[str, float] = field(default_factory=dict)  # settle, windows, energy_span (core/results.py)


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


def free_at_boost(readings: Sequence[GpuReading | None], max_clock: float | None) -> bool:
    """Whether every reading shows the kernel running at boost with no holding reason: a card below its power cap,
    with nothing to settle into although NVML's averaged power figure may still be climbing."""
    # at_boost's test, without its allowances for an unknown maximum, a missing clock or an idle card.
    return max_clock is not None and bool(readings) and all(
        r is not None and r.sm_clock_mhz is not None and "gpu_idle" not in r.reasons and at_boost(r, max_clock)
        for r in readings)


def clock_free_of_heat(readings: Sequence[GpuReading | None], max_clock: float | None,
                       counter_power_w: float | None, power_limit_w: float | None) -> bool:
    """Whether a card's heating cannot reach the timing: every reading at boost with no holding reason
    (``free_at_boost``) and the energy counter's power below the enforced limit.  Then the clock is pinned at boost,
    and the temperature reaches it only through the cap or a thermal slowdown, which NVML names (the settling then
    waits, and a window whose closing clock left the settled one is ``not_met``); at the cap the controller trades
    clock for the leakage a warmer die draws, so there the temperature is waited for.  Unknown limit or no counter:
    not free.  Up to the limit itself, not a margin below it: on the H200, 11 cells let pass at 666 to 700 W of
    700 W had all their 110 windows met (docs/evidence/h200-steady-boost-temperature.txt)."""
    return (counter_power_w is not None and power_limit_w is not None and free_at_boost(readings, max_clock)
            and counter_power_w < power_limit_w)


@dataclass
class Judgement:
    """What the settling readings show (``judge``): whether they settled (None: NVML gave neither SM clock nor
    power), whether the kernel runs at the power cap, the clock it settled at, the energy counter's power over the
    last span, the last temperature, and what did not settle yet, each as the bound's message names it."""

    settled: bool | None
    at_cap: bool = False
    clock_mhz: float | None = None
    counter_power_w: float | None = None
    temperature_c: float | None = None
    unsettled: list[str] = field(default_factory=list)
    heat_note: str | None = None  # a temperature still moving that ``clock_free_of_heat`` let pass


@dataclass(frozen=True)
class CounterUpdate:
    """An update of the energy counter, found by a read that showed a new value: the update fell between the start
    of the read before it and the end of this one, so ``at`` is that interval's middle and ``error_s`` half its
    length; ``energy_mj`` the new value."""

    at: float
    energy_mj: float
    error_s: float


def counter_updates(points: Sequence[tuple[float, float, float | None]]) -> list[CounterUpdate]:
    """The updates the reads ``points`` (began, returned, counter or None) show; a counter that went back (the
    driver reloaded) counts from there."""
    marks: list[CounterUpdate] = []
    previous: tuple[float, float] | None = None  # (when the last read with a value began, that value)
    for began, returned, energy in points:
        if energy is None:
            continue
        if previous is not None and energy < previous[1]:
            marks = []
        elif previous is not None and energy != previous[1]:
            marks.append(CounterUpdate((previous[0] + returned) / 2, energy, (returned - previous[0]) / 2))
        previous = (began, energy)
    return marks


def reading_points(readings: Sequence[GpuReading | None], times: Sequence[float]
                   ) -> list[tuple[float, float, float | None]]:
    """The energy counter as the settling readings saw it, each read placed at the time it returned."""
    return [(t, t, None if r is None else r.energy_mj) for t, r in zip(times, readings)]


def counter_power_spans(points: Sequence[tuple[float, float, float | None]], span_s: float | None = None
                        ) -> tuple[float, float] | None:
    """The energy counter's power (W) over two adjacent spans, each at least ``span_s`` long (default
    ``STEADY_POWER_SPAN_S``), the later one ending at the counter's last update; None where the points do not cover
    two spans.

    A read returns the counter's last update, so the spans run from update to update: each read that shows a new
    value marks one, and between two such reads the counter's increase is the energy of whole update periods.
    Each update is placed within half the time from the read before to the read that showed it: a few ms where
    the counter is polled back to back (``ENERGY_POLL_S``), up to half a chunk where only the readings see it.
    """
    span_s = regimes.STEADY_POWER_SPAN_S if span_s is None else span_s
    marks = counter_updates(points)
    if not marks:
        return None
    end = marks[-1]
    mid = next((m for m in reversed(marks) if m.at <= end.at - span_s + 1e-6), None)
    start = None if mid is None else next((m for m in reversed(marks) if m.at <= mid.at - span_s + 1e-6), None)
    if mid is None or start is None:
        return None
    return ((mid.energy_mj - start.energy_mj) / 1e3 / (mid.at - start.at),
            (end.energy_mj - mid.energy_mj) / 1e3 / (end.at - mid.at))


def counter_power_since(points: Sequence[tuple[float, float, float | None]], since: float) -> float | None:
    """The energy counter's power (W) from its first update at or after ``since`` to its last one; None where the
    two are less than ``STEADY_BOOST_POWER_SPAN_S`` apart (one update period: a figure needs two updates)."""
    marks = [m for m in counter_updates(points) if m.at >= since]
    if len(marks) < 2 or marks[-1].at - marks[0].at < regimes.STEADY_BOOST_POWER_SPAN_S - 1e-6:
        return None
    return (marks[-1].energy_mj - marks[0].energy_mj) / 1e3 / (marks[-1].at - marks[0].at)


def temperature_slope(readings: Sequence[GpuReading | None], times: Sequence[float], span_s: float | None = None
                      ) -> float | None:
    """The least-squares slope (C/s) of the temperatures read over the last ``span_s`` (default
    ``STEADY_TEMP_SPAN_S``; what there is of it); None with fewer than three of them."""
    since = times[-1] - (regimes.STEADY_TEMP_SPAN_S if span_s is None else span_s) - 1e-6
    points = [(t, r.temperature_c) for t, r in zip(times, readings)
              if t >= since and r is not None and r.temperature_c is not None]
    if len(points) < 3 or points[-1][0] <= points[0][0]:
        return None
    return statistics.linear_regression([t for t, _ in points], [float(c or 0.0) for _, c in points]).slope


def _span_median(clocks: Sequence[tuple[float, float]], after: float, until: float) -> float | None:
    inside = [mhz for t, mhz in clocks if after + 1e-6 < t <= until + 1e-6]
    return statistics.median(inside) if inside else None


def over_limit(spans: tuple[float, float] | None, power_limit_w: float | None) -> bool:
    """Whether the energy counter's power in both spans (``counter_power_spans``) is at or over the enforced limit:
    both, as one 0.25 s span can misplace the counter's updates by a fifth where the timer does not queue."""
    return spans is not None and power_limit_w is not None and min(spans) >= power_limit_w


def at_power_cap(present: Sequence[GpuReading], max_clock: float | None, power_limit_w: float | None,
                 spans: tuple[float, float] | None) -> bool:
    """Whether the power controller holds the card, or is about to: the energy counter's power over the limit in
    both ``spans`` (``over_limit``), or ``sw_power_cap`` named in most readings and a second witness, the power (the
    counter's over the later span, else NVML's average) within ``STEADY_CAP_POWER_SHARE`` of the limit or the clock
    held below boost in most of them; without a limit, the reason in every reading."""
    capped = sum(1 for r in present if "sw_power_cap" in r.reasons)
    if power_limit_w is None:
        return capped == len(present)
    # A draw over the limit is the cap whether or not the readings caught the controller acting yet: on the H200 a
    # layer_norm read 718 W of 700 W at 1980 MHz with the reason not yet named, settled as a kernel below the cap,
    # and every window closed at 1935 MHz (not_met).
    if over_limit(spans, power_limit_w):
        return True
    counter_power_w = None if spans is None else spans[1]
    averaged = [float(r.power_w) for r in present if r.power_w is not None]
    power = counter_power_w if counter_power_w is not None else (statistics.median(averaged) if averaged else None)
    # The reason alone is not the cap; its second witness is the power near the limit, or, where a span caught the
    # controller's dip (an mm at 664 W of 700 on the H200 settled "below the cap" at 1455 MHz and every window
    # closed 2% off), the clock held below boost in most readings.
    held = max_clock is not None and 2 * sum(
        1 for r in present if r.sm_clock_mhz is not None and "gpu_idle" not in r.reasons
        and r.sm_clock_mhz < regimes.BURST_CLOCK_SHARE * max_clock) > len(present)  # an idle clock is not held
    return 2 * capped > len(present) and (held or (
        power is not None and power >= (1.0 - regimes.STEADY_CAP_POWER_SHARE) * power_limit_w))


def judge(readings: Sequence[GpuReading | None], max_clock: float | None = None,
          times: Sequence[float] | None = None, power_limit_w: float | None = None,
          counter: Sequence[CounterPoint] | None = None) -> Judgement:
    """Whether the settling readings (read at ``times``, default one chunk apart) settled: power by the energy
    counter (``counter``: its own reads between the readings, where it was polled; else the readings' values),
    temperature by its slope, and the SM clock (at the power cap, its median over spans; below it, the last
    ``STEADY_LAST_K`` readings) (core/regimes.py, steady)."""
    times = list(times) if times is not None else [
        (i + 1) * regimes.STEADY_CHUNK_MS / 1e3 for i in range(len(readings))]
    last = readings[-regimes.STEADY_LAST_K:]
    if len(last) < regimes.STEADY_LAST_K or any(r is None for r in last):
        return Judgement(False, unsettled=[f"fewer than {regimes.STEADY_LAST_K} readings"])
    present = [r for r in last if r is not None]
    clocks = [r.sm_clock_mhz for r in present]
    averaged = [r.power_w for r in present]
    has_counter = any(r.energy_mj is not None for r in present) or bool(counter)
    if all(c is None for c in clocks) and all(p is None for p in averaged) and not has_counter:
        return Judgement(None)
    out = Judgement(True, temperature_c=present[-1].temperature_c)
    points = counter if counter else reading_points(readings, times)
    spans = counter_power_spans(points)
    out.at_cap = at_power_cap(present, max_clock, power_limit_w, spans)
    if regimes.STEADY_CAP_POWER_SPAN_S != regimes.STEADY_POWER_SPAN_S:
        whole = counter_power_spans(points, regimes.STEADY_CAP_POWER_SPAN_S)  # the controller's swing, whole
        # A short span can catch the swing's dip: the power over the whole swing witnesses the cap as well.
        if out.at_cap or at_power_cap(present, max_clock, power_limit_w, whole):
            out.at_cap, spans = True, whole
    out.counter_power_w = None if spans is None else spans[1]
    # Over the limit with the clock free at boost in the clock spans: the controller's hold is coming, so the clock
    # the windows would start from is not the one they close at (the layer_norm above closed 45 MHz lower).  The
    # spans wait until every reading in them is held.
    if over_limit(spans, power_limit_w):
        free = [t for t, r in zip(times, readings) if free_at_boost([r], max_clock)]
        if free and free[-1] > times[-1] - 2 * regimes.STEADY_CAP_CLOCK_SPAN_S - 1e-6:
            out.unsettled.append(f"drawing {out.counter_power_w:.0f} W (energy counter) of the {power_limit_w:.0f} W "
                                 "limit at boost: the power controller has not held the clock yet")
    # Power: the counter's where it gives one, else NVML's average (which a kernel at boost need not wait for).
    # A kernel whose clock is free of its heat (at boost, no holding reason, below the limit) is not waited for
    # until its power is flat over two spans: its time cannot follow the power, and what the power still does is
    # small (on the H200 layer_norm's and softmax's counter power over 0.25-0.8 s lay within 2% of their power
    # after 8 s, as close as over 0.6-1.2 s, where the two spans had settled them: docs/explanation/regimes.md).
    if spans is None and (present[-1].energy_mj is not None or counter):
        out.counter_power_w = counter_power_since(points, times[0])
        if not clock_free_of_heat(last, max_clock, out.counter_power_w, power_limit_w):
            out.counter_power_w = None
            out.unsettled.append("the energy counter's updates do not cover two power spans yet")
    elif spans is not None:
        before, recent = spans
        if abs(recent - before) > regimes.STEADY_COUNTER_POWER_TOL * max(recent, before) and not clock_free_of_heat(
                last, max_clock, recent, power_limit_w):
            out.unsettled.append(f"power still moving {before:.0f} -> {recent:.0f} W (energy counter)")
    elif all(p is not None for p in averaged) and not free_at_boost(last, max_clock):
        values = [float(p or 0.0) for p in averaged]
        if not _spread_ok(values, regimes.STEADY_POWER_TOL):
            out.unsettled.append(f"power still moving {min(values):.0f}-{max(values):.0f} W (NVML average)")
    # Temperature: waited for where the power controller holds the clock or is about to (``clock_free_of_heat``).
    slope = temperature_slope(readings, times, regimes.STEADY_CAP_TEMP_SPAN_S if out.at_cap else None)
    if slope is not None and abs(slope) > regimes.STEADY_TEMP_SLOPE_C_S:
        moving = f"temperature still {'rising' if slope > 0 else 'falling'} {abs(slope):.1f} C/s"
        if clock_free_of_heat(last, max_clock, out.counter_power_w, power_limit_w):
            out.heat_note = f"{moving}, not waited for below the power cap"
        else:
            out.unsettled.append(moving)
    # The clock: the power controller's output at the cap, the card's own below it.
    if all(c is not None for c in clocks):
        values = [float(c or 0.0) for c in clocks]
        out.clock_mhz = statistics.median(values)
        if out.at_cap:
            timed = [(t, float(r.sm_clock_mhz)) for t, r in zip(times, readings)
                     if r is not None and r.sm_clock_mhz is not None]
            span = regimes.STEADY_CAP_CLOCK_SPAN_S
            end = times[-1]
            early, late = _span_median(timed, end - 2 * span, end - span), _span_median(timed, end - span, end)
            if times[-1] - times[0] < 2 * span - 1e-6 or early is None or late is None:
                out.unsettled.append("too few readings at the power cap for two clock spans")
            else:
                out.clock_mhz = late
                if abs(late - early) > regimes.STEADY_CAP_CLOCK_TOL * late:
                    out.unsettled.append(f"clock median at the power cap moved {early:.0f} -> {late:.0f} MHz")
        elif not _spread_ok(values, regimes.STEADY_CLOCK_TOL, regimes.STEADY_CLOCK_STEP_MHZ):
            out.unsettled.append(f"clock still moving {min(values):.0f}-{max(values):.0f} MHz")
    out.settled = not out.unsettled
    return out


def settled(readings: list[GpuReading | None], max_clock: float | None = None,
            times: Sequence[float] | None = None, power_limit_w: float | None = None) -> bool | None:
    """Whether the readings settled (``judge``); None when they carry neither SM clock nor power."""
    return judge(readings, max_clock, times, power_limit_w).settled


@dataclass
class Settling:
    """How a shape's settling ended: its condition, the seconds it ran, what was seen, the clock it settled at and
    whether that clock is the power controller's (at the cap)."""

    condition: str
    waited_s: float
    detail: str
    clock_mhz: float | None = None
    at_cap: bool = False
    counter: list[CounterPoint] = field(default_factory=list)  # the energy counter's polls (a queueing timer)


def power_limit_w(sampler: GpuSampler) -> float | None:
    """The enforced power limit the sampler's settings read, in watts; None where NVML gave none."""
    try:
        limit = sampler.settings().get("power_limit_w")
    except Exception:  # a sampler without settings: the cap is judged by its reason alone
        return None
    return float(limit) if isinstance(limit, (int, float)) and limit > 0 else None


def settle(timer: Windows, sampler: GpuSampler, cpu: bool, pace: Pace) -> Settling:
    """Run the kernel until its power, temperature and clock settle, at most ``STEADY_MAX_S``.

    A timer that queues is kept ``STEADY_AHEAD_S`` ahead while NVML is read (a full reading every chunk, the
    energy counter alone every ``ENERGY_POLL_S``), so the GPU never idles; another runs a chunk, then is read."""
    start = pace.clock()
    if sampler.not_recorded is not None:
        warmup = regimes.STEADY_CPU_WARMUP_S if cpu else regimes.STEADY_PLAIN_WARMUP_S
        timer.run_for(warmup)
        return Settling(regimes.NOT_CHECKED, round(pace.clock() - start, 4), f"a warm-up of {warmup:g} s by time")
    max_clock, limit = sampler.max_sm_clock_mhz(), power_limit_w(sampler)
    readings: list[GpuReading | None] = []
    times: list[float] = []
    counter: list[CounterPoint] = []
    chunk = regimes.STEADY_CHUNK_MS / 1e3
    next_reading = start + chunk
    while True:
        if timer.queues:
            poll_counter(timer, sampler, pace, counter)
            if pace.clock() < next_reading - 1e-9:
                continue
            next_reading += chunk
        else:
            timer.run_for(chunk)
        readings.append(sampler.read())
        times.append(pace.clock())
        elapsed = round(pace.clock() - start, 4)
        if elapsed < regimes.STEADY_MIN_S and elapsed < regimes.STEADY_MAX_S:
            continue
        seen = judge(readings, max_clock, times, limit, counter)
        if seen.settled is None:
            return Settling(regimes.NOT_CHECKED, elapsed, "NVML gave neither SM clock nor power", counter=counter)
        shown = "-" if seen.clock_mhz is None else f"{seen.clock_mhz:.0f}"
        if seen.settled:
            how = (" (at the power cap, the median over its readings)" if seen.at_cap else
                   " (at boost, no holding reason)" if free_at_boost(readings[-regimes.STEADY_LAST_K:], max_clock)
                   else "")
            return Settling(regimes.MET, elapsed, f"settled at {shown} MHz{how} after {elapsed:.3g} s{_state(seen)}",
                            seen.clock_mhz, seen.at_cap, counter)
        if elapsed >= regimes.STEADY_MAX_S:
            return Settling(regimes.NOT_MET, elapsed, f"not settled after {elapsed:.3g} s: "
                            f"{'; '.join(seen.unsettled)} (last {shown} MHz{_state(seen, ', ')})",
                            seen.clock_mhz, seen.at_cap, counter)


def poll_counter(timer: Windows, sampler: GpuSampler, pace: Pace, points: list[CounterPoint]) -> None:
    """Keep ``STEADY_AHEAD_S`` of the kernel queued, then one read of the energy counter into ``points`` and a sleep
    for what is left of ``ENERGY_POLL_S`` (none where the read took that long: on the H200 it took 3.4 ms)."""
    timer.keep_busy(regimes.STEADY_AHEAD_S)
    began = pace.clock()
    energy = sampler.energy_mj()
    returned = pace.clock()
    if energy is not None:
        points.append((began, returned, energy))
    if returned - began < regimes.ENERGY_POLL_S:
        pace.sleep(regimes.ENERGY_POLL_S - (returned - began))


def energy_span(timer: Windows, sampler: GpuSampler, pace: Pace, before: Sequence[CounterPoint],
                windows_began: float) -> EnergySpan | None:
    """The energy counter from its last update before the windows began (``before``: the settling's polls) to its
    first update after they ended and at least ``ENERGY_SPAN_MIN_S`` after that one, polled back to back with the
    kernel kept running; None where the settling saw no update, or none came within ``ENERGY_SPAN_WAIT_S`` of when
    one was due.  The GPU ran the kernel throughout, so the span's power is the windows' and its energy per call
    that power times the time per call."""
    windows_ended = pace.clock()
    timer.keep_busy(regimes.STEADY_AHEAD_S)  # the windows ended on a synchronize: the kernel runs on from here
    first = next((m for m in reversed(counter_updates(before)) if m.at <= windows_began), None)
    if first is None:
        return None
    due = max(windows_ended, first.at + regimes.ENERGY_SPAN_MIN_S)
    points: list[CounterPoint] = []
    while pace.clock() <= due + regimes.ENERGY_SPAN_WAIT_S:
        poll_counter(timer, sampler, pace, points)
        last = next((m for m in counter_updates(points) if m.at - m.error_s >= due), None)
        if last is not None:
            if last.energy_mj < first.energy_mj:
                return None  # the counter went back: no figure
            return EnergySpan(round(last.energy_mj - first.energy_mj, 3), round(last.at - first.at, 6),
                              round(first.error_s + last.error_s, 6))
    return None


def _state(seen: Judgement, lead: str = ": ") -> str:
    """``: 691 W (energy counter), 62 C``: what the settling saw last, where NVML gave it."""
    parts = ([] if seen.counter_power_w is None else [f"{seen.counter_power_w:.0f} W (energy counter)"]) + (
        [] if seen.temperature_c is None else [f"{seen.temperature_c:.0f} C"]) + (
        [] if seen.heat_note is None else [seen.heat_note])
    return lead + ", ".join(parts) if parts else ""


def still_settled(settling: Settling, state: GpuState) -> bool:
    """A steady window kept the settled state: at the power cap, the cap still named at its close and its clock within
    ``STEADY_CAP_WINDOW_CLOCK_TOL`` of the settled median; otherwise within the settling tolerance of it."""
    clock, after = settling.clock_mhz, state.after
    if clock is None or after is None or after.sm_clock_mhz is None:
        return True  # nothing to compare: the settling decides
    if settling.at_cap and "sw_power_cap" in after.reasons:
        return abs(after.sm_clock_mhz - clock) <= regimes.STEADY_CAP_WINDOW_CLOCK_TOL * clock
    return abs(after.sm_clock_mhz - clock) <= max(regimes.STEADY_CLOCK_STEP_MHZ, regimes.STEADY_CLOCK_TOL * clock)


def run_regime(regime: str, timer: Windows, sampler: GpuSampler, count: int, cpu: bool,
               pace: Pace | None = None) -> RegimeTiming:
    """``count`` timed windows of ``timer`` under ``regime``, each with its GPU state and condition."""
    pace = pace or Pace()
    out = RegimeTiming(regime, timer.timer, marker=timer.marker)

    def timed(runs: int, warm_s: float) -> list[tuple[list[float], int, GpuState]]:
        """``runs`` windows back to back, each with the state between its two edges."""
        edges: list[Edge] = []
        windows = timer.windows(runs, lambda: edges.append(sampler.start()), warm_s)
        states = [sampler.between(a, b) for a, b in zip(edges, edges[1:])]
        out.samples_ms.extend(ms for samples, _ in windows for ms in samples)
        return [(samples, calls, state) for (samples, calls), state in zip(windows, states, strict=True)]

    spent = out.spent_s
    if regime == regimes.BURST:
        max_clock = sampler.max_sm_clock_mhz()
        spent.update(settle=0.0, windows=0.0)
        for _ in range(count):
            began = pace.clock()
            condition, waited, detail = wait_for_boost(sampler, max_clock, pace)
            gap_ended = pace.clock()
            # A GPU's clock ramps up from idle in an untimed run right before the window, not inside it.
            [(samples, calls, state)] = timed(1, 0.0 if cpu else regimes.BURST_WARM_S)
            out.windows.append(TimedWindow(condition, waited, calls, len(samples), state, detail))
            spent["settle"] += gap_ended - began
            spent["windows"] += pace.clock() - gap_ended
        return out
    began = pace.clock()
    settling = settle(timer, sampler, cpu, pace)
    windows_began = pace.clock()
    spent["settle"] = windows_began - began
    spans = bool(settling.counter)
    timed_windows = timed(count, 0.0)
    spent["windows"] = pace.clock() - windows_began
    for index, (samples, calls, state) in enumerate(timed_windows):
        window = TimedWindow(settling.condition, settling.waited_s if index == 0 else 0.0, calls, len(samples), state,
                             settling.detail)
        if settling.condition == regimes.MET and not still_settled(settling, state):
            window.condition = regimes.NOT_MET
            after = state.after
            left = "" if not settling.at_cap or after is None or "sw_power_cap" in after.reasons else \
                ", off the power cap"
            window.detail = (f"{settling.detail}; the window ended at "
                             f"{after.sm_clock_mhz if after is not None else 0:.0f} MHz{left}")
        out.windows.append(window)
    if spans:
        windows_ended = pace.clock()
        try:
            out.energy_span = energy_span(timer, sampler, pace, settling.counter, windows_began)
        finally:
            timer.drain()  # the next shape's inputs may take the memory the queued replays still read
            spent["energy_span"] = pace.clock() - windows_ended
    return out
