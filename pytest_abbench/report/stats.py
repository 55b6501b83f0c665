"""The statistics the report judges with: t intervals, the verdict rule, within-cell noise, the A/A margin.

Plain floats and the standard library only (no scipy, no numpy): the report
runs in the pytest session and in ``abbench summary`` on machines without either.
"""

from __future__ import annotations

import math
import statistics

# Two-sided 95% Student t quantiles by degrees of freedom (no scipy needed).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
        20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


def t95(df: int) -> float:
    """The two-sided 95% t quantile; between table rows the next larger df's (a slightly narrower interval)."""
    if df in _T95:
        return _T95[df]
    above = [d for d in _T95 if d > df]
    return _T95[min(above)] if above else 1.96


def pct(log_ratio: float) -> float:
    """A log ratio ln(B/A) as a percent change B/A-1."""
    return (math.exp(log_ratio) - 1.0) * 100.0


def stdev(values: list[float]) -> float:
    """Sample standard deviation in floats (statistics.stdev computes in Fractions: 10x slower at 10k shapes)."""
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def interval(values: list[float]) -> tuple[float, float] | None:
    """95% t-interval of the mean of ``values``; None with fewer than 2 values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = t95(len(values) - 1) * stdev(values) / math.sqrt(len(values))
    return mean - half, mean + half


def verdict(ci: tuple[float, float] | None, deltas: list[float], margin_pct: float) -> str:
    """faster/slower only if the interval excludes 0 and every round agrees; same inside +-margin."""
    if ci is None:
        return "inconclusive"
    lo, hi = pct(ci[0]), pct(ci[1])
    one_sign = all(d > 0 for d in deltas) or all(d < 0 for d in deltas)
    if lo > 0 and one_sign:
        return "slower"
    if hi < 0 and one_sign:
        return "faster"
    if -margin_pct < lo and hi < margin_pct:
        return "same"
    return "inconclusive"


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


def floor_margin(aa_ci_pct: tuple[float, float] | None) -> float | None:
    """The 'same' margin an A/A interval sets: the larger distance of its ends from zero."""
    return max(abs(aa_ci_pct[0]), abs(aa_ci_pct[1])) if aa_ci_pct else None
