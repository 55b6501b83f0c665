"""The report's statistics on inputs whose answers are known without it."""

from __future__ import annotations

import math
import statistics

import pytest

from pytest_abbench.report.stats import (SPLIT_LOOSE, SPLIT_LOOSE_LEVEL, SPLIT_STRICT, aa_bias, best_split, bh_adjust,
                                         bh_adjust_beyond, binomial_tail, interval, judge, median_se, robust_cv,
                                         rounds_needed, side_trends, sign_flip, split_quantile, spread_floor,
                                         t_quantile, t_test_above_p, t_test_p, t_two_sided_p)


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


def test_the_gate_correction_keeps_only_the_p_values_below_one_half_and_doubles_them() -> None:
    # Kept: 0.004 and 0.3, doubled to 0.008 and 0.6, then Benjamini-Hochberg over those two.
    assert bh_adjust_beyond([0.004, 0.6, None, 0.3, 0.5]) == pytest.approx([0.016, None, None, 0.6, None])


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


def test_side_trends_pool_both_sides_variance_and_no_single_round_makes_a_trend() -> None:
    # Side B rises 1% a round with residuals e = d x (1, -1, 0, 0, -1, 1) (orthogonal to a line), side A flat:
    # the variance pooled over both sides is 4 d^2 / (2 x 4), the slope's standard error sqrt(d^2 / 2 / 17.5),
    # t = sqrt(35) with 8 degrees of freedom (side B alone: t = sqrt(17.5) with 4, p = 0.014).
    d = 0.01
    side_b = [0.01 * k + d * e for k, e in enumerate((1, -1, 0, 0, -1, 1))]
    trend_a, trend_b, delta = side_trends([0.0] * 6, side_b)
    assert trend_b.slope == pytest.approx(0.01) and trend_b.p == pytest.approx(t_two_sided_p(math.sqrt(35.0), 8))
    assert trend_a.p == 1.0 and delta.slope == pytest.approx(0.01)
    assert delta.p == pytest.approx(t_two_sided_p(math.sqrt(35.0 / 2.0), 8))  # B - A: sqrt(2) x the error
    # The floor: a line through rounds that lie on it exactly, each known to be as noisy as its median (2%).
    assert side_trends([0.0] * 6, [0.03 * k for k in range(6)], floor=0.02)[1].p == pytest.approx(
        t_two_sided_p(0.03 / math.sqrt(0.02 ** 2 / 17.5), 8))
    # A warm first process on side A: the least-squares line follows it (slope -0.5% a round), but with round 1
    # left out nothing trends, so no trend is found.
    warm = [0.05, 0.0, 0.001, -0.001, 0.0005, -0.0005, 0.0]
    trend_a, _, delta = side_trends(warm, [0.001 * (-1) ** k for k in range(7)])
    assert trend_a.slope < -0.004 and trend_a.p == 1.0 and delta.p == 1.0
    assert side_trends([0.0] * 3, [0.0, 1.0, 2.0])[1].p == 1.0  # too few rounds


def test_best_split_finds_two_tight_groups_and_floors_their_spread() -> None:
    split = best_split([0.0, 0.01, 8.0, 8.02, 0.02])
    assert split is not None and split.minority == frozenset({2, 3}) and split.smaller == 2
    assert split.gap == pytest.approx(8.0) and split.ratio < 1e-5
    floored = best_split([0.0, 0.01, 8.0, 8.02, 0.02], noise_sd=1.0)
    assert floored is not None and floored.ratio == pytest.approx(3.0 / 76.8, rel=0.01)
    assert best_split([1.0, 1.0, 1.0]) is None and best_split([1.0, 2.0]) is None


def test_split_ratio_quantiles_match_a_fresh_simulation_of_one_mode() -> None:
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(7)
    for n in (3, 5, 10, 20):
        values = rng.standard_normal((20000, n))
        ratios = [best_split(row.tolist()).ratio for row in values]  # type: ignore[union-attr]
        loose = float(np.mean(np.array(ratios) <= split_quantile(n, SPLIT_LOOSE)))
        assert loose == pytest.approx(SPLIT_LOOSE_LEVEL, abs=0.008)
        assert float(np.mean(np.array(ratios) <= split_quantile(n, SPLIT_STRICT))) < 0.003
    assert split_quantile(100, SPLIT_LOOSE) == split_quantile(20, SPLIT_LOOSE)


def test_binomial_tail_and_median_se() -> None:
    assert binomial_tail(3, 2, 0.5) == pytest.approx(0.5) and binomial_tail(20, 0, 0.05) == pytest.approx(1.0)
    # Samples with a robust CV of 2%: sigma 2.97% of the log, the median of 10 of them 1.17%.
    assert median_se(2.0, 10) == pytest.approx(math.sqrt(math.pi / 2) * 0.02 / 0.6744897501960817 / math.sqrt(10))
    assert median_se(None, 10) == 0.0 and median_se(2.0, 2) == 0.0
    assert spread_floor(0.03, 0.04) == pytest.approx(0.05)


def test_a_spread_floor_keeps_closely_agreeing_rounds_from_a_tiny_p() -> None:
    rounds = [0.01, 0.0101, 0.0099]
    assert (t_test_p(rounds) or 1.0) < 0.001
    assert (t_test_p(rounds, floor=0.02) or 0.0) > 0.4  # t = 0.87 at 2 df
    lo, hi = interval(rounds, floor=0.02) or (0.0, 0.0)
    assert hi - lo == pytest.approx(2 * 4.303 * 0.02 / math.sqrt(3), rel=1e-3)
    assert judge(rounds, 0.0005, 2.0).verdict == "slower"
    assert judge(rounds, 0.0005, 2.0, floor=0.02).verdict == "slower"  # the p given is the caller's, floored or not
    # A one-sided test against a bound: +5% rounds are above +2% and not above +8%.
    five = [math.log(1.05), math.log(1.051), math.log(1.049)]
    assert (t_test_above_p(five, math.log(1.02)) or 1.0) < 0.01
    assert (t_test_above_p(five, math.log(1.08)) or 0.0) > 0.99


def test_a_percent_beyond_any_meaning_is_capped_not_a_crash_and_not_printed_as_45_digits() -> None:
    """A 2-round interval of interpreter wall-clock noise (t quantile 12.7) reached exp() overflow and took the
    session's report down with an OverflowError; short of overflow it printed "+5368157731...0.0%"."""
    from pytest_abbench.report.render import interval_text as _range
    from pytest_abbench.report.stats import PCT_CAP, pct

    assert pct(1000.0) == PCT_CAP and pct(100.0) == PCT_CAP and pct(-1000.0) == -100.0
    assert round(pct(0.0953101798), 6) == 10.0
    assert _range((pct(-3.0), pct(100.0))) == "-95.0 ~ >+9999%"
    assert _range((-1.0, 5.0)) == "-1.0 ~ +5.0%"


def test_a_quantile_outside_0_1_is_refused_instead_of_searched_forever() -> None:
    """The A/A interval once passed its spread floor where the level goes: a floor above 1 searched forever and
    hung the session at its report."""
    from pytest_abbench.report.stats import interval, t_quantile

    for level in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            t_quantile(level, 3)
    narrow, floored = interval([0.01, 0.02, 0.03]), interval([0.01, 0.02, 0.03], floor=1.5)
    assert narrow is not None and floored is not None and floored[1] - floored[0] > narrow[1] - narrow[0]
