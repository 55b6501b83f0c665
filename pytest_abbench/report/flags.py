"""Named conditions under which a shape's delta is no conclusion, and how the report finds them.

A flag names a condition the rounds show and the verdict rule cannot see:
the t-test assumes every round draws from one distribution, and a trend over
the rounds (``drift``) or processes that land in one of two places
(``bimodal``) break that.  Every flag a shape can carry, these and the GPU's
state (``report/gpustate.py`` finds those) and the in-process reference's
(``report/reference.py``), has one entry in ``FLAGS``: its name as
report.json, report.md and the terminal carry it, whether it withholds a
verdict, and its wording.  A GPU flag keeps the verdict: the verdict line
says under which condition it holds.  ``reference_differs`` keeps it too: a
warning beside the verdict.

A finding withholds a shape's plain verdict (faster, slower, same) when it
could have produced it: a direction not clearly larger than the condition
(``WITHHOLD_FACTOR``), or a ``same`` that the condition would carry past the
margin.  A larger effect stands, and the op's line still names the condition.  An
``inconclusive`` shape carries the flags that apply to it, as the reason it
may stay so.  ``docs/verdicts.md`` has the simulator's figures for each rule.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass

from pytest_abbench.report.stats import (SPLIT_LOOSE, SPLIT_LOOSE_LEVEL, SPLIT_STRICT, Judgement, Trend, bh_adjust,
                                         best_split, binomial_tail, pct, side_trends, split_quantile)

@dataclass(frozen=True)
class Flag:
    """One flag a shape can carry: its name (in report.json, report.md and the terminal), whether it withholds a
    verdict it could have made, what it means, and the condition a verdict holds under while it is set."""

    name: str
    withholds: bool
    meaning: str
    holds_under: str  # "holds under <this>": how the verdict line names the condition (GPU flags); "": not named
    gpu: bool = False  # found in the GPU state of the timed windows (report/gpustate.py shows it on the GPU line)


# The sides' median SM clocks differing by more than this share: a compute-bound delta moves by about the clock gap
# (docs/reference/report.md, "GPU state", has the figures), and 1% is half the default margin of 2%.
CLOCKS_DIFFER_PCT = 1.0

DRIFT = "drift"
BIMODAL = "bimodal"
POWER_CAPPED = "power_capped"
THERMAL = "thermal"
HW_SLOWDOWN = "hw_slowdown"
CLOCKS_DIFFER = "clocks_differ"
CLOCKS_NOT_SETTLED = "clocks_not_settled"
BOOST_NOT_REACHED = "boost_not_reached"
REFERENCE_DIFFERS = "reference_differs"
# Every flag, in the order reports list them: the one owner of their names and wording.
FLAGS: dict[str, Flag] = {flag.name: flag for flag in (
    Flag(DRIFT, True, "a trend over the rounds, in the delta or in one side's medians: the delta depends on when it "
                      "was measured", "a trend over the rounds"),
    Flag(BIMODAL, True, "the per-process medians fall in two separate groups: the delta depends on which group each "
                        "process landed in", "processes in two groups"),
    Flag(POWER_CAPPED, False, "NVML named the software power cap (sw_power_cap) at a timed window: the card held its "
                              "clocks down to stay under its power limit, and the delta is the one of that regime",
         "the power cap", gpu=True),
    Flag(THERMAL, False, "NVML named a thermal slowdown (hw_thermal_slowdown or sw_thermal_slowdown) at a timed "
                         "window", "a thermal slowdown", gpu=True),
    Flag(HW_SLOWDOWN, False, "NVML named a hardware slowdown (hw_slowdown or hw_power_brake) at a timed window",
         "a hardware slowdown", gpu=True),
    Flag(CLOCKS_DIFFER, False, f"the sides' median SM clocks differ by more than {CLOCKS_DIFFER_PCT:g}%: a "
                               "compute-bound delta moves by about as much", "side clocks that differ", gpu=True),
    Flag(CLOCKS_NOT_SETTLED, False, "a steady window was timed before SM clock and power settled, or its clock left "
                                    "the settled one: the delta mixes the ramp with the steady state",
         "clocks not settled", gpu=True),
    Flag(BOOST_NOT_REACHED, False, "a burst window began before the card left its power cap or slowdown (the idle "
                                   "wait ran out): the delta is not wholly one of boost clocks",
         "a card not back at boost", gpu=True),
    Flag(REFERENCE_DIFFERS, False, "the in-process reference (--ab-reference: both sides in one process, interleaved "
                                   "in pairs) lies outside the cells' interval: the cells time separate processes, "
                                   "each side at the clock its own load settles to, the cost a user pays; the "
                                   "reference one process, its pairs side by side (at a power cap each window after "
                                   "its own side's settling; the op's reference line gives both clocks): worth a "
                                   "look (docs/verdicts.md)",
         ""),
)}
WITHHOLDING = tuple(name for name, flag in FLAGS.items() if flag.withholds)


def ordered(names: set[str] | list[str]) -> list[str]:
    """``names`` in the registry's order."""
    return [name for name in FLAGS if name in names]


