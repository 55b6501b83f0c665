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


# The largest percent change the report states: B/A = 10,001.  A 2-round interval of wall-clock noise (its t
# quantile is 12.7) can reach ratios beyond a float; past this cap a number says nothing but "enormous", and
# report.json must stay strict JSON (no Infinity).  The text shows such an end as ">+9999%" (render.py).
PCT_CAP = 1_000_000.0


def pct(log_ratio: float) -> float:
    """A log ratio ln(B/A) as a percent change B/A-1, at most ``PCT_CAP``."""
    if log_ratio >= math.log1p(PCT_CAP / 100.0):
        return PCT_CAP
    return math.expm1(log_ratio) * 100.0


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


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom (a Welch df need not be whole)."""
    if math.isinf(t):
        return 0.0
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


@lru_cache(maxsize=None)
def t_quantile(level: float, df: float) -> float:
    """The two-sided ``level`` quantile of Student's t: P(|T| <= q) = level."""
    if not 0.0 < level < 1.0:  # the search below would never end
        raise ValueError(f"t_quantile: level must lie strictly between 0 and 1, got {level!r}")
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > 1.0 - level:
        hi *= 2.0
    for _ in range(100):  # bisection: p falls monotonically in t
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_two_sided_p(mid, df) > 1.0 - level else (lo, mid)
    return (lo + hi) / 2.0


def interval(values: list[float], level: float = DIRECTION_LEVEL, floor: float = 0.0) -> tuple[float, float] | None:
    """The ``level`` t-interval of the mean of ``values``; None with fewer than 2 values.

    ``floor``: the smallest standard deviation the values can have (``spread_floor``); a smaller sample
    standard deviation is taken as luck and replaced by it.
    """
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = t_quantile(level, len(values) - 1) * max(stdev(values), floor) / math.sqrt(len(values))
    return mean - half, mean + half


def t_test_p(values: list[float], floor: float = 0.0, null: float = 0.0) -> float | None:
    """Two-sided p of the one-sample t-test of mean ``null``; None with fewer than 2 values.

    ``floor`` as in ``interval``: rounds that happen to agree closely cannot give a p near 0 when
    each of them is known to be noisier than their spread says.
    """
    if len(values) < 2:
        return None
    mean = statistics.fmean(values) - null
    sd = max(stdev(values), floor)
    if sd == 0.0:
        return 1.0 if mean == 0.0 else 0.0
    return t_two_sided_p(mean / (sd / math.sqrt(len(values))), len(values) - 1)


def t_test_above_p(values: list[float], bound: float, floor: float = 0.0) -> float | None:
    """One-sided p of the t-test that the mean of ``values`` exceeds ``bound``; None with fewer than 2 values."""
    two_sided = t_test_p(values, floor, bound)
    if two_sided is None:
        return None
    return two_sided / 2.0 if statistics.fmean(values) > bound else 1.0 - two_sided / 2.0


@dataclass(frozen=True)
class Difference:
    """mean(x) - weight * mean(y) of two independent samples, with its Welch standard error and degrees of freedom."""

    estimate: float
    se: float
    df: float

    def p_above(self) -> float:
        """One-sided p of the claim that the difference is above 0."""
        if self.se == 0.0:
            return 0.0 if self.estimate > 0.0 else 1.0
        t = self.estimate / self.se
        tail = t_two_sided_p(t, self.df) / 2.0
        return tail if t > 0.0 else 1.0 - tail

    def p_below(self) -> float:
        """One-sided p of the claim that the difference is below 0."""
        return Difference(-self.estimate, self.se, self.df).p_above()

    def bounds(self, level: float) -> tuple[float, float]:
        """The one-sided ``level`` lower and upper bounds (each alone holds at ``level``)."""
        half = t_quantile(2.0 * level - 1.0, self.df) * self.se
        return self.estimate - half, self.estimate + half


