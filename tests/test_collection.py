"""Collection: ids, side alternation, round-major order, -k, name validation, option errors."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from helpers import CAMPAIGNS, simple_campaign


def test_ids_alternate_sides_by_round(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(topk=simple_campaign('"topk"'))
    result = campaign_dir.runpytest("topk.py", "--ab-rounds", "6", "--collect-only", "-q")
    result.stdout.fnmatch_lines([
        "topk.py::topk[[]r1-A[]]", "topk.py::topk[[]r1-B[]]", "topk.py::topk[[]r2-B[]]", "topk.py::topk[[]r2-A[]]",
        "topk.py::topk[[]r3-A[]]", "topk.py::topk[[]r3-B[]]", "topk.py::topk[[]r4-B[]]", "topk.py::topk[[]r4-A[]]",
        "topk.py::topk[[]r5-A[]]", "topk.py::topk[[]r5-B[]]", "topk.py::topk[[]r6-B[]]", "topk.py::topk[[]r6-A[]]",
        "12 tests collected*",
    ])
    assert not (campaign_dir.path / ".abbench").exists(), "--collect-only must not create a root"


def test_rounds_interleave_across_ops(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(two=simple_campaign('"one", "two"'))
    result = campaign_dir.runpytest("two.py", "--ab-rounds", "2", "--collect-only", "-q")
    result.stdout.fnmatch_lines([
        "two.py::one[[]r1-A[]]", "two.py::one[[]r1-B[]]", "two.py::two[[]r1-A[]]", "two.py::two[[]r1-B[]]",
        "two.py::one[[]r2-B[]]", "two.py::one[[]r2-A[]]", "two.py::two[[]r2-B[]]", "two.py::two[[]r2-A[]]",
    ])


def test_k_selects_op_round_and_side(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(ops=simple_campaign('"one", "two"'))
    result = campaign_dir.runpytest(".", "--ab-rounds", "3", "--collect-only", "-q", "-k", "two and r2")
    result.stdout.fnmatch_lines(["ops.py::two[[]r2-B[]]", "ops.py::two[[]r2-A[]]", "2/12 tests collected*"])
    result = campaign_dir.runpytest(".", "--ab-rounds", "3", "--collect-only", "-q", "-k", "A and not r1")
    result.stdout.fnmatch_lines(["ops.py::one[[]r2-A[]]", "ops.py::two[[]r2-A[]]", "ops.py::one[[]r3-A[]]",
                                 "ops.py::two[[]r3-A[]]", "4/12 tests collected*"])


def test_test_files_are_not_campaigns(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(helper="import pytest_abbench\nX = 1\n")
    campaign_dir.makepyfile(c=simple_campaign('"only"'))
    result = campaign_dir.runpytest(".", "--collect-only", "-q", "--ab-rounds", "1")
    result.stdout.fnmatch_lines(["c.py::only[[]r1-A[]]", "c.py::only[[]r1-B[]]", "2 tests collected*"])


@pytest.mark.parametrize("name", ["../escape", "a/b", ".."])
def test_bad_op_name_is_a_collection_error_naming_file_and_op(campaign_dir: pytest.Pytester, name: str) -> None:
    campaign_dir.makepyfile(bad=simple_campaign(repr(name)))
    result = campaign_dir.runpytest("bad.py", "--collect-only")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*bad.py: op name {name!r} is not allowed*"])


@pytest.mark.parametrize("value, message", [("abc", "expected a number of seconds, got 'abc'"),
                                            ("-1", "must be > 0 seconds, got '-1'")])
def test_bad_cell_timeout_is_a_usage_error_naming_the_value(campaign_dir: pytest.Pytester, value: str,
                                                            message: str) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"only"'))
    result = campaign_dir.runpytest("c.py", f"--cell-timeout={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--cell-timeout*{message}*"])


@pytest.mark.parametrize("value, message", [("abc", "expected a whole number, got 'abc'"),
                                            ("-1", "must be >= 0, got '-1'"),
                                            ("100", "must be below 100 ms, Triton's own repeats*got '100'")])
def test_bad_autotune_screen_is_a_usage_error_naming_the_value(campaign_dir: pytest.Pytester, value: str,
                                                               message: str) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"only"'))
    result = campaign_dir.runpytest("c.py", f"--ab-autotune-screen={value}", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--ab-autotune-screen*{message}*"])


def test_bad_cell_timeout_from_environment_names_the_variable(campaign_dir: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"only"'))
    monkeypatch.setenv("CELL_TIMEOUT", "soon")
    result = campaign_dir.runpytest("c.py", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*environment variable CELL_TIMEOUT='soon'*expected a number of seconds*"])


@pytest.mark.parametrize("value", ["abc", "\u00b2", "0"])
def test_bad_compile_jobs_is_refused_before_any_cell(campaign_dir: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path, value: str) -> None:
    """ABBENCH_COMPILE_JOBS is read when cells compile; a bad value ("\u00b2" passes str.isdigit) stops the session
    up front with the variable named, not with a traceback per cell and a root without status.tsv."""
    campaign_dir.makepyfile(c=simple_campaign('"only"'))
    monkeypatch.setenv("ABBENCH_COMPILE_JOBS", value)
    result = campaign_dir.runpytest("c.py", "--ab-ir-only", "--ab-root", str(tmp_path / "root"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*environment variable ABBENCH_COMPILE_JOBS={value!r}: not a whole number >= 1*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_duplicate_op_across_campaigns_is_the_second_files_collection_error(campaign_dir: pytest.Pytester) -> None:
    """A campaign that cannot run is a collection error, 2, as the README says; it was a usage error, 4, the
    caliber mismatch's code."""
    campaign_dir.makepyfile(a=simple_campaign('"same"'), b=simple_campaign('"same"'))
    result = campaign_dir.runpytest(".", "--ab-rounds", "1")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*ERROR collecting b.py*",
                                 "*op name 'same' is declared by both */a.py and */b.py: op names share one root "
                                 "and must be unique; rename one (a perf_report's plot_name, a test's name) or run "
                                 "the files in separate sessions*"])


