"""--ab-resume in the common cases: a campaign edited between runs, a subset of its ops, fewer rounds.

Real pytest sessions on a real root; the root's files are the interface.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from pytest_abbench.core.status import read_status

FAST = ("--ab-ir-target", "none", "-p", "no:cacheprovider")


def two_ops(n_two: int) -> str:
    """Ops ``one`` (n=8) and ``two`` (n=``n_two``), one shape each, one build."""
    return f'''
from pytest_abbench import Case, Op, Switch

def build(shape, device):
    import torch
    x = torch.arange(shape["n"], dtype=torch.float32)
    return Case(run=lambda: x + 1, expected=lambda: x + 1)

OPS = [Op("one", build=build, shapes={{"smoke": [{{"n": 8}}]}}),
       Op("two", build=build, shapes={{"smoke": [{{"n": {n_two}}}]}})]
SWITCH = Switch(env_b={{"ABBENCH_TEST_SWITCH": "1"}})
'''


def _shapes(cell: Path) -> list[str]:
    return [json.loads(line)["shape"] for line in (cell / "results.jsonl").read_text().splitlines()]


def test_an_edited_op_runs_again_alone_and_a_subset_resumes(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    root = tmp_path / "root"
    campaign_dir.makepyfile(c=two_ops(8))
    campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), *FAST).assert_outcomes(
        passed=4)
    one_log = root / "r1_A" / "one" / "run.log"
    written = one_log.stat().st_mtime_ns

    campaign_dir.makepyfile(c=two_ops(16))  # a fix to op two's shapes; op one is untouched
    edited = campaign_dir.runpytest_subprocess("c.py", "--ab-resume", str(root), "--ab-rounds", "1", *FAST)
    edited.assert_outcomes(passed=4)
    edited.stdout.fnmatch_lines([f"abbench: resume: op two changed (shapes), its 2 cells run again (the old ones "
                                 f"are kept in {root / 'attempts'}); 1 op unchanged"])
    assert one_log.stat().st_mtime_ns == written, "an unchanged op's finished cells are read from disk"
    assert _shapes(root / "r1_B" / "two") == ["n=16"], "the changed op was measured again"
    aside = next((root / "attempts").glob("two_*"))
    assert _shapes(aside / "r1_A" / "two") == ["n=8"], "its old cells are kept, not overwritten"
    assert {(r.op, r.side) for r in read_status(aside)} == {("two", "A"), ("two", "B")}
    old_run = campaign_dir.run(sys.executable, "-m", "pytest_abbench.cli", "summary", str(aside))
    assert old_run.ret == 0 and "== two: rounds 1/1" in old_run.stdout.str(), "the set-aside op is a root of its own"
    assert sorted((r.op, r.side) for r in read_status(root)) == [("one", "A"), ("one", "B"), ("two", "A"),
                                                                 ("two", "B")]
    assert all(o["state"] == "verdict" for o in json.loads((root / "report.json").read_text())["ops"])

    subset = campaign_dir.runpytest_subprocess("c.py", "-k", "one", "--ab-resume", str(root), "--ab-rounds", "1",
                                               *FAST)
    subset.assert_outcomes(passed=2)
    subset.stdout.fnmatch_lines(["abbench: resume: 1 op unchanged; 1 op of the root not in this session, kept as "
                                 "they are"])
    manifest = json.loads((root / "campaign.json").read_text())
    assert set(manifest["op_fingerprints"]) == {"one", "two"} and set(manifest["plan"]["ops"]) == {"one", "two"}
    # The root's report still covers op two, which this session did not select (it held only op one before).
    report = json.loads((root / "report.json").read_text())
    assert {o["op"] for o in report["ops"]} == {"one", "two"} and report["complete"] is True
    assert "== two: rounds 1/1" in subset.stdout.str()


def test_resuming_with_fewer_rounds_is_refused_and_keeps_the_report(campaign_dir: pytest.Pytester,
                                                                    tmp_path: Path) -> None:
    root = tmp_path / "root"
    campaign_dir.makepyfile(c=two_ops(8))
    campaign_dir.runpytest_subprocess("c.py", "-k", "one", "--ab-rounds", "2", "--ab-root", str(root),
                                      *FAST).assert_outcomes(passed=4)
    report = (root / "report.md").read_text()
    fewer = campaign_dir.runpytest_subprocess("c.py", "-k", "one", "--ab-resume", str(root), "--ab-rounds", "1",
                                              *FAST)
    assert fewer.ret == 6
    fewer.stdout.fnmatch_lines([f"*cannot resume {root} with 1 round: it was planned with 2, and a 1-round report "
                                f"would replace the one its 2 rounds make; resume with --ab-rounds 2 (or more)*"])
    assert (root / "report.md").read_text() == report
    assert json.loads((root / "campaign.json").read_text())["plan"]["rounds"] == 2


def test_a_root_with_cells_is_used_again_only_with_resume(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    """Without --ab-resume, a root of an earlier session is refused before any cell: its numbers (and a cell's
    shapes already on disk) would otherwise be reported as this session's, under this session's switch."""
    root = tmp_path / "root"
    campaign_dir.makepyfile(c=two_ops(8))
    campaign_dir.runpytest_subprocess("c.py", "-k", "one", "--ab-rounds", "1", "--ab-root", str(root),
                                      *FAST).assert_outcomes(passed=2)
    status, report = (root / "status.tsv").read_text(), (root / "report.md").read_text()
    again = campaign_dir.runpytest_subprocess("c.py", "-k", "one", "--ab-rounds", "1", "--ab-root", str(root),
                                              "--ab-switch-env", "OTHER_SWITCH=1", *FAST)
    assert again.ret == 6
    again.stdout.fnmatch_lines([f"*root {root} already holds 2 status rows of an earlier session; continue that "
                                f"campaign with --ab-resume={root}, or give a new --ab-root*"])
    again.assert_outcomes()  # no cell ran
    assert (root / "status.tsv").read_text() == status and (root / "report.md").read_text() == report


def test_resuming_with_another_caliber_option_is_refused_before_any_cell(campaign_dir: pytest.Pytester,
                                                                          tmp_path: Path) -> None:
    """--ab-spawn changed on resume: refused up front, naming the option and both values
    (it used to run the new cells, then exit 4, and the root stayed at exit 4 for good)."""
    root = tmp_path / "root"
    campaign_dir.makepyfile(c=two_ops(8))
    campaign_dir.runpytest_subprocess("c.py", "-k", "one", "--ab-rounds", "2", "--ab-root", str(root), "-x",
                                      "--ab-spawn", "exec", *FAST, "--deselect", "c.py::one[r2-A]")
    status = (root / "status.tsv").read_text()
    other = campaign_dir.runpytest_subprocess("c.py", "-k", "one", "--ab-rounds", "2", "--ab-resume", str(root),
                                              "--ab-spawn", "fork", *FAST)
    assert other.ret == 6
    other.stdout.fnmatch_lines([f"*cannot resume {root}: --ab-spawn: the root has exec, this session fork; *"
                                "resume with --ab-spawn=exec*"])
    other.assert_outcomes()
    assert (root / "status.tsv").read_text() == status
    same = campaign_dir.runpytest_subprocess("c.py", "-k", "one", "--ab-rounds", "2", "--ab-resume", str(root),
                                             "--ab-spawn", "exec", *FAST)
    assert same.ret == 0, same.stdout.str()[-2000:]
    assert len(read_status(root)) == 4


def test_a_moved_root_resumes_and_runs_its_missing_cells(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    """Nothing in a root depends on its absolute path: a copy elsewhere resumes without a caliber mismatch."""
    root, moved = tmp_path / "root", tmp_path / "elsewhere" / "moved"
    campaign_dir.makepyfile(c=two_ops(8))
    campaign_dir.runpytest_subprocess("c.py", "-k", "one", "--ab-rounds", "2", "--ab-root", str(root), *FAST,
                                      "--deselect", "c.py::one[r2-A]").assert_outcomes(passed=3)
    shutil.copytree(root, moved)
    shutil.rmtree(root)
    resumed = campaign_dir.runpytest_subprocess("c.py", "-k", "one", "--ab-rounds", "2", "--ab-resume", str(moved),
                                                *FAST)
    assert resumed.ret == 0, resumed.stdout.str()[-3000:]
    assert "[caliber]" not in resumed.stdout.str()
    resumed.assert_outcomes(passed=4)  # three read from the root, one run
    assert len(read_status(moved)) == 4


def test_resuming_without_the_roots_allow_no_ir_diff_is_refused_naming_how(campaign_dir: pytest.Pytester,
                                                                            tmp_path: Path) -> None:
    """The root timed every round of an op whose code did not change (--ab-allow-no-ir-diff).  Resumed without it,
    the report said the op's rounds past 1 were skipped and hid the round the root had measured."""
    root = tmp_path / "root"
    campaign_dir.makepyfile(c=two_ops(8))
    campaign_dir.runpytest_subprocess("c.py", "-k", "one", "--ab-rounds", "2", "--ab-root", str(root),
                                      "--ab-allow-no-ir-diff", *FAST, "--deselect", "c.py::one[r2-A]")
    status = (root / "status.tsv").read_text()
    other = campaign_dir.runpytest_subprocess("c.py", "-k", "one", "--ab-rounds", "2", "--ab-resume", str(root),
                                              *FAST)
    assert other.ret == 6
    other.stdout.fnmatch_lines([f"*cannot resume {root}: --ab-allow-no-ir-diff: the root has on, this session off; "
                                "the ops whose code did not change would be skipped past round 1 where the root timed "
                                "them, or timed where it skipped them; resume with --ab-allow-no-ir-diff, or start a "
                                "new root*"])
    assert (root / "status.tsv").read_text() == status
    same = campaign_dir.runpytest_subprocess("c.py", "-k", "one", "--ab-rounds", "2", "--ab-resume", str(root),
                                             "--ab-allow-no-ir-diff", *FAST)
    assert same.ret == 0, same.stdout.str()[-2000:]


def test_resuming_a_root_another_campaign_wrote_is_refused(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    root = tmp_path / "root"
    campaign_dir.makepyfile(c=two_ops(8), d=two_ops(8).replace('"one"', '"three"').replace('"two"', '"four"'))
    campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root),
                                      *FAST).assert_outcomes(passed=4)
    status = (root / "status.tsv").read_text()
    other = campaign_dir.runpytest_subprocess("d.py", "--ab-resume", str(root), "--ab-rounds", "1", *FAST)
    # Before: one notice line, the other campaign's cells run into the root, exit 0.
    assert other.ret == 6, other.stdout.str()
    other.stdout.fnmatch_lines([f"*cannot resume {root}: it was written by *c.py (ops one, two), and this "
                                "session's *d.py shares no campaign file and no op with it; give the root this "
                                "campaign wrote, or a new --ab-root*"])
    other.assert_outcomes()
    assert (root / "status.tsv").read_text() == status
    # The same campaign, or a subset of its ops, still resumes.
    campaign_dir.runpytest_subprocess("c.py", "-k", "one", "--ab-resume", str(root), "--ab-rounds", "1",
                                      *FAST).assert_outcomes(passed=2)