def difference(x: list[float], y: list[float], weight: float, floor_x: float = 0.0,
               floor_y: float = 0.0) -> Difference | None:
    """mean(x) - weight * mean(y), Welch's way; None when either sample has fewer than 2 values.

    ``floor_x``, ``floor_y``: each sample's least standard deviation, as in ``interval``.
    """
    if len(x) < 2 or len(y) < 2:
        return None
    vx = max(stdev(x), floor_x) ** 2 / len(x)
    vy = (weight * max(stdev(y), floor_y)) ** 2 / len(y)
    se = math.sqrt(vx + vy)
    parts = vx * vx / (len(x) - 1) + vy * vy / (len(y) - 1)
    df = (vx + vy) ** 2 / parts if parts > 0.0 else float(len(x) - 1)
    return Difference(statistics.fmean(x) - weight * statistics.fmean(y), se, df)


NORMAL_QUARTILE = 0.6744897501960817  # the upper quartile of N(0, 1): half the interquartile range of sigma 1


def median_se(robust_cv_pct: float | None, samples: int) -> float:
    """The standard error of one cell's median, in log units, from its samples' robust CV (``robust_cv``).

    Half the interquartile range over the median estimates sigma * 0.674 of the log samples; the median
    of ``samples`` of them has a standard error of sqrt(pi/2) * sigma / sqrt(samples).  0 when unknown.
    """
    if robust_cv_pct is None or samples < 3:
        return 0.0
    return math.sqrt(math.pi / 2.0) * robust_cv_pct / 100.0 / NORMAL_QUARTILE / math.sqrt(samples)


def spread_floor(se_a: float, se_b: float) -> float:
    """The smallest standard deviation a per-round ln(B/A) can have: its two medians' own sampling noise.

    A round's log ratio is the difference of two cells' medians, each with at least the standard error
    its own samples show; whatever varies between processes only adds to it.
    """
    return math.sqrt(se_a * se_a + se_b * se_b)


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


def bh_adjust_beyond(p_values: list[float | None]) -> list[float | None]:
    """Benjamini-Hochberg over the one-sided p-values below 1/2 only, each doubled; the others (and None) are None.

    A one-sided test's p is below 1/2 exactly when the estimate lies beyond the bound.  A shape whose true value
    sits on the bound lands there half the time, with p then uniform on (0, 1/2): doubled, uniform again; one
    below the bound lands there less often and with larger p (the p-values of a one-sided t-test are uniformly
    conservative).  So the shapes whose estimates lie on the bound's near side carry no chance of a false finding
    and leave the family: one shape beyond the bound among nine far below it is judged at the level / 1 x 2, not
    the level / 10 (Zhao, Small and Su, "Multiple testing when many p-values are uniformly conservative", JASA
    2019).  Where every shape sits on the bound half of them stay, doubled: the correction of all of them.
    """
    kept = [None if p is None or p >= 0.5 else 2.0 * p for p in p_values]
    return bh_adjust(kept)


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
          aa_bias_pct: float | None = None, floor: float = 0.0, alpha: float = ALPHA) -> Judgement:
    """The verdict of one shape from its per-round ln(B/A), its BH-adjusted p and the equivalence margin.

    ``aa_bias_pct``: the size of a between-process bias the A/A control showed
    (its interval excluded zero); directions no larger than it are withheld.
    ``floor``: the smallest standard deviation of a round's ln(B/A) (``spread_floor``), as in ``interval``.
    ``alpha``: the level of the direction's t-test and of each one-sided test of ``same`` (ALPHA; with
    ``--ab-rounds auto`` the share of ALPHA its look was given, ``report.sequential.look_alpha``).
    """
    ci90 = interval(log_ratios, 1.0 - 2.0 * alpha, floor)
    if ci90 is None or p_adjusted is None:
        return Judgement("inconclusive", note="fewer than 2 rounds")
    lo90, hi90 = pct(ci90[0]), pct(ci90[1])
    equivalent = -margin_pct < lo90 and hi90 < margin_pct
    mean = statistics.fmean(log_ratios)
    agreeing = sum(1 for d in log_ratios if (d > 0 if mean > 0 else d < 0))
    needed = rounds_needed(len(log_ratios))
    direction = "slower" if mean > 0 else "faster"
    if p_adjusted < alpha and agreeing >= needed:
        if aa_bias_pct is not None and abs(pct(mean)) <= aa_bias_pct:
            return Judgement("inconclusive", note=f"{direction} by no more than the A/A bias of {aa_bias_pct:.2g}%")
        return Judgement(direction, within_margin=equivalent)
    if equivalent:
        return Judgement("same")
    if p_adjusted < alpha:
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


