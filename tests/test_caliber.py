"""Caliber through real pytest sessions: a campaign option provokes a real mismatch in real cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import simple_campaign

from pytest_abbench.status import read_status

FAST = ("--ab-ir-target", "none", "-p", "no:cacheprovider")


@pytest.mark.parametrize("option, axis", [('"direct_rep": "50"', "direct_repeat"),
                                          ('"tuner_cache": "shared:/tmp/abbench-test-tuner"', "tuner_cache"),
                                          ('"level": "core"', "bench_level")])
def test_side_option_mismatch_exits_4_and_withholds_the_verdict(campaign_dir: pytest.Pytester, tmp_path: Path,
                                                                option: str, axis: str) -> None:
    source = simple_campaign('"one"', switch=f"Switch(options_b={{{option}}})")
    source += 'OPS[0].shapes["core"] = [{"n": 32}]  # side B measures other shapes: bench_level and shape_mode\n'
    campaign_dir.makepyfile(c=source)
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "2", "--ab-root", str(root), *FAST)
    assert result.ret == 4
    result.stdout.fnmatch_lines([f"!!! [[]caliber[]] op=one axis={axis}: A=* B=*run_identity.json*",
                                 "*no verdict: caliber mismatch*"])
    assert "verdicts:" not in result.stdout.str()
    report = json.loads((root / "report.json").read_text())
    assert report["caliber_mismatch"] and report["ops"][0]["state"] == "no_verdict"

    # The same lines again with the release, the report produced, and the exit code as if all were fine.
    released = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(tmp_path / "r2"),
                                                 "--allow-caliber-mismatch", *FAST)
    assert released.ret == 0
    released.stdout.fnmatch_lines([f"!!! [[]caliber[]] op=one axis={axis}:*", "*geomean delta*verdicts:*"])


def test_mismatch_plus_a_failed_cell_still_exits_4(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    extra = '''
        def broken(shape, device):
            raise RuntimeError("this op cannot be built")
        '''
    source = simple_campaign('"one"', switch='Switch(options_b={"direct_rep": "50"})', extra=extra)
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
