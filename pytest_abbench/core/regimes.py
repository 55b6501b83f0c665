"""Timing regimes: the state of the GPU each timed window is taken in (``--ab-regime``), a caliber axis.

A compute-bound kernel's delta is a property of the regime: at the power cap
the kernel that spends more energy per operation also runs at lower clocks
(docs/explanation/regimes.md has the H200 figures).  Each regime names what
it measures; the cell child (``child/regime.py``) runs it and records per
window whether its condition held; the report names it in its header.
"""

from __future__ import annotations

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
    STEADY: "timed once the kernel has run until SM clock and power settled (or it held boost clocks with no "
            "holding reason): what a long busy stretch (a training step) sees, at the power cap for a compute-bound "
            "kernel",
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
MET = "met"  # burst: the card left the power cap before the window; steady: settled (clock and power, or at boost)
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

# steady: run the kernel in chunks of STEADY_CHUNK_MS, reading NVML after each, until the last STEADY_LAST_K
# readings' SM clocks lie within STEADY_CLOCK_TOL (share of their median, at least one 15 MHz step) and their powers
# within STEADY_POWER_TOL, after at least STEADY_MIN_S and at most STEADY_MAX_S.  NVML's power figure averages
# over up to a second, so while a kernel's draw changes its readings keep moving for about that long.
# Readings that all show the clock at boost (BURST_CLOCK_SHARE of its maximum) with no holding reason settle the
# card without waiting for power: the power controller acts within tens of milliseconds (a 40 ms window of a 700 W
# mm reached the cap on the H200), so K readings over 250 ms at boost mean the kernel runs below the cap, and what
# still climbs is NVML's average.  Waiting for it cost topk's shapes 0.8-1.5 s each on the H200.
STEADY_CHUNK_MS = 50
STEADY_LAST_K = 5
STEADY_CLOCK_TOL = 0.01
STEADY_CLOCK_STEP_MHZ = 15.0
STEADY_POWER_TOL = 0.03
STEADY_MIN_S = STEADY_LAST_K * STEADY_CHUNK_MS / 1e3  # K readings, each after a chunk of running
STEADY_MAX_S = 10.0
STEADY_PLAIN_WARMUP_S = 2.0  # no GPU state to check: the kernel runs this long before the windows (GPU)
STEADY_CPU_WARMUP_S = 0.2  # the interpreter: a warm-up by time (wall-clock numbers only describe this machine)