def holds_under(names: list[str]) -> str:
    """The verdict line's note for flags that keep the verdict: ``holds under the power cap, side clocks that
    differ``; empty when none is set."""
    kept = [FLAGS[name].holds_under for name in names
            if name in FLAGS and not FLAGS[name].withholds and FLAGS[name].holds_under]
    return f"holds under {', '.join(kept)}" if kept else ""


FLAG_ALPHA = 0.05  # the level of each finding's test, per op (Bonferroni across its tests, BH across shapes)
DRIFT_MIN_FRACTION = 0.25  # of the margin: a trend that moves a series less over the whole campaign is no finding
BIMODAL_MIN_FRACTION = 0.5  # of the margin: two groups closer than this are no finding
BIMODAL_OP_ALPHA = 0.001  # the op-wide count's binomial level: stricter, as shapes share their processes
MIN_DRIFT_ROUNDS = 6  # fewer: a line with any one round left out rests on 4 rounds a side
MIN_SPLIT_ROUNDS = 4  # two groups of two
MIN_PROCESS_GROUP = 3  # rounds in the smaller group of an op's processes that split with all shapes


@dataclass(frozen=True)
class Finding:
    """One condition found in an op or a shape."""

    flag: str  # a key of FLAGS that withholds (WITHHOLDING)
    size: float  # log units: how far it can move a delta (a trend: over the campaign; two groups: their distance)
    text: str  # what was seen: "side B drifts +0.41%/round"


@dataclass(frozen=True)
class ShapeSeries:
    """One shape's per-round values in round order, in log units, with each side's measurement noise."""

    log_a: list[float]  # ln of side A's median per round
    log_b: list[float]
    se_a: float  # standard error of one of side A's medians (report.stats.median_se)
    se_b: float

    @property
    def log_ratios(self) -> list[float]:
        return [b - a for a, b in zip(self.log_a, self.log_b)]


def _per_round(text: str, slope: float) -> str:
    return f"{text} {pct(slope):+.2f}%/round"


def _trend(side_a: list[float], side_b: list[float], floor: float,
           min_change: float) -> tuple[float, Finding | None]:
    """The trend tests of one pair of series (``stats.side_trends``): each side's, at half of FLAG_ALPHA each.

    A side's trend counts unless the other side trends the same way (both at FLAG_ALPHA): when both move together
    the machine moved, and alternating sides cancel it in the delta, whose trend then decides.  Every finding
    needs one side's trend at half of FLAG_ALPHA (the returned p is never below twice the smaller side's p), so
    by the union bound a series pair without any trend gets one at most FLAG_ALPHA of the time.  Returns that p
    and the finding.
    """
    n = len(side_a)
    if n < MIN_DRIFT_ROUNDS:
        return 1.0, None
    trend_a, trend_b, trend_delta = side_trends(side_a, side_b, floor)

    def material(trend: Trend) -> float:
        return trend.p if abs(trend.slope) * (n - 1) >= min_change else 1.0

    p_a, p_b = material(trend_a), material(trend_b)
    sides = min(1.0, 2.0 * min(p_a, p_b))
    if trend_a.p < FLAG_ALPHA and trend_b.p < FLAG_ALPHA and (trend_a.slope > 0) == (trend_b.slope > 0):
        p, trend, what = max(sides, min(1.0, 2.0 * material(trend_delta))), trend_delta, "the delta drifts"
    else:
        p, trend, what = (sides, trend_a, "side A drifts") if p_a <= p_b else (sides, trend_b, "side B drifts")
    if p >= 1.0:
        return 1.0, None
    return p, Finding(DRIFT, abs(trend.slope) * (n - 1), _per_round(what, trend.slope))


