"""The report's statistics on inputs whose answers are known without it."""

from __future__ import annotations

import math
import statistics

import pytest

from pytest_abbench.report.stats import (aa_bias, bh_adjust, interval, judge, robust_cv, rounds_needed, sign_flip,
                                         t_quantile, t_test_p)


def test_robust_cv_is_half_the_inclusive_iqr_over_the_median() -> None:
    samples = [1.0, 1.3, 0.9, 1.1, 1.6, 1.05, 0.95]
    q1, med, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    assert robust_cv(samples) == pytest.approx(50.0 * (q3 - q1) / med)
    assert robust_cv([1.0, 2.0]) is None  # too few samples for quartiles


def test_t_quantiles_match_the_printed_tables() -> None:
    # Two-sided 95% and 90% quantiles from any t table.
    assert t_quantile(0.95, 1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(0.95, 4) == pytest.approx(2.776, abs=1e-3)
    assert t_quantile(0.95, 22) == pytest.approx(2.074, abs=1e-3)
    assert t_quantile(0.90, 5) == pytest.approx(2.015, abs=1e-3)
    assert t_quantile(0.90, 9) == pytest.approx(1.833, abs=1e-3)


def test_interval_and_p_of_a_known_sample() -> None:
    logs = [math.log(1.05), math.log(1.06), math.log(1.04)]
    lo, hi = interval(logs) or (0.0, 0.0)
    half = 4.303 * statistics.stdev(logs) / math.sqrt(3)
    assert (lo, hi) == pytest.approx((statistics.fmean(logs) - half, statistics.fmean(logs) + half), rel=1e-3)
    # t = 8.867 at 2 df: p = 0.01248 (scipy.stats.ttest_1samp gives the same).
    assert t_test_p(logs) == pytest.approx(0.01248, abs=1e-5)
    assert interval([0.1]) is None and t_test_p([0.1]) is None


def test_benjamini_hochberg_matches_the_step_up_definition() -> None:
    # scipy.stats.false_discovery_control([0.01, 0.04, 0.03, 0.5]) gives the same four values.
    assert bh_adjust([0.01, 0.04, None, 0.03, 0.5]) == pytest.approx([0.04, 0.16 / 3, None, 0.16 / 3, 0.5])
    assert bh_adjust([]) == []


def test_a_strict_majority_of_rounds_must_lie_on_the_direction_side() -> None:
    assert [rounds_needed(n) for n in range(2, 11)] == [2, 2, 3, 3, 4, 4, 5, 5, 6]


def test_judge_directions_same_and_what_withholds_a_direction() -> None:
    slow = [math.log(1.05), math.log(1.06), math.log(1.04)]
    assert judge(slow, 0.01, 2.0).verdict == "slower"
    assert judge(slow, 0.2, 2.0).verdict == "inconclusive"  # not significant after the correction
    # Significant, but 6 of 10 rounds sit just below zero: no direction.
    minority = [0.05] * 4 + [-0.00001] * 6
    judged = judge(minority, 0.01, 2.0)
    assert judged.verdict == "inconclusive" and "4 of 10 rounds slower, 6 needed" in judged.note
    # 9 of 10 rounds: one outlier round does not veto the direction.
    nine = [0.05] * 9 + [-0.001]
    assert judge(nine, 0.001, 2.0).verdict == "slower"
    small = [0.001, 0.0011, 0.0009, 0.001]  # +0.1%, real and inside the margin
    judged = judge(small, 0.001, 2.0)
    assert judged.verdict == "slower" and judged.within_margin
    assert judge([0.001, -0.001, 0.0005], 0.9, 2.0).verdict == "same"
    # An A/A bias of 0.5% withholds a 0.1% direction, not a 5% one.
    assert judge(small, 0.001, 2.0, aa_bias_pct=0.5).verdict == "inconclusive"
    assert judge(slow, 0.01, 2.0, aa_bias_pct=0.5).verdict == "slower"


def test_zero_deltas_are_no_sign_flip_and_aa_bias_needs_an_interval_off_zero() -> None:
    assert not sign_flip([0.0, 0.0]) and sign_flip([0.1, -0.1]) and not sign_flip([0.1, 0.0])
    assert aa_bias((-0.5, 1.0)) is None and aa_bias((0.2, 0.6)) == 0.6 and aa_bias(None) is None
