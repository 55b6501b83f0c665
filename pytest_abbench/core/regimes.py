"""Timing regimes: the state of the GPU each timed window is taken in (``--ab-regime``), a caliber axis.

A compute-bound kernel's delta is a property of the regime: at the power cap
the kernel that spends more energy per operation also runs at lower clocks
(docs/explanation/regimes.md has the H200 figures).  Each regime names what
it measures; the cell child (``child/regime.py``) runs it and records per
window whether its condition held; the report names it in its header.
"""

from __future__ import annotations

from typing import Callable

BURST = "burst"
STEADY = "steady"
BOTH = "both"
REGIMES = (BURST, STEADY)  # what a cell times under; --ab-regime both times each shape under both, in this order
REGIME_CHOICES = (BURST, STEADY, BOTH)
# steady: measured on the H200, its rounds agree: kernels under 10 us moved 0.0-0.8% between processes, where
# burst's moved 1-14% (an unchanged bisection step stayed undecided at 8 rounds); where the power cap holds, its
# shapes are flagged and keep their verdict. burst is one option away, and `both` shows where the two differ
# (docs/explanation/regimes.md, "Why steady is the default").
DEFAULT_REGIME = STEADY

WHAT_IT_MEASURES: dict[str, str] = {
    BURST: "short timed windows, each after an idle gap long enough that the card left its power cap: both sides "
           "at boost clocks, what a latency-bound call (inference) sees",
    STEADY: "timed once the kernel has run until its SM clock settled and, unless that clock is at boost below the "
            "power limit, its power (by the energy counter) and temperature too (at the power cap, the clock's "
            "median): what a long busy stretch (a training step) sees, at the power cap for a compute-bound kernel",
}
WHY_IT_MATTERS = ("a compute-bound delta depends on the regime: at the power cap the kernel that spends more energy "
                  "per call also runs at lower clocks, so its steady delta can be several times its burst delta, and "
                  "both are true")


def cell_regimes(regime: str) -> tuple[str, ...]:
    """The regimes a cell times each shape under, in order: ``both`` is burst, then steady."""
    return REGIMES if regime == BOTH else (regime,)


def window_ms(regime: str, direct_rep_ms: float) -> float:
    """How long one timed window of ``regime`` lasts: a steady window is ``--ab-direct-rep`` long, a burst window at
    most ``BURST_WINDOW_MS`` (a longer one reaches the power cap)."""
    return direct_rep_ms if regime == STEADY else min(BURST_WINDOW_MS, direct_rep_ms)


# How a window's condition reads in results.jsonl (``TimedWindow.condition``).
MET = "met"  # burst: the card left the power cap before the window; steady: power, temperature and clock settled
NOT_MET = "not_met"  # the bounded wait ended first: the window was timed anyway, and the report flags it
NOT_CHECKED = "not_checked"  # no GPU state (the interpreter, no NVML): a plain gap or a warm-up by time instead

# burst: between windows, poll NVML until no power cap or slowdown is named and the SM clock is back near its
# maximum (or the card idles), at least BURST_MIN_GAP_S, at most BURST_MAX_WAIT_S.  A window lasts about
# BURST_WINDOW_MS: on the H200 a 4 ms window of a 700 W mm stayed at 1980 MHz, a 40 ms one reached the cap.
BURST_WINDOW_MS = 4
BURST_MIN_GAP_S = 0.02
BURST_MAX_WAIT_S = 2.0
BURST_POLL_S = 0.005
BURST_CLOCK_SHARE = 0.97  # of the SM clock's maximum: "back at boost" (NVML's clock steps are 15 MHz)
BURST_PLAIN_GAP_S = 0.05  # no GPU state to check: the gap the cell waits instead
# An idle card drops its SM clock (405 MHz on the H200) and the next launch raises it again: a window that began on
# an idle card timed the ramp, which made small kernels' rounds differ by 5-14% on the H200 (a 1.6 us copy). So the
# kernel runs this long untimed right before each burst window, with no gap (the graph timer queues the warm-up
# replays and the window together); 2 ms of a 700 W mm is far from the power controller's reach (a 4 ms window
# stayed at 1980 MHz).
BURST_WARM_S = 0.002
# NVML reasons that keep a card below boost: a burst window waits until none is named.
HOLDING_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake")

