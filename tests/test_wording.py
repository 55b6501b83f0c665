"""Terminal wording: counts read as English; a report says what happened to an op."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import ADD_KERNEL_SOURCE, VANISHING_ROOT_CAMPAIGN, simple_campaign


@pytest.mark.parametrize("ops, rounds, line", [
    ('"one"', "1", "abbench: 2 cells, 1 op, 1 round, backend *"),
    ('"one", "two"', "2", "abbench: 8 cells, 2 ops, 2 rounds, backend *"),
])
def test_collection_line_counts_in_singular_and_plural(campaign_dir: pytest.Pytester, ops: str, rounds: str,
                                                       line: str) -> None:
    campaign_dir.makepyfile(c=simple_campaign(ops))
    result = campaign_dir.runpytest("c.py", "--collect-only", "-q", "--ab-rounds", rounds)
    result.stdout.fnmatch_lines([line])


def test_a_root_error_reads_as_abbench_s_own_line(campaign_dir: pytest.Pytester, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Stopped at collection (the root is a file) and while cells run (the root vanished under a cell).
    campaign_dir.makepyfile(c=VANISHING_ROOT_CAMPAIGN)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    root = tmp_path / "root"
    fast = ("--ab-rounds", "1", "--ab-ir-target", "none", "-p", "no:cacheprovider")
    stopped = campaign_dir.runpytest_subprocess("c.py", "--ab-root", str(blocker / "root"), *fast)
    monkeypatch.setenv("DOOMED_ROOT", str(root))
    vanished = campaign_dir.runpytest_subprocess("c.py", "-k", "vanish", "--ab-root", str(root), *fast)
    for result, line in ((stopped, re.escape(f"cannot use the root {blocker / 'root'}: {blocker} is a file, "
                                             "not a folder; give --ab-root a folder")),
                         (vanished, re.escape(f"cannot append to {root / 'status.tsv'}: the root vanished"))):
        assert result.ret == 6
        result.stdout.re_match_lines([rf"^!+ abbench: {line} !+$"])
        assert "_pytest.outcomes.Exit" not in result.stdout.str() + result.stderr.str()


# A Triton add kernel (the switch cannot change its TTGIR) whose side B gives a wrong result in round 1 only.
GATED_ROUND_1_FAILS = '''
import os
from pathlib import Path

import triton
import triton.language as tl
from pytest_abbench import Case, Op, Switch
''' + ADD_KERNEL_SOURCE + '''

def build(shape, device):
    import torch
    x = torch.arange(shape["n"], device=device, dtype=torch.float32)
    y = torch.empty_like(x)
    wrong = os.environ.get("ABBENCH_TEST_SWITCH") == "1" and not Path(__file__).with_name("b_ran").exists()
    if wrong:
        Path(__file__).with_name("b_ran").touch()
    return Case(run=lambda: (add_kernel[(1,)](x, y, N=shape["n"]), y)[1], expected=lambda: x + (2 if wrong else 1))


OPS = [Op("add", build=build, shapes={"smoke": [{"n": 16}]})]
SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
'''


def test_a_failed_round_1_says_what_the_gate_did_and_which_cells_lack_a_result(campaign_dir: pytest.Pytester,
                                                                               tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=GATED_ROUND_1_FAILS)
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "2", "--ab-samples", "1", "--ab-root",
                                               str(tmp_path / "root"), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1, skipped=2)
    result.stdout.fnmatch_lines([
        "== add: *, IR gate no_diff (compiled at smoke for cuda:90): round 2 skipped (round 1 showed the same code on both sides), but a round-1 "
        "cell did not finish ok, so the op is not reported as unchanged",
        # r1-B's failed shape costs that shape, not the cell: its results file is read (tests/test_failed_shapes.py).
        "   no verdict: 2 of 4 planned cells have no result to compare: r2-A SWITCH_NO_IR_DIFF, r2-B SWITCH_NO_IR_DIFF",
    ])
    assert "overridden" not in result.stdout.str() and "reads exactly like" not in result.stdout.str()
