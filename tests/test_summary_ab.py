"""``abbench summary --ab``: two separate runs of one campaign, compared cell by cell, each on its own record."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from helpers import simple_campaign, synthetic_root
from pytest_abbench.core.identity import file_hash

FAST = ("--ab-ir-target", "none", "--ab-samples", "1", "-p", "no:cacheprovider")


def summary(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.run(sys.executable, "-m", "pytest_abbench.cli", "summary", *args)


def test_two_separate_runs_compare_clean_and_a_differing_record_is_refused(campaign_dir: pytest.Pytester,
                                                                           tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    roots = [tmp_path / "run1", tmp_path / "run2"]
    for root in roots:
        result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), *FAST)
        assert result.ret == 0, result.stdout.str()
        # Nothing is autotuned: each run's record is empty.
        assert json.loads((root / "autotune" / "one.json").read_text())["entries"] == []
    run1, run2 = roots

    result = summary(campaign_dir, "--ab", str(run1), str(run2))
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["== one@A: rounds 1/1, markers clean, caliber ok*",
                                 "== one@B: rounds 1/1, markers clean, caliber ok*",
                                 "abbench: exit 0: *"])
    assert "!!! [caliber]" not in result.stdout.str()

    result = summary(campaign_dir, "--ab", str(run1 / "r1_A" / "one"), str(run2 / "r1_A" / "one"))
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["== one: rounds 1/1, markers clean, caliber ok*"])

    # Like with like: the two runs' records must hold the same choices.
    record = {"schema": 1, "entries": [{"kernel": "m:k", "key": ["8"], "config": {"num_warps": 4}}]}
    (run2 / "autotune" / "one.json").write_text(json.dumps(record))
    result = summary(campaign_dir, "--ab", str(run1 / "r1_A" / "one"), str(run2 / "r1_A" / "one"))
    assert result.ret == 4
    result.stdout.fnmatch_lines([f"!!! [[]caliber[]] op=one axis=autotune_mode: A='record' B='record' - the two runs "
                                 f"pinned different autotune choices: {run1}/autotune/one.json (0 entries) and "
                                 f"{run2}/autotune/one.json (1 entry) differ*"])


def test_ab_takes_status_from_each_runs_rows(tmp_path: Path, campaign_dir: pytest.Pytester) -> None:
    # Two roots written as cells write them; run 2's r1-B timed out (its results file is still there).
    synthetic_root(tmp_path / "x", {"s": [0.1]})
    synthetic_root(tmp_path / "y", {"s": [0.1]}, failed=(1, "B"))
    for root in (tmp_path / "x", tmp_path / "y"):
        record = root / "autotune" / "op.json"
        record.parent.mkdir()
        record.write_text('{"entries": [], "schema": 1}')
        for identity in root.glob("r*/op/run_identity.json"):
            identity.write_text(json.dumps({**json.loads(identity.read_text()), "autotune_record": str(record),
                                            "autotune_record_hash": file_hash(record)}))
    result = summary(campaign_dir, "--ab", str(tmp_path / "x"), str(tmp_path / "y"))
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["abbench: exit 1: *op@B[[]r1-B[]]*"])


def test_ab_refuses_a_cell_folder_against_a_root(tmp_path: Path, campaign_dir: pytest.Pytester) -> None:
    synthetic_root(tmp_path / "x", {"s": [0.1]})
    result = summary(campaign_dir, "--ab", str(tmp_path / "x" / "r1_A" / "op"), str(tmp_path / "x"))
    assert result.ret == 2
    result.stderr.fnmatch_lines(["*r1_A/op is a cell folder but * is not: give two cell folders or two roots"])


def test_summary_refuses_the_old_ab_rounds_flag_with_a_reason(tmp_path: Path, campaign_dir: pytest.Pytester) -> None:
    synthetic_root(tmp_path / "x", {"s": [0.1]})
    for extra in (["--ab-rounds"], ["--ab-rounds", "6"]):
        result = summary(campaign_dir, str(tmp_path / "x"), *extra)
        assert result.ret == 2
        result.stderr.fnmatch_lines(["abbench summary: --ab-rounds is not a summary option: *"])


def test_summary_takes_the_gate_scope_and_refuses_another(tmp_path: Path, campaign_dir: pytest.Pytester) -> None:
    synthetic_root(tmp_path / "x", {"s": [0.1, 0.1]})
    result = summary(campaign_dir, str(tmp_path / "x"), "--ab-gate", "ops")
    assert result.ret == 2
    result.stderr.fnmatch_lines(["*--ab-gate: 'ops' is not one of shapes, geomean*"])


def test_summary_gates_on_the_geomean_alone_when_asked(tmp_path: Path, campaign_dir: pytest.Pytester) -> None:
    # One shape of four +10%: the shape gate trips, the geomean (+2.4%) stays below 5%.
    deltas = {"big": [0.10, 0.101, 0.099, 0.10]} | {f"n={n}": [0.001, -0.001, 0.0005, -0.0005] for n in range(3)}
    synthetic_root(tmp_path / "x", deltas)
    assert summary(campaign_dir, str(tmp_path / "x"), "--ab-fail-if-slower", "5").ret == 7
    assert summary(campaign_dir, str(tmp_path / "x"), "--ab-fail-if-slower", "5", "--ab-gate", "geomean").ret == 0


def test_ab_of_two_runs_counts_rounds_the_ir_gate_skipped_as_done(campaign_dir: pytest.Pytester,
                                                                  tmp_path: Path) -> None:
    from helpers import IR_CAMPAIGN
    campaign_dir.makepyfile(ircamp=IR_CAMPAIGN)
    roots = [tmp_path / "run1", tmp_path / "run2"]
    for root in roots:
        # add's switch changes no code: round 2 is skipped by the IR gate in both runs; torchonly runs both.
        result = campaign_dir.runpytest_subprocess("ircamp.py", "-k", "add or torchonly", "--ab-rounds", "2",
                                                   "--ab-root",
                                                   str(root), "--ab-samples", "1", "-p", "no:cacheprovider")
        assert result.ret == 0, result.stdout.str()
    result = summary(campaign_dir, "--ab", *map(str, roots))
    out = result.stdout.str()
    assert result.ret == 0, out
    assert "INCOMPLETE" not in out
    result.stdout.fnmatch_lines(["== add@A: rounds 1/2*", "   switch changed no generated code; 1 round skipped*",
                                 "== torchonly@A: rounds 2/2*", "abbench: exit 0: *"])