# A trend stands only while it holds with any one round left out, at this level and with the same sign: a least-squares
# line follows one outlying round (a warm first process, a bad one), which alone gave side A a trend in 4.5% of
# simulated series at 2.5% (6 and 10 rounds; docs/verdicts.md, "drift").
TREND_WITHOUT_ONE_P = 0.1


@dataclass(frozen=True)
class Trend:
    """A series' least-squares slope per round (log units) and the two-sided p of its t-test."""

    slope: float
    p: float


def _side_lines(side_a: list[float], side_b: list[float], rounds: list[int],
                floor: float) -> tuple[float, float, float, int]:
    """Both sides' least-squares slopes over ``rounds`` (positions), the slopes' standard error with the
    variance pooled over both sides' residuals (at least ``floor`` squared), and its degrees of freedom."""
    n = len(rounds)
    mean_x = math.fsum(rounds) / n
    sxx = math.fsum((x - mean_x) ** 2 for x in rounds)

    def fit(values: list[float]) -> tuple[float, float]:
        ys = [values[i] for i in rounds]
        mean_y = math.fsum(ys) / n
        slope = math.fsum((x - mean_x) * (y - mean_y) for x, y in zip(rounds, ys)) / sxx
        return slope, math.fsum((y - mean_y - slope * (x - mean_x)) ** 2 for x, y in zip(rounds, ys))

    (slope_a, rss_a), (slope_b, rss_b) = fit(side_a), fit(side_b)
    df = 2 * (n - 2)
    return slope_a, slope_b, math.sqrt(max((rss_a + rss_b) / df, floor * floor) / sxx), df


def _slope_p(slope: float, se: float, df: int) -> float:
    if se == 0.0:
        return 0.0 if slope != 0.0 else 1.0
    return t_two_sided_p(slope / se, df)


def side_trends(side_a: list[float], side_b: list[float], floor: float = 0.0) -> tuple[Trend, Trend, Trend]:
    """The trends of side A's series, side B's and their difference B - A (values in round order, log units).

    Each slope is least squares, tested with the variance pooled over both sides' residuals: the two sides'
    processes alternate on one machine, so their scatter about their own lines estimates one process noise, with
    2(n - 2) degrees of freedom where one side alone has n - 2 (the difference's slope has sqrt(2) times the
    standard error).  On the simulator this found a side drifting 0.4% a round (a fifth of a round's noise) at 10
    rounds in about 90% of ops where Mann-Kendall on each series found 75-80%.  ``floor``: the smallest standard
    deviation a value can have (its median's own noise), as in ``interval``.  A trend whose slope changes sign or
    whose p reaches ``TREND_WITHOUT_ONE_P`` once any one round is left out has p 1.  Needs 4 values.
    """
    n = len(side_a)
    if n < 4:
        return Trend(0.0, 1.0), Trend(0.0, 1.0), Trend(0.0, 1.0)

    def three(rounds: list[int]) -> list[tuple[float, float]]:
        slope_a, slope_b, se, df = _side_lines(side_a, side_b, rounds, floor)
        return [(slope, _slope_p(slope, scale * se, df))
                for slope, scale in ((slope_a, 1.0), (slope_b, 1.0), (slope_b - slope_a, math.sqrt(2.0)))]

    full = three(list(range(n)))
    held = [True] * 3
    for left_out in range(n):
        for k, (slope, p) in enumerate(three([i for i in range(n) if i != left_out])):
            held[k] = held[k] and p < TREND_WITHOUT_ONE_P and (slope > 0) == (full[k][0] > 0)
    a, b, delta = (Trend(slope, p if ok else 1.0) for (slope, p), ok in zip(full, held))
    return a, b, delta