def _floor(shapes: list[ShapeSeries]) -> float:
    """The smallest standard deviation of the mean of ``shapes``' medians in one round, pooled over the sides."""
    return math.sqrt(math.fsum(s.se_a ** 2 + s.se_b ** 2 for s in shapes) / 2.0) / len(shapes)


def _mean_series(series: list[list[float]]) -> list[float]:
    return [statistics.fmean(values) for values in zip(*series)]


def _side_splits(shapes: list[ShapeSeries], side: str,
                 min_gap: float) -> list[tuple[float, tuple[frozenset[int], bool]]]:
    """(gap, (rounds of the smaller group, whether it is the high one)) of each shape whose medians on ``side``
    split more cleanly than one mode gives ``SPLIT_LOOSE_LEVEL`` of the time (``SPLIT_LOOSE``), by at least
    ``min_gap``."""
    found = []
    for shape in shapes:
        values, se = (shape.log_a, shape.se_a) if side == "A" else (shape.log_b, shape.se_b)
        split = best_split(values, se)
        if split is not None and split.gap >= min_gap and split.ratio <= split_quantile(len(values), SPLIT_LOOSE):
            odd = statistics.fmean(values[i] for i in split.minority)
            rest = statistics.fmean(v for i, v in enumerate(values) if i not in split.minority)
            found.append((split.gap, (split.minority, odd > rest)))
    return found


def op_findings(shapes: list[ShapeSeries], margin_pct: float) -> list[Finding]:
    """Conditions of the op as a whole, which every shape shares: its processes drift, or fall in two groups.

    * drift: the trend tests on the op's per-round means over shapes (a process that drifts moves them all);
    * two groups per shape: more shapes than chance (binomial, ``BIMODAL_OP_ALPHA``) whose medians on a side
      split cleanly (``SPLIT_LOOSE``), not counting the rounds that split every shape alike, the same rounds out
      on the same side (one process that moved all shapes: a bad process, which the rounds already see as such);
      it is what withholds a shape whose few rounds all landed in opposite modes on the two sides;
    * two groups per process: the per-round mean over shapes (each centred on its own median) splits cleanly
      (``SPLIT_STRICT``) into groups of at least ``MIN_PROCESS_GROUP`` rounds: the processes of a side land in
      one of two places with every shape; two rounds apart are as likely a bad process and a warm first round.
    """
    if not shapes:
        return []
    margin = math.log1p(margin_pct / 100.0)
    n = len(shapes[0].log_a)
    found = []
    p, drift = _trend(_mean_series([s.log_a for s in shapes]), _mean_series([s.log_b for s in shapes]),
                      _floor(shapes), DRIFT_MIN_FRACTION * margin)
    if drift is not None and p < FLAG_ALPHA and len(shapes) > 1:  # one shape: shape_findings tests the same
        found.append(Finding(drift.flag, drift.size, drift.text + " (the op's shapes together)"))
    min_gap = BIMODAL_MIN_FRACTION * margin
    splits, gaps = 0, []
    for side in ("A", "B"):
        side_found = _side_splits(shapes, side, min_gap)
        # One process that moved all its shapes puts the same rounds out, on the same side, in every shape.  Modes
        # of each shape's own put a round out high in some shapes and low in others: with 3 rounds, one round out
        # of three is the smaller group of half the shapes or more by chance alone (issue 46).
        common = Counter(minority for _, minority in side_found).most_common(1)
        shared = common[0][0] if common and 2 * common[0][1] >= len(shapes) else None
        kept = [gap for gap, minority in side_found if minority != shared]
        splits += len(kept)
        gaps += kept
    if splits >= 2 and binomial_tail(2 * len(shapes), splits, SPLIT_LOOSE_LEVEL) < BIMODAL_OP_ALPHA:
        gap = statistics.median(gaps)
        found.append(Finding(BIMODAL, gap, f"in {splits} of {2 * len(shapes)} shape-sides the processes fall in two "
                                           f"groups (median {pct(gap):.1f}% apart)"))
    if n >= 2 * MIN_PROCESS_GROUP and len(shapes) > 1:  # one shape: its own test (shape_findings) is this one
        for side in ("A", "B"):
            values = [s.log_a if side == "A" else s.log_b for s in shapes]
            centred = [[v - statistics.median(series) for v in series] for series in values]
            se = statistics.median(s.se_a if side == "A" else s.se_b for s in shapes) / math.sqrt(len(shapes))
            split = best_split(_mean_series(centred), se)
            if (split is not None and split.smaller >= MIN_PROCESS_GROUP and split.gap >= min_gap
                    and split.ratio <= split_quantile(n, SPLIT_STRICT)):
                rounds = ", ".join(str(r + 1) for r in sorted(split.minority))
                found.append(Finding(BIMODAL, split.gap, f"side {side}'s processes fall in two groups "
                                                         f"{pct(split.gap):.1f}% apart with all shapes (rounds "
                                                         f"{rounds} vs the rest)"))
    return found


