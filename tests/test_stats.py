"""The report's statistics on inputs whose answers are known without it."""

from __future__ import annotations

import math
import statistics

import pytest

from pytest_abbench.report.stats import floor_margin, interval, robust_cv, t95, verdict


def test_robust_cv_is_half_the_inclusive_iqr_over_the_median() -> None:
    samples = [1.0, 1.3, 0.9, 1.1, 1.6, 1.05, 0.95]
    q1, med, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    assert robust_cv(samples) == pytest.approx(50.0 * (q3 - q1) / med)
    assert robust_cv([1.0, 2.0]) is None  # too few samples for quartiles


def test_t95_between_table_rows_takes_the_next_larger_df_and_is_normal_beyond() -> None:
    assert t95(4) == 2.776 and t95(22) == t95(25) and t95(500) == 1.96


def test_interval_and_verdict_of_a_known_sample() -> None:
    logs = [math.log(1.05), math.log(1.06), math.log(1.04)]
    lo, hi = interval(logs) or (0.0, 0.0)
    half = 4.303 * statistics.stdev(logs) / math.sqrt(3)
    assert (lo, hi) == pytest.approx((statistics.fmean(logs) - half, statistics.fmean(logs) + half))
    assert verdict((lo, hi), [5.0, 6.0, 4.0], 2.0) == "slower"
    assert verdict((lo, hi), [5.0, -6.0, 4.0], 2.0) == "inconclusive"  # a round disagrees: no direction
    assert verdict((math.log(0.995), math.log(1.005)), [0.1, -0.1], 2.0) == "same"
    assert interval([0.1]) is None and verdict(None, [5.0], 2.0) == "inconclusive"
    assert floor_margin((-1.5, 3.0)) == 3.0 and floor_margin(None) is None
