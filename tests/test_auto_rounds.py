"""--ab-rounds auto: an op whose shapes settled skips its later rounds, an unsettled one runs to the cap, the
report says why each stopped, and a resumed root decides its rounds again (real pytest sessions, real cells on the
CPU; the durations are planted sleeps, so the verdicts do not depend on this machine's noise)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from helpers import synthetic_root
from pytest_abbench.core.layout import CellKey, RootLayout
from pytest_abbench.core.outcome import OVER_BUDGET, SETTLED
from pytest_abbench.core.plan import CampaignPlan
from pytest_abbench.core.settings import AUTO_FIRST, AUTO_LAST, default_rounds, rounds_plan
from pytest_abbench.core.status import read_status
from pytest_abbench.report.sequential import look_alpha
from pytest_abbench.report.build import discover
from pytest_abbench.report.stats import ALPHA
from pytest_abbench.session.autorounds import AutoRounds

FAST = ("--ab-ir-target", "none", "-p", "no:cacheprovider", "--ab-samples", "5")

# ``planted``: side B sleeps twice as long as side A in every round (+100%: settled at the first look).
# ``seesaw``: side B is 40% slower in odd rounds and 40% faster in even ones: no direction, no `same`, an interval
# far wider than the margin at any round count: it runs to the cap.  The round is read from the cell's test id.
CAMPAIGN = '''
import os, time
from pytest_abbench import Op, Switch

def _round():
    test = os.environ["PYTEST_CURRENT_TEST"]  # "c.py::seesaw[r3-B] (call)"
    return int(test.split("[r", 1)[1].split("-", 1)[0])

def planted(shape, device):
    seconds = 0.04 if os.environ.get("ABBENCH_TEST_SWITCH") else 0.02
    return lambda: time.sleep(seconds)

def seesaw(shape, device):
    factor = (1.4 if _round() % 2 else 0.6) if os.environ.get("ABBENCH_TEST_SWITCH") else 1.0
    return lambda: time.sleep(0.02 * factor)

OPS = [Op("planted", build=planted, shapes={"smoke": [{"n": 1}]}),
       Op("seesaw", build=seesaw, shapes={"smoke": [{"n": 1}]})]
SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
'''


def test_rounds_auto_rounds_skip_whole_print_no_progress_line_of_their_own(campaign_dir: pytest.Pytester,
                                                                          tmp_path: Path) -> None:
    """The session hands the ops auto rounds stopped to the progress line: planted settles at round 3, and round
    4 of 5, every cell of it skipped, says nothing (round 5, the last, says the session's end)."""
    campaign_dir.makepyfile(c=CAMPAIGN)
    result = campaign_dir.runpytest_subprocess("c.py", "-k", "planted", "--ab-rounds", "auto:3-5", "--ab-root",
                                               str(tmp_path / "root"), *FAST)
    result.assert_outcomes(passed=6, skipped=4)
    out = result.stdout.str()
    assert "abbench: round 3 done" in out and "abbench: round 5 done, 5 of 5 rounds" in out
    assert "abbench: round 4 done" not in out, out


def _rows(root: Path) -> dict[tuple[int, str, str], str]:
    """(round, op, side) -> status, the last row of each cell."""
    return {(r.round, r.op, r.side): r.status for r in read_status(root)}


def test_a_settled_op_stops_early_an_unsettled_one_runs_to_the_cap_and_resume_decides_again(
        campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    root = tmp_path / "root"
    campaign_dir.makepyfile(c=CAMPAIGN)
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "auto:3-4", "--ab-root", str(root), *FAST,
                                               "-rs")
    result.assert_outcomes(passed=6 + 8, skipped=2)
    rows = _rows(root)
    assert [rows[(4, "planted", side)] for side in ("A", "B")] == [SETTLED, SETTLED]
    assert all(rows[(r, "seesaw", s)] == "ok" for r in range(1, 5) for s in ("A", "B"))
    out = result.stdout.str()
    assert "every shape of planted settled after 3 rounds" in out  # the skip's reason (-rs)
    assert "rounds auto, 3 to 4" in out and "ops stopped: 1 every shape settled, 1 the cap reached" in out
    assert "== planted: rounds 3 of up to 4 (every shape settled)" in out
    # The op held to the cap names its shape and the rule that held it.
    assert re.search(r"== seesaw: rounds 4 of up to 4 \(the cap reached; held by 1 shape\(s\): n=1 \(inconclusive, "
                     r"90% interval \d+\.\d points wide > margin 2\)\)", out), out
    assert "abbench: exit 0" in out  # skipped rounds are neither missing nor failed
    # The time left: the rounds every op runs, then the most the rest may take (tests/test_progress.py has figures).
    assert re.search(r"round 1 done, .* about \S+ left \(rough: [^)]*\), up to \S+ if ops need all 4 rounds "
                     r"\(--ab-rounds auto\)", out), out
    assert re.search(r"round 3 done, .* elapsed, up to \S+ left if ops need all 4 rounds \(--ab-rounds auto\)", out)
    report = json.loads((root / "report.json").read_text())
    assert report["complete"] and not report["failed_cells"]
    ops = {o["op"]: o for o in report["ops"]}
    assert ops["planted"]["shapes"][0]["verdict"] == "slower" and ops["planted"]["stopped"] == "settled"
    assert ops["seesaw"]["stopped"] == "cap" and [u.split()[0] for u in ops["seesaw"]["unsettled"]] == ["n=1"]
    assert report["auto_rounds"] == {"first": 3, "last": 4, "rounds_run": 7, "settled": 1, "cap": 1, "budget": 0}
    # The plan keeps the energy target the looks used, so a later report judges with it (no energy here: the CPU).
    assert json.loads((root / "campaign.json").read_text())["plan"]["energy_target_pct"] == 5.0

    # Resumed with a higher cap: the settled op's rounds are decided again from its rounds on disk (skipped again,
    # nothing run), the unsettled one runs its fifth round only.
    resumed = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "auto:3-5", "--ab-resume", str(root), *FAST)
    resumed.assert_outcomes(passed=6 + 8 + 2, skipped=4)
    rows = _rows(root)
    assert [rows[(r, "planted", s)] for r in (4, 5) for s in ("A", "B")] == [SETTLED] * 4
    assert [rows[(5, "seesaw", s)] for s in ("A", "B")] == ["ok", "ok"]
    assert "== seesaw: rounds 5 of up to 5 (the cap reached; held by 1 shape(s): n=1 (" in resumed.stdout.str()
    assert "== planted: rounds 3 of up to 5 (every shape settled)" in resumed.stdout.str()