# steady: run the kernel in chunks of STEADY_CHUNK_MS, reading NVML after each, until what the card converges to has
# settled, after at least STEADY_MIN_S and at most STEADY_MAX_S (child/regime.py ``judge``):
# - power, from the energy counter: its increase over time across each of two adjacent spans at least
#   STEADY_POWER_SPAN_S long, each from one counter update to another, the two within STEADY_COUNTER_POWER_TOL.
#   NVML's power figure averages over up to a second and lags a kernel that just started (layer_norm on the H200:
#   412 W by it, about 640 W by the counter),
#   so it decides only where the counter gives nothing: the last STEADY_LAST_K readings within STEADY_POWER_TOL,
#   skipped while they all show the clock at boost (BURST_CLOCK_SHARE of its maximum) with no holding reason.
# - temperature: its least-squares slope over the last STEADY_TEMP_SPAN_S of readings at most STEADY_TEMP_SLOPE_C_S
#   either way, where the power controller holds the clock.  A kernel at boost with no holding reason and its
#   counter power below the limit is not held by it (its clock cannot follow the die's heat short of the cap or a
#   thermal slowdown, both named by NVML): on the H200 that wait was most of a boost shape's settling (1.2 to 2 s of
#   layer_norm 16384x1024's 1.95-2.7 s), and the detail says it passed.
# - the SM clock.  Below the power cap the last STEADY_LAST_K readings lie within STEADY_CLOCK_TOL of their median
#   (at least one 15 MHz step).  At the cap (``sw_power_cap`` named in most of the last K readings, and the
#   counter's power within STEADY_CAP_POWER_SHARE of the enforced limit or the clock below BURST_CLOCK_SHARE of its
#   maximum in most of them; without a limit, the reason in every one of them)
#   the controller holds the power and the clock is its output: on the H200 a cuBLAS mm at 700 W moved between
#   1410 and 1500 MHz from one reading to the next, so the last K readings never agreed within 1% and the mm met the
#   condition in 0 of 30, 0 of 40 and 0 of 40 windows on three machines.  There the medians of two adjacent spans of
#   STEADY_CAP_CLOCK_SPAN_S must agree within STEADY_CAP_CLOCK_TOL.
# The energy counter updated every 100 ms on the H200 (shortest 86-97 ms, p90 about 102 ms), and its increase over
# time across 100 ms or more matched the long-run power within 5% (691 W for the mm, 299 W for an elementwise
# kernel, 119 W idle).  A single 50 ms chunk sees 0 or 1 update: never a figure.
STEADY_CHUNK_MS = 50
STEADY_LAST_K = 5
STEADY_CLOCK_TOL = 0.01
STEADY_CLOCK_STEP_MHZ = 15.0
STEADY_POWER_TOL = 0.03  # NVML's averaged figure, where there is no counter
STEADY_POWER_SPAN_S = 0.25  # two counter updates (100 ms, p90 about 102 ms) and a chunk: every span sees two
STEADY_COUNTER_POWER_TOL = 0.05  # the counter's figure over a span matched the long-run power within 5%
# At the cap the counter read 691 W against the 700 W limit for the mm (a layer_norm 698 W): within the counter's
# own 5% of the limit.
STEADY_CAP_POWER_SHARE = 0.05
# Ten readings a span: a median over them moves far less than the 1410-1500 MHz single readings wander, and an even
# count keeps a clock that alternates between two steps at their middle in every span.
STEADY_CAP_CLOCK_SPAN_S = 0.5
# Half the spread of single readings at the cap (1410-1500 MHz, about 6% of their middle): a span median that moves
# less than that is the controller's dither; one that moves more is a drift (the clock sinking as the card heats).
STEADY_CAP_CLOCK_TOL = 0.03
# A capped window stays met while the cap holds and its closing reading (one reading, not a median) lies within
# this of the settled median: the single readings' +-3% about their middle, with room for the median's own error.
STEADY_CAP_WINDOW_CLOCK_TOL = 0.05
# NVML gives whole degrees: over a 1 s span one step of a degree reads as a least-squares slope of up to 1.5 C/s
# (6p(1-p) C/s for a step at share p of the span), no step as 0, two steps at least 1.5 C/s.  0.5 C/s lets a span
# pass whose readings did not step, or stepped only near its ends, and stops a card heating by two degrees a second
# or more (every span holds two steps): a heavy kernel's first seconds on a cool card.  At about a degree a second
# a span passes once its step falls near an end; a slower drift passes; the report's first/last window
# temperatures show what remained.
STEADY_TEMP_SPAN_S = 1.0
STEADY_TEMP_SLOPE_C_S = 0.5
# At the cap the controller swings power (620-750 W) and with it the clock and the die's temperature about once a
# second on the H200, so spans shorter than a swing agree only by chance (docs/evidence/h200-settle-trace.txt).
# The power and temperature spans judged at the cap: the same as below it until a longer pair is chosen on
# recorded readings (benchmarks/settle_trace.py --record, benchmarks/settle_replay.py --set) and run on the card.
# STEADY_MIN_S: the K readings every judgement needs.  A kernel whose clock is free of its heat (at boost, no
# holding reason, the counter's power below the limit) settles there, its power read over one update period
# (STEADY_BOOST_POWER_SPAN_S, from the first update after the first reading); any other waits for two power spans.
# Each is derived from the constants above by this table, here at import and by settle_replay.py after a --set.
STEADY_BOOST_POWER_SPAN_S = 0.08  # the counter's shortest update period on the H200 was 86-97 ms
STEADY_DERIVED: dict[str, Callable[[], float]] = {
    "STEADY_CAP_POWER_SPAN_S": lambda: STEADY_POWER_SPAN_S,
    "STEADY_CAP_TEMP_SPAN_S": lambda: STEADY_TEMP_SPAN_S,
    "STEADY_MIN_S": lambda: STEADY_LAST_K * STEADY_CHUNK_MS / 1e3,
}
STEADY_CAP_POWER_SPAN_S = STEADY_DERIVED["STEADY_CAP_POWER_SPAN_S"]()
STEADY_CAP_TEMP_SPAN_S = STEADY_DERIVED["STEADY_CAP_TEMP_SPAN_S"]()
STEADY_MIN_S = STEADY_DERIVED["STEADY_MIN_S"]()
STEADY_MAX_S = 10.0
# A timer that queues (the graph timer) keeps STEADY_AHEAD_S of replays waiting on the GPU while the steady run reads
# NVML, so the kernel runs back to back as in its windows: reading after each synchronous 50 ms chunk left the GPU
# idle for each read (about 3 ms, 6% of the settling), a lighter load than the windows put on the card.  Meanwhile
# the energy counter alone is read back to back (at most every ENERGY_POLL_S; one read took 3.4 ms on the H200),
# and each of its updates is placed within a few ms, not within a chunk: a span's end read up to a chunk late made a
# 0.25 s span's power uncertain by a fifth (a mm at its 700 W cap read "power still moving 663 -> 778 W").  After
# the last window the counter is polled until an update past the windows and at least ENERGY_SPAN_MIN_S after the
# last update before them (waiting at most ENERGY_SPAN_WAIT_S, three update periods, past that): the span between
# the two is the power and energy of the windows (child/regime.py ``energy_span``).  Half a second keeps the
# updates' placement (about 4 ms at each end on the H200) within 2% of the span.
STEADY_AHEAD_S = 0.03
ENERGY_POLL_S = 0.002
ENERGY_SPAN_MIN_S = 0.5
ENERGY_SPAN_WAIT_S = 0.35
STEADY_PLAIN_WARMUP_S = 2.0  # no GPU state to check: the kernel runs this long before the windows (GPU)
STEADY_CPU_WARMUP_S = 0.2  # the interpreter: a warm-up by time (wall-clock numbers only describe this machine)
