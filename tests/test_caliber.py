"""Caliber: summary refuses each mismatched identity axis on disk; other shapes on one side provoke one in cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import other_shapes_campaign, simple_campaign, synthetic_root

from pytest_abbench.core.status import read_status

FAST = ("--ab-ir-target", "none", "-p", "no:cacheprovider")


def test_a_side_that_measures_other_shapes_exits_4_and_withholds_the_verdict(campaign_dir: pytest.Pytester,
                                                                             tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=other_shapes_campaign())
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "2", "--ab-root", str(root), *FAST)
    assert result.ret == 4
    result.stdout.fnmatch_lines(["!!! [[]caliber[]] op=one axis=shape_mode: A=* B=*run_identity.json*",
                                 "*no verdict: caliber mismatch*"])
    assert "verdicts:" not in result.stdout.str()
    report = json.loads((root / "report.json").read_text())
    assert report["caliber_mismatch"] and report["ops"][0]["state"] == "no_verdict"

    # The same lines again with the release, the report produced, and the exit code as if all were fine.
    released = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(tmp_path / "r2"),
                                                 "--allow-caliber-mismatch", *FAST)
    assert released.ret == 0
    released.stdout.fnmatch_lines(["!!! [[]caliber[]] op=one axis=shape_mode:*", "*geomean delta*verdicts:*"])


def test_mismatch_plus_a_failed_cell_still_exits_4(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    extra = '''
        def broken(shape, device):
            raise RuntimeError("this op cannot be built")
        '''
    source = other_shapes_campaign(extra=extra)
    source += 'OPS.append(Op("broken", build=broken, shapes={"smoke": [{"n": 1}]}))\n'
    campaign_dir.makepyfile(c=source)
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), *FAST)
    result.assert_outcomes(passed=2, failed=2)
    assert result.ret == 4
    assert {r.status for r in read_status(root) if r.op == "broken"} == {"FAILED_SHAPES"}


def test_shared_tuner_cache_warns_but_compares(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    shared = tmp_path / "tuner"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(tmp_path / "root"),
                                               "--ab-tuner-cache", f"shared:{shared}", *FAST)
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"[[]caliber warning[]] op=one axis=tuner_cache: side A tuned into a shared cache "
                                 f"(shared:{shared})*absolute latencies are not quotable"])
    assert "!!!" not in result.stdout.str()


def test_bad_tuner_cache_value_is_named(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-tuner-cache", "elsewhere")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*expected per-cell or shared:DIR, got 'elsewhere'*"])


def test_a_cell_that_crashed_before_its_identity_is_a_failure_not_a_caliber_mismatch(
        campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    """Side B's setup hook raises: B never writes run_identity.json. That is B's failure (exit 1), not exit 4."""
    extra = '''
        def boom():
            raise RuntimeError("the switch hook is broken")
        '''
    campaign_dir.makepyfile(c=simple_campaign('"one"', switch="Switch(setup_b=boom)", extra=extra))
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), *FAST)
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == 1
    out = result.stdout.str()
    assert "!!!" not in out and "caliber mismatch" not in out
    result.stdout.fnmatch_lines(["*cell one[[]r1-B[]] failed: rc 1*", "*the switch hook is broken*",
                                 "*[[]caliber[]] op=one: not compared: side B: *run_identity.json is missing*",
                                 "*no verdict*r1-B EXIT_1*"])
    assert not json.loads((root / "report.json").read_text())["caliber_mismatch"]


def _edit_identity(root: Path, cell: str, **changes: object) -> None:
    path = root / cell / "op" / "run_identity.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_summary_refuses_each_mismatched_axis(tmp_path: Path, capsys: "object") -> None:
    from pytest_abbench.cli import main

    for axis in ("backend", "device", "timer", "bench_level", "shape_mode", "tuner_cache", "direct_repeat"):
        root = tmp_path / axis
        synthetic_root(root, {"s": [0.1, 0.1]})
        _edit_identity(root, "r2_B", **{axis: "other"})
        assert main(["summary", str(root)]) == 4
        out = capsys.readouterr().out  # type: ignore[attr-defined]
        assert f"!!! [caliber] op=op axis={axis}:" in out and "B='other'" in out
        assert main(["summary", str(root), "--allow-caliber-mismatch"]) == 0
        capsys.readouterr()  # type: ignore[attr-defined]


def test_summary_refuses_record_record_by_name_and_missing_identity(tmp_path: Path, capsys: "object") -> None:
    from pytest_abbench.cli import main

    synthetic_root(tmp_path / "rr", {"s": [0.1, 0.1]})
    _edit_identity(tmp_path / "rr", "r1_B", autotune_mode="record")
    assert main(["summary", str(tmp_path / "rr")]) == 4
    assert "each side timed its own tuner's pick" in capsys.readouterr().out  # type: ignore[attr-defined]
    synthetic_root(tmp_path / "gone", {"s": [0.1, 0.1]})
    (tmp_path / "gone" / "r2_A" / "op" / "run_identity.json").write_text('{"backend": "cu')
    assert main(["summary", str(tmp_path / "gone")]) == 4
    assert "not valid JSON" in capsys.readouterr().out  # type: ignore[attr-defined]
    assert main(["summary", str(tmp_path / "nowhere")]) == 2


def test_side_b_supplement_differs_from_side_a_by_design_but_not_between_b_rounds(tmp_path: Path,
                                                                                   capsys: "object") -> None:
    from pytest_abbench.cli import main

    root = tmp_path / "root"
    synthetic_root(root, {"s": [0.1, 0.1]})
    side = {"autotune_side_record": "../../autotune/side-B/op.json"}
    _edit_identity(root, "r1_B", autotune_side_mode="record", autotune_side_record_hash="h1", **side)
    _edit_identity(root, "r2_B", autotune_side_mode="replay", autotune_side_record_hash="h1", **side)
    assert main(["summary", str(root)]) == 0, "side A has no supplement: not a mismatch"
    assert "!!! [caliber]" not in capsys.readouterr().out  # type: ignore[attr-defined]
    _edit_identity(root, "r2_B", autotune_side_record_hash="h2")
    assert main(["summary", str(root)]) == 4
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "!!! [caliber] op=op axis=autotune_side_record: r1-B='h1' r2-B='h2'" in out
    assert "side B's cells pinned the tuner keys only it has from different records" in out


def test_side_b_library_tuner_started_from_its_own_record_compares_by_the_record_it_grew_from(
        tmp_path: Path, capsys: "object") -> None:
    from pytest_abbench.cli import main

    root = tmp_path / "root"
    synthetic_root(root, {"s": [0.1, 0.1]})
    for cell in ("r1_A", "r2_A", "r1_B"):
        _edit_identity(root, cell, tuner_cache_seed="op-record")
    _edit_identity(root, "r1_A", tuner_cache_seed="fresh")  # it recorded the op's record from nothing
    _edit_identity(root, "r1_B", autotune_side_mode="record")
    _edit_identity(root, "r2_B", autotune_side_mode="replay", tuner_cache_seed="b-record", tuner_cache_base="op-record")
    assert main(["summary", str(root)]) == 0
    assert "!!! [caliber]" not in capsys.readouterr().out  # type: ignore[attr-defined]
    _edit_identity(root, "r2_B", tuner_cache_base="other")
    assert main(["summary", str(root)]) == 4
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "the library tuner started from different records (seed 'op-record' vs 'other')" in out
    assert "axis=tuner_cache_seed: r1-B='op-record' r2-B='other'" in out