def test_a_campaign_reached_through_a_symlinked_folder_is_one_file(campaign_dir: pytest.Pytester) -> None:
    """The session keys campaigns by resolved path: the duplicate-op check took the link and its target for two
    files declaring the same ops."""
    (campaign_dir.path / "real").mkdir()
    (campaign_dir.path / "real" / "c.py").write_text(simple_campaign('"one"'))
    (campaign_dir.path / "link").symlink_to(campaign_dir.path / "real")
    result = campaign_dir.runpytest("link/c.py", "--ab-rounds", "1", "--collect-only", "-q")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["2 tests collected*"])


def test_skip_timed_skips_a_timed_run_and_ir_triage_still_compiles(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(vendor=simple_campaign('"only"', extra='SKIP_TIMED = "its library times on a GPU only"'))
    result = campaign_dir.runpytest("vendor.py", "--ab-rounds", "1", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] *: vendor.py: its library times on a GPU only "
                                 "(IR triage still runs here: --ab-ir-only)"])
    result = campaign_dir.runpytest_subprocess("vendor.py", "--ab-ir-only", "--ab-ir-target", "cuda:90",
                                               "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_skip_timed_that_is_no_reason_is_a_collection_error(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(vendor=simple_campaign('"only"', extra="SKIP_TIMED = True"))
    result = campaign_dir.runpytest("vendor.py", "--collect-only")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*vendor.py: SKIP_TIMED is bool, not a reason (str) or None*"])


def test_liger_campaign_without_liger_is_skipped_with_one_reason(campaign_dir: pytest.Pytester) -> None:
    if importlib.util.find_spec("liger_kernel") is not None:
        pytest.skip("liger-kernel is installed here: the skip path cannot be shown")
    result = campaign_dir.runpytest_subprocess(str(CAMPAIGNS / "liger.py"), "--ab-ir-only", "--ab-ir-target",
                                               "cuda:90", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] *liger.py: liger-kernel is not installed (pip install liger-kernel*"])


def test_a_thread_started_at_import_does_not_keep_pytest_from_exiting(campaign_dir: pytest.Pytester) -> None:
    """pytest used to print its summary and never exit: the campaign's import started a non-daemon thread."""
    campaign_dir.makepyfile(c=simple_campaign('"one"') + "\nimport threading, time\n"
                            "threading.Thread(target=time.sleep, args=(600,), name='poller').start()\n")
    result = campaign_dir.runpytest_subprocess("c.py", "--collect-only", "-p", "no:cacheprovider", timeout=120)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*abbench: importing *c.py started thread(s) 'poller': they run as daemons*"])


def test_a_campaign_whose_import_hangs_is_a_collection_error_naming_where_it_waits(
        campaign_dir: pytest.Pytester) -> None:
    """Collection hung with no bound and no word: the import waited on something that never came."""
    campaign_dir.makepyfile(c=simple_campaign('"one"') + "\nimport threading\n"
                            "def wait_for_the_license_server():\n"
                            "    threading.Event().wait()\n"
                            "wait_for_the_license_server()\n")
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-import-timeout", "2", "--collect-only",
                                               "-p", "no:cacheprovider", timeout=60)
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    result.stdout.fnmatch_lines(["*c.py: importing it did not finish in 2 s (--ab-import-timeout); it waits in "
                                 "threading.py:* in wait; c.py:* in wait_for_the_license_server*"])


def test_pytest_help_lists_every_abbench_option(pytester: pytest.Pytester) -> None:
    """argparse formats each help text with %: a bare '%' in one of them crashed `pytest --help`."""
    result = pytester.runpytest_subprocess("--help", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stderr.str()[-2000:]
    out = result.stdout.str()
    for option in ("--ab-rounds", "--ab-providers", "--ab-reference", "--ab-kernel-import", "--ab-precompile"):
        assert option in out
    assert "5% level" in out