@dataclass(frozen=True)
class Split:
    """The best cut of a series into a low and a high group (least squares within the two), and how clean it is."""

    minority: frozenset[int]  # positions of the smaller group (the low one on a tie)
    smaller: int  # its size
    gap: float  # mean of the high group minus mean of the low group
    ratio: float  # within-group sum of squares over the total: near 0 when the values sit in two tight groups


def best_split(values: list[float], noise_sd: float = 0.0) -> Split | None:
    """The two-group cut of ``values`` with the least within-group sum of squares; None with fewer than 3 values.

    ``noise_sd`` floors the within-group spread (each value is at least this noisy): groups that happen
    to be tighter than their own measurement noise do not make the cut look cleaner than it can be.
    """
    n = len(values)
    if n < 3:
        return None
    order = sorted(range(n), key=lambda i: values[i])
    ordered = [values[i] for i in order]
    mean = math.fsum(ordered) / n
    total = math.fsum((v - mean) ** 2 for v in ordered)
    if total <= 0.0:
        return None
    centred = [v - mean for v in ordered]  # running sums of centred values keep the cuts' arithmetic exact enough
    sums, squares = [0.0], [0.0]
    for v in centred:
        sums.append(sums[-1] + v)
        squares.append(squares[-1] + v * v)
    within, k = min(((squares[k] - sums[k] ** 2 / k)
                     + (squares[n] - squares[k] - (sums[n] - sums[k]) ** 2 / (n - k)), k) for k in range(1, n))
    within = max(within, 0.0)
    low_idx, high_idx = order[:k], order[k:]
    gap = math.fsum(ordered[k:]) / (n - k) - math.fsum(ordered[:k]) / k
    minority = low_idx if k <= n - k else high_idx
    return Split(frozenset(minority), min(k, n - k), gap, max(within, (n - 2) * noise_sd ** 2) / total)


# The 0.1% and 10% quantiles of Split.ratio for n values drawn from one normal distribution (no modes):
# 2,000,000 seeded draws per n (numpy, seed 20261202; docs/verdicts.md has the script).  Below the
# quantile, a cut is that unlikely from one mode.  Beyond 20 values the 20-value quantiles apply: the
# quantiles grow with n, so the test only gets stricter.
SPLIT_RATIO_QUANTILES: dict[int, tuple[float, float]] = {
    3: (2.84e-07, 0.00275), 4: (0.000288, 0.0285), 5: (0.00289, 0.0619), 6: (0.00934, 0.0913), 7: (0.0187, 0.115),
    8: (0.0291, 0.134), 9: (0.04, 0.149), 10: (0.0508, 0.162), 11: (0.0617, 0.174), 12: (0.072, 0.183),
    13: (0.0812, 0.192), 14: (0.0899, 0.199), 15: (0.0978, 0.206), 16: (0.105, 0.212), 17: (0.111, 0.217),
    18: (0.118, 0.222), 19: (0.124, 0.227), 20: (0.129, 0.231)}
SPLIT_STRICT, SPLIT_LOOSE = 0, 1  # indices into SPLIT_RATIO_QUANTILES' pairs: the 0.1% and the 10% quantile
# The loose level is the op-wide count's (report/flags.py).  At 5% its 3-value quantile (0.00069) lay below what a
# cell's own median noise lets a cut reach (the spread floor): on the calm machine of issue 46, three rounds of a
# shape in two modes 8% apart never cleared it, and the op-wide count that should withhold their direction saw
# nothing.  At 10% (0.00275) three in four such shape-sides clear it.
SPLIT_LOOSE_LEVEL = 0.10


def split_quantile(n: int, which: int) -> float:
    """The quantile of ``SPLIT_RATIO_QUANTILES`` for ``n`` values (``SPLIT_STRICT`` or ``SPLIT_LOOSE``)."""
    return SPLIT_RATIO_QUANTILES[min(n, max(SPLIT_RATIO_QUANTILES))][which]


def binomial_tail(trials: int, hits: int, p: float) -> float:
    """P(X >= hits) for X ~ Binomial(trials, p)."""
    return math.fsum(math.comb(trials, k) * p ** k * (1.0 - p) ** (trials - k) for k in range(max(0, hits), trials + 1))