def test_a_spent_budget_stops_an_unsettled_op_at_its_next_round_and_it_stays_stopped(tmp_path: Path) -> None:
    """Three rounds of an op whose delta swings (no verdict settles); its six cells took 1 s each."""
    synthetic_root(tmp_path, {"s": [0.10, -0.05, 0.02]})
    outcomes = {o.key: o for o in discover(RootLayout(tmp_path), [])}
    plan = CampaignPlan(5, ops={"op": "c.py"}, auto_min=3)

    def decide(budget_s: float | None, round_no: int, auto: AutoRounds | None = None) -> tuple[str, str] | None:
        auto = auto or AutoRounds(tmp_path, plan, outcomes, None, budget_s)
        return auto.round_not_needed(CellKey(round_no, "op", "A"))

    assert decide(None, 4) is None and decide(7.0, 4) is None  # no budget, or 6 s of 7 spent: round 4 runs
    assert decide(5.0, 3) is None  # the first look comes after round 3
    auto = AutoRounds(tmp_path, plan, outcomes, None, 5.0)
    status, why = decide(5.0, 4, auto) or ("", "")
    assert status == OVER_BUDGET and "took 6s of the 5s --ab-rounds-budget; op stops after 3 rounds" in why
    assert decide(5.0, 5, auto) == (status, why)  # decided once: the op stays stopped


@pytest.mark.parametrize("text, expected", [("6", (6, None)), ("auto", (AUTO_LAST, AUTO_FIRST)), ("auto:12", (12, 3)),
                                            ("auto:4-8", (8, 4))])
def test_rounds_values(text: str, expected: tuple[int, int | None]) -> None:
    assert rounds_plan(text) == expected


def test_the_default_is_auto_on_a_gpu_and_two_rounds_in_the_interpreter() -> None:
    assert default_rounds("cuda") == rounds_plan("auto") and default_rounds("interpreter") == (2, None)


@pytest.mark.parametrize("text, why", [("auto:x", "expected N, auto, auto:MAX or auto:MIN-MAX"),
                                       ("auto:", "expected N, auto"), ("auto:3-", "expected N, auto"),
                                       ("auto:1-5", "at least 2 rounds"), ("auto:5-3", "must exceed"),
                                       ("auto:3", "must exceed"), ("auto:2000", "at most 1000"), ("autox", "whole"),
                                       ("2x", r"expected N \(a whole number of rounds\) or auto, auto:MAX")])
def test_a_bad_rounds_value_is_named(text: str, why: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=why) as caught:
        rounds_plan(text)
    assert repr(text) in str(caught.value)


def test_the_looks_share_alpha_and_a_budget_needs_auto(pytester: pytest.Pytester) -> None:
    for first, last in ((3, 10), (3, 4), (2, 30)):
        assert sum(look_alpha(n, first, last) for n in range(first, last + 1)) == pytest.approx(ALPHA)
    assert look_alpha(6, None, 6) == ALPHA
    result = pytester.runpytest("--ab-rounds", "6", "--ab-rounds-budget", "60", "-p", "no:cacheprovider")
    result.stderr.fnmatch_lines(["*--ab-rounds-budget 60: a budget for added rounds needs --ab-rounds auto*"])
    result = pytester.runpytest("--ab-rounds", "auto:9-4", "-p", "no:cacheprovider")
    result.stderr.fnmatch_lines(["*--ab-rounds: *auto:9-4*"])


def test_an_op_whose_sides_share_no_shape_stops_at_its_first_look(tmp_path: Path) -> None:
    """No round has a shape on both sides (side B timed another shape set, an allowed caliber mismatch): a later
    round cannot add one, so the op is settled; it ran on to the cap."""
    from pytest_abbench.report.build import settled_after

    synthetic_root(tmp_path, {"s": [0.01, 0.01, 0.01]})
    for rnd in (1, 2, 3):
        results = tmp_path / f"r{rnd}_B" / "op" / "results.jsonl"
        results.write_text(results.read_text().replace('"shape": "s"', '"shape": "t"'))
    look = settled_after(tmp_path, "op", discover(RootLayout(tmp_path), []), CampaignPlan(10, auto_min=3), None, 3)
    assert not look.judged and look.settled, look.reason
    assert look.reason.startswith("no verdict: no shape has a result on both sides in every round")
