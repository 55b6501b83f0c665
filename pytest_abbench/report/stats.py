"""The statistics the report judges with: t intervals and tests, the multiplicity correction, the verdict rule.

Plain floats and the standard library only (no scipy, no numpy): the report
runs in the pytest session and in ``abbench summary`` on machines without either.

The rule (chosen on the seeded simulator, ``benchmarks/verdict_sim.py``;
``docs/verdicts.md`` has its table):

* a direction (``faster``/``slower``) needs the one-sample t-test of the
  per-round log ratios significant at 5% after Benjamini-Hochberg across the
  op's shapes, and more than half of the rounds on that side (``rounds_needed``:
  2 of 2, 2 of 3, 3 of 4, 4 of 6, 6 of 10).  Requiring every round, or a sign
  test's count (6 of 6, 7 of 7, 7 of 8, 9 of 10), made power fall from 6 to 7
  rounds and from 8 to 10 on the simulator; a majority never did, and a shape
  whose effect sits near zero has no significant t-test to begin with;
* ``same`` is an equivalence claim (TOST at 5%): the 90% interval inside
  +-margin; a significant effect inside the margin is a direction marked
  ``within_margin``;
* an A/A control never sets the margin: when its interval excludes zero, the
  machine shows a bias between processes, and directions no larger than it
  are withheld.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache

ALPHA = 0.05  # the level of every test of the rule: t-test (after BH), sign test, TOST
DIRECTION_LEVEL = 0.95  # the interval printed next to a direction (two-sided test at ALPHA)
SAME_LEVEL = 0.90  # the interval of the equivalence test: two one-sided tests at ALPHA


def pct(log_ratio: float) -> float:
    """A log ratio ln(B/A) as a percent change B/A-1."""
    return (math.exp(log_ratio) - 1.0) * 100.0


def stdev(values: list[float]) -> float:
    """Sample standard deviation in floats (statistics.stdev computes in Fractions: 10x slower at 10k shapes)."""
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


@lru_cache(maxsize=None)
def t_quantile(level: float, df: int) -> float:
    """The two-sided ``level`` quantile of Student's t: P(|T| <= q) = level."""
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > 1.0 - level:
        hi *= 2.0
    for _ in range(100):  # bisection: p falls monotonically in t
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_two_sided_p(mid, df) > 1.0 - level else (lo, mid)
    return (lo + hi) / 2.0


def interval(values: list[float], level: float = DIRECTION_LEVEL) -> tuple[float, float] | None:
    """The ``level`` t-interval of the mean of ``values``; None with fewer than 2 values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = t_quantile(level, len(values) - 1) * stdev(values) / math.sqrt(len(values))
    return mean - half, mean + half


def t_test_p(values: list[float]) -> float | None:
    """Two-sided p of the one-sample t-test of mean 0; None with fewer than 2 values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    sd = stdev(values)
    if sd == 0.0:
        return 1.0 if mean == 0.0 else 0.0
    return t_two_sided_p(mean / (sd / math.sqrt(len(values))), len(values) - 1)


def bh_adjust(p_values: list[float | None]) -> list[float | None]:
    """Benjamini-Hochberg adjusted p-values (None stays None and is not counted among the tests)."""
    present = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 1.0
    for rank in range(len(present), 0, -1):
        p, i = present[rank - 1]
        running = min(running, p * len(present) / rank)
        adjusted[i] = running
    return adjusted


def rounds_needed(n: int) -> int:
    """Rounds that must lie on the direction's side: a strict majority (both of 2, then 2 of 3, 3 of 4, 4 of 6).

    One outlier round among many never vetoes a clear effect, and more rounds never ask for more agreement
    than they add evidence (``docs/verdicts.md`` shows what the every-round and sign-test counts cost).
    """
    return n // 2 + 1


@dataclass(frozen=True)
class Judgement:
    """One shape's verdict and why."""

    verdict: str  # faster | slower | same | inconclusive
    within_margin: bool = False  # a direction whose 90% interval is inside +-margin: real, and small
    note: str = ""  # why a direction was not given, when the data alone suggest one


def judge(log_ratios: list[float], p_adjusted: float | None, margin_pct: float,
          aa_bias_pct: float | None = None) -> Judgement:
    """The verdict of one shape from its per-round ln(B/A), its BH-adjusted p and the equivalence margin.

    ``aa_bias_pct``: the size of a between-process bias the A/A control showed
    (its interval excluded zero); directions no larger than it are withheld.
    """
    ci90 = interval(log_ratios, SAME_LEVEL)
    if ci90 is None or p_adjusted is None:
        return Judgement("inconclusive", note="fewer than 2 rounds")
    lo90, hi90 = pct(ci90[0]), pct(ci90[1])
    equivalent = -margin_pct < lo90 and hi90 < margin_pct
    mean = statistics.fmean(log_ratios)
    agreeing = sum(1 for d in log_ratios if (d > 0 if mean > 0 else d < 0))
    needed = rounds_needed(len(log_ratios))
    direction = "slower" if mean > 0 else "faster"
    if p_adjusted < ALPHA and agreeing >= needed:
        if aa_bias_pct is not None and abs(pct(mean)) <= aa_bias_pct:
            return Judgement("inconclusive", note=f"{direction} by no more than the A/A bias of {aa_bias_pct:.2g}%")
        return Judgement(direction, within_margin=equivalent)
    if equivalent:
        return Judgement("same")
    if p_adjusted < ALPHA:
        return Judgement("inconclusive", note=f"{agreeing} of {len(log_ratios)} rounds {direction}, {needed} needed")
    return Judgement("inconclusive")


def sign_flip(log_ratios: list[float]) -> bool:
    """Rounds disagree on the sign (a round of exactly zero disagrees with neither)."""
    return any(d > 0 for d in log_ratios) and any(d < 0 for d in log_ratios)


def aa_bias(aa_ci_pct: tuple[float, float] | None) -> float | None:
    """The between-process bias an A/A interval shows: its far end from zero when it excludes zero, else None."""
    if aa_ci_pct is None or aa_ci_pct[0] <= 0.0 <= aa_ci_pct[1]:
        return None
    return max(abs(aa_ci_pct[0]), abs(aa_ci_pct[1]))


def quantile(ordered: list[float], q: float) -> float:
    """Linear-interpolated quantile of sorted values (the 'inclusive' definition)."""
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def robust_cv(samples: list[float]) -> float | None:
    """Half the interquartile range over the median, in percent: within-cell noise."""
    if len(samples) < 3:
        return None
    ordered = sorted(samples)
    med = quantile(ordered, 0.5)
    return 50.0 * (quantile(ordered, 0.75) - quantile(ordered, 0.25)) / med if med > 0 else None


def median_or_none(values: list[float | None]) -> float | None:
    """The median of the values that exist; None when none does."""
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def cv_pct(values: list[float]) -> float | None:
    """Coefficient of variation in percent; None with fewer than 2 values."""
    return 100.0 * stdev(values) / statistics.fmean(values) if len(values) >= 2 else None
