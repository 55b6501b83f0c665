"""``--ab-rounds auto``: the level of each look at an op's verdicts, and when a shape has settled.

An op runs the plan's first rounds (``CampaignPlan.auto_min``), then its
verdicts are looked at after every round up to the plan's ``rounds``.  Each
look judges with the rule of ``stats.judge`` at a share of ALPHA
(``look_alpha``); the shares of all the looks an op may have add up to ALPHA,
so by the union bound the chance that identical code gets a false direction
at any look, or that an effect beyond the margin is called ``same`` at any
look, is no larger than it is for a fixed number of rounds: whatever stopped
the op (its shapes settled, the cap, the device-time budget).  Stopping when a
delta first looks significant, at the full ALPHA each time, is what this
prevents: ``benchmarks/verdict_sim.py --only auto`` measures both.

The session (``session.fixtures.Cell``) and the simulator decide with the same
``build.settled_after`` and ``OpReport.unsettled``; this module holds the rule.
"""

from __future__ import annotations

from pytest_abbench.report.stats import ALPHA

# How ALPHA is shared among the looks (chosen on the simulator, docs/verdicts.md "Rounds until the answer settles"):
# the looks before the last share LAST_SHARE's complement equally, the last look (at the cap) gets LAST_SHARE.  An
# equal share for every look stopped ops sooner but left the last look a tenth of ALPHA (with 8 looks), where
# unchanged code on a noisy machine was called `same` in 36% of shapes at the cap against 83% at a fixed count of
# as many rounds; half of ALPHA kept 73% there, and +5% was found in every shape either way.
LAST_SHARE = 0.5


def looks(first: int, last: int) -> int:
    """How many looks an op with rounds ``first`` to ``last`` may have."""
    return last - first + 1


def look_alpha(rounds: int, first: int | None, last: int) -> float:
    """The level of an op's verdicts judged at ``rounds`` rounds when its looks run from ``first`` to ``last``.

    ``first`` None (a fixed number of rounds, one look) or ``first == last``: ALPHA.
    """
    if first is None or first >= last:
        return ALPHA
    if rounds >= last:
        return ALPHA * LAST_SHARE
    return ALPHA * (1.0 - LAST_SHARE) / (looks(first, last) - 1)


def half_width(interval_pct: tuple[float, float]) -> float:
    """The +- of an interval of percentages, in points."""
    return (interval_pct[1] - interval_pct[0]) / 2


def energy_settled(energy_ci_pct: tuple[float, float] | None, target_pct: float | None) -> bool:
    """A shape's energy per call needs no more rounds: none stated, no target (None or 0), or its interval no wider than
    +-``target_pct``."""
    return not target_pct or energy_ci_pct is None or half_width(energy_ci_pct) <= target_pct


def shape_settled(verdict: str, equivalence_ci_pct: tuple[float, float] | None, margin_pct: float) -> bool:
    """A shape needs no more rounds: it has a verdict (``faster``, ``slower``, ``same``), or its equivalence
    interval is already no wider than the margin (what more rounds would mostly narrow further; a flag that
    withholds its verdict stays)."""
    if verdict in ("faster", "slower", "same"):
        return True
    return equivalence_ci_pct is not None and equivalence_ci_pct[1] - equivalence_ci_pct[0] <= margin_pct
