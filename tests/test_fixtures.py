"""Cells are parametrized tests whose fixtures carry the checks: listed, overridable, usable by hand."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from helpers import IR_CAMPAIGN, other_shapes_campaign, simple_campaign

from pytest_abbench.core.status import read_status

FAST = ("--ab-ir-target", "none", "-p", "no:cacheprovider")


def test_fixtures_are_listed_with_their_docstrings(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    result = campaign_dir.runpytest_subprocess("--fixtures", "c.py", "-p", "no:cacheprovider")
    assert result.ret == 0
    # pytest orders fixtures by their location as text ("fixtures.py:108" before "fixtures.py:94"): each
    # fixture is checked with its own docstring, not in one order.
    for fixture, doc in (("abbench_cell", "The A/B cell this test measures"), ("abbench_ir_gate", "IR gate: skip"),
                         ("abbench_caliber", "Caliber check:")):
        result.stdout.fnmatch_lines([f"{fixture} -- *fixtures.py:*", f"    {doc}*"])
    assert not (campaign_dir.path / ".abbench").exists()  # listing fixtures claims no root
    ids = campaign_dir.runpytest_subprocess("--collect-only", "-q", "c.py", "--ab-rounds", "2", "-p", "no:cacheprovider")
    ids.stdout.fnmatch_lines(["c.py::one[[]r1-A[]]", "c.py::one[[]r1-B[]]", "c.py::one[[]r2-B[]]", "c.py::one[[]r2-A[]]"])


def test_a_conftest_override_of_the_ir_gate_takes_effect(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    campaign_dir.makeconftest(textwrap.dedent('''
        import pytest

        @pytest.fixture
        def abbench_ir_gate(abbench_cell):
            """A team's own gate: only round 1 is worth running."""
            if abbench_cell.key.round > 1:
                pytest.skip("gated by conftest")
    '''))
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "2", "--ab-root", str(root), "-rs", *FAST)
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(["SKIPPED [[]2[]] *gated by conftest"])
    assert {(r.round, r.side) for r in read_status(root)} == {(1, "A"), (1, "B")}


HAND_WRITTEN = '''
import pytest

@pytest.mark.abbench(campaign="camp/{campaign}", op="{op}")
def test_by_hand(abbench_cell, abbench_ir_gate, abbench_caliber):
    outcome = abbench_cell.run()
    assert outcome.key.op == "{op}"
'''


def test_a_hand_written_cell_test_gets_the_same_exit_4(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    """The campaign is not collected itself (only the test file is named): the hand-written test runs its cells."""
    camp = campaign_dir.mkdir("camp")
    (camp / "mixed.py").write_text(other_shapes_campaign())
    campaign_dir.makepyfile(test_hand=HAND_WRITTEN.format(campaign="mixed.py", op="one"))
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("test_hand.py", "--ab-rounds", "2", "--ab-root", str(root), "-v",
                                               *FAST)
    assert result.ret == 4
    result.stdout.fnmatch_lines(["test_hand.py::test_by_hand[[]r1-A[]]*", "*!!! [[]caliber[]] op=one axis=shape_mode*",
                                 "*no verdict: caliber mismatch*"])
    result.assert_outcomes(passed=4)
    assert json.loads((root / "report.json").read_text())["caliber_mismatch"] is True


@pytest.mark.slow
def test_a_hand_written_cell_test_gets_the_same_ir_gate_skip(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeini("[pytest]\n")
    camp = pytester.mkdir("camp")
    (camp / "ircamp.py").write_text(IR_CAMPAIGN)
    pytester.makepyfile(test_hand=HAND_WRITTEN.format(campaign="ircamp.py", op="add"))
    root = tmp_path / "root"
    result = pytester.runpytest_subprocess("test_hand.py", "--ab-rounds", "2", "--ab-root", str(root), "-rs",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(["NO_IR_DIFF [[]2[]] *SWITCH_NO_IR_DIFF: round 1 TTGIR of add is identical*"])
    assert {(r.round, r.status) for r in read_status(root)} == {(1, "ok"), (2, "SWITCH_NO_IR_DIFF")}


def test_a_cell_test_without_a_campaign_is_a_clear_error(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(test_bad='''
        import pytest

        @pytest.mark.abbench(campaign="nowhere.py", op="x")
        def test_cell(abbench_cell):
            pass
    ''')
    result = campaign_dir.runpytest_subprocess("test_bad.py", "-p", "no:cacheprovider")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*nowhere.py*"])