def shape_findings(shapes: list[ShapeSeries], margin_pct: float) -> list[list[Finding]]:
    """Each shape's own conditions: a trend (its corrected p after Benjamini-Hochberg across the op's shapes),
    or one side's medians in two groups of at least two rounds each, unlikely (``SPLIT_STRICT``) from one mode."""
    margin = math.log1p(margin_pct / 100.0)
    trends = [_trend(s.log_a, s.log_b, _floor([s]), DRIFT_MIN_FRACTION * margin) for s in shapes]
    adjusted = bh_adjust([p for p, _ in trends])
    found: list[list[Finding]] = []
    for shape, (_, trend), p in zip(shapes, trends, adjusted):
        own = [trend] if trend is not None and p is not None and p < FLAG_ALPHA else []
        for side, values, se in (("A", shape.log_a, shape.se_a), ("B", shape.log_b, shape.se_b)):
            split = best_split(values, se)
            if (split is not None and len(values) >= MIN_SPLIT_ROUNDS and split.smaller >= 2
                    and split.gap >= BIMODAL_MIN_FRACTION * margin
                    and split.ratio <= split_quantile(len(values), SPLIT_STRICT)):
                own.append(Finding(BIMODAL, split.gap, f"side {side}'s processes fall in two groups "
                                                       f"{pct(split.gap):.1f}% apart ({split.smaller} and "
                                                       f"{len(values) - split.smaller} rounds)"))
        found.append(own)
    return found


# How large a direction must be, in multiples of a finding's size, before the finding cannot have made it.  A trend
# of size c (over the campaign) spreads the rounds' deltas over mean +- c/2: a direction stands when that line stays
# clear of zero by a factor of two, |mean| > c.  Two groups c apart move a round's delta by up to c, and rounds that
# landed unevenly move the mean by up to c: a direction stands at |mean| > 2c.
WITHHOLD_FACTOR = {DRIFT: 1.0, BIMODAL: 2.0}


def withholds(finding: Finding, judgement: Judgement, log_ratios: list[float], margin_pct: float) -> bool:
    """Whether ``finding`` could have produced ``judgement``: a direction no larger than ``WITHHOLD_FACTOR`` times
    its size, a ``same`` it would carry past the margin.  Any finding applies to an ``inconclusive`` shape (it may
    be why)."""
    mean = abs(statistics.fmean(log_ratios))
    if judgement.verdict in ("faster", "slower"):
        return mean <= WITHHOLD_FACTOR[finding.flag] * finding.size
    if judgement.verdict == "same":
        return mean + finding.size >= math.log1p(margin_pct / 100.0)
    return True


def apply(judgement: Judgement, log_ratios: list[float], findings: list[Finding],
          margin_pct: float) -> tuple[Judgement, list[str]]:
    """The shape's judgement once ``findings`` are weighed, and its flags (names in ``FLAGS`` order).

    A withheld verdict becomes ``inconclusive`` whose note says what is known and why it is no conclusion:
    ``slower in 8 of 10 rounds; side B drifts +0.40%/round``.
    """
    relevant = [f for f in findings if withholds(f, judgement, log_ratios, margin_pct)]
    if not relevant:
        return judgement, []
    flags = ordered({f.flag for f in relevant})
    texts = list(dict.fromkeys(f.text for f in relevant))
    known = judgement.note or _known(judgement, log_ratios, margin_pct)
    return Judgement("inconclusive", note="; ".join([known, *texts])), flags


def _known(judgement: Judgement, log_ratios: list[float], margin_pct: float) -> str:
    """What the rounds say before a flag is weighed: ``slower in 8 of 10 rounds``, or the interval of a ``same``."""
    if judgement.verdict == "same":
        return f"90% interval inside +-{margin_pct:g}%"
    mean = statistics.fmean(log_ratios)
    direction = "slower" if mean > 0 else "faster"
    return f"{direction} in {sum(1 for d in log_ratios if (d > 0 if mean > 0 else d < 0))} of {len(log_ratios)} rounds"
