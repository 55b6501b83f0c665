"""Cells end to end: real child processes that pass, exit, hang, get killed, segfault, print markers."""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import pytest

from helpers import FAULT_CAMPAIGN, simple_campaign, process_alive
from pytest_abbench.core.budget import BUDGET_FILE
from pytest_abbench.core.status import COLUMNS, read_status


@pytest.fixture
def fault_run(campaign_dir: pytest.Pytester, tmp_path: Path) -> tuple[pytest.RunResult, Path, Path]:
    """Side A of round 1 of every fault op; the hanging op in a second session (resuming the root) with a 10 s
    cell timeout.

    (A cell that imports torch can need several seconds on a loaded 2-core machine,
    so only the hang gets the short timeout.)  Both sessions share one root.
    """
    campaign_dir.makepyfile(faults=FAULT_CAMPAIGN)
    root = tmp_path / "root"
    pidfile = tmp_path / "hang.pid"
    common = ("faults.py", "--ab-rounds", "1", "--ab-root", str(root), "--ab-ir-target", "none",
              "-p", "no:cacheprovider")
    result = campaign_dir.runpytest_subprocess(*common, "-k", "r1-A and not hang", "--cell-timeout", "120")
    os.environ["HANG_PIDFILE"] = str(pidfile)
    try:
        # The same root, continued: a root that holds cells is used again only with --ab-resume.
        hang = campaign_dir.runpytest_subprocess(*common, "--ab-resume", str(root), "-k", "r1-A and hang",
                                                 "--cell-timeout", "10")
    finally:
        del os.environ["HANG_PIDFILE"]
    hang.assert_outcomes(failed=1)
    hang.stdout.fnmatch_lines(["*cell hang[[]r1-A[]] failed: rc 124 TIMEOUT (cell timeout expired; process group killed)*"])
    return result, root, pidfile


def test_fault_cells_are_named_and_recorded(fault_run: tuple[pytest.RunResult, Path, Path]) -> None:
    result, root, pidfile = fault_run
    result.assert_outcomes(passed=2, failed=4)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*cell exit3[[]r1-A[]] failed: rc 3 EXIT_3*",
        "*cell killself[[]r1-A[]] failed: rc 137 KILLED (SIGKILL, often out of memory)*",
        "*cell segv[[]r1-A[]] failed: rc 139 SEGFAULT*",
        "*cell wrong[[]r1-A[]] failed: FAILED_SHAPES (1 failed, 0 ok shapes)*",
    ], consecutive=False)

    text = (root / "status.tsv").read_text()
    assert text.count("round\top\tside") == 1, "header written exactly once"
    assert text.splitlines()[0].split("\t") == list(COLUMNS)
    rows = {r.op: r for r in read_status(root)}
    assert set(rows) == {"ok", "exit3", "hang", "killself", "segv", "markers", "wrong"}
    assert (rows["ok"].rc, rows["ok"].status, rows["ok"].success, rows["ok"].failed) == (0, "ok", 1, 0)
    assert (rows["exit3"].rc, rows["exit3"].status) == (3, "EXIT_3")
    assert (rows["hang"].rc, rows["hang"].status) == (124, "TIMEOUT")
    assert 10.0 <= rows["hang"].elapsed_s < 20  # the 10 s timeout, then SIGTERM and SIGKILL to the group
    assert (rows["killself"].rc, rows["killself"].status) == (137, "KILLED")
    assert (rows["segv"].rc, rows["segv"].status) == (139, "SEGFAULT")
    assert (rows["wrong"].success, rows["wrong"].failed) == (0, 1)
    m = rows["markers"]
    # The op prints marker words itself: they reach run.log but are not the plugin's markers, so none counts.
    assert (m.AUTOTUNE_REPLAY_FALLBACK, m.BENCHMARK_DIRECT_NO_CUDAGRAPH, m.BENCHMARK_CAPTURE_POISONED) == (0, 0, 0)
    assert "AUTOTUNE_REPLAY_FALLBACK kernel=k key=[1]" in (root / "r1_A" / "markers" / "run.log").read_text()
    assert m.status == "ok", "markers degrade a measurement, they do not fail a cell"
    assert all(r.switch == "ABBENCH_TEST_SWITCH=1" for r in rows.values())


def test_timeout_kills_the_whole_process_group(fault_run: tuple[pytest.RunResult, Path, Path]) -> None:
    _, _, pidfile = fault_run
    child, grandchild = (int(p) for p in pidfile.read_text().split())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (process_alive(child) or process_alive(grandchild)):
        time.sleep(0.1)
    assert not process_alive(child) and not process_alive(grandchild)


def test_the_outer_guard_leaves_a_timeout_row_and_the_budget_is_in_the_root(campaign_dir: pytest.Pytester,
                                                                           tmp_path: Path) -> None:
    """pytest-timeout's guard fires in the parent: the cell's group is killed and the cell still gets its row."""
    campaign_dir.makepyfile(faults=FAULT_CAMPAIGN)
    # Stands for a parent that hangs past its guard: in real use the guard is the cell's deadlines plus 300 s
    # (core.budget), far too long for a test, so it is cut to 4 s while the child's own timeout stays 120 s.
    campaign_dir.makeconftest("from pytest_abbench.core.budget import CellBudget\n"
                              "CellBudget.guard_s = lambda self, round_no: 4.0\n")
    root, pidfile = tmp_path / "root", tmp_path / "hang.pid"
    os.environ["HANG_PIDFILE"] = str(pidfile)
    try:
        result = campaign_dir.runpytest_subprocess("faults.py", "--ab-rounds", "1", "--ab-root", str(root),
                                                   "--ab-ir-target", "none", "-k", "r1-A and hang",
                                                   "--cell-timeout", "120", "-p", "no:cacheprovider")
    finally:
        del os.environ["HANG_PIDFILE"]
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Timeout*4*"])
    rows = read_status(root)
    assert [(r.op, r.side, r.rc, r.status) for r in rows] == [("hang", "A", 124, "TIMEOUT")]
    assert 0.0 < rows[0].elapsed_s < 60  # the guard, far before the child's own 120 s
    budget = json.loads((root / BUDGET_FILE).read_text())
    assert (budget["child_s"], budget["precompile_s"], budget["bookkeeping_s"]) == (120.0, 120.0, 300.0)
    if pidfile.exists():  # the guard may fire while the side's server still imports, before the op's build
        pids = [int(p) for p in pidfile.read_text().split()]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(process_alive(pid) for pid in pids):
            time.sleep(0.1)
        assert not any(process_alive(pid) for pid in pids)


def test_passing_cells_write_results_identity_and_junit_properties(campaign_dir: pytest.Pytester,
                                                                   tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    root = tmp_path / "root"
    junit = tmp_path / "junit.xml"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "2", "--ab-root", str(root), "-v",
                                               "--ab-ir-target", "none", f"--junitxml={junit}")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([f"running one[[]r1-A[]]: tail -f {root}/r1_A/one/run.log*",
                                 f"abbench root: {root}"])
    cell = root / "r1_A" / "one"
    assert (cell / "results.jsonl").read_text().count('"status": "ok"') == 2
    import json
    identity = json.loads((cell / "run_identity.json").read_text())
    assert identity["backend"] == "interpreter" and identity["timer"] == "wall"
    assert identity["autotune_mode"] == "record"
    assert json.loads((root / "r2_A" / "one" / "run_identity.json").read_text())["autotune_mode"] == "replay"
    xml = junit.read_text()
    assert 'name="abbench_rc" value="0"' in xml and 'name="AUTOTUNE_REPLAY_FALLBACK" value="0"' in xml
    assert len(read_status(root)) == 4


STRAY_THREAD_CAMPAIGN = """
import threading, time
from pytest_abbench import Case, Op

def build(shape, device):
    import torch
    threading.Thread(target=time.sleep, args=(600,), name="stray").start()  # never joined, not a daemon
    x = torch.ones(4)
    return Case(run=lambda: x * 2, expected=lambda: x * 2)

OPS = [Op("stray", build=build, shapes={"smoke": [{}]})]
"""


@pytest.mark.parametrize("spawn", ["exec", "fork"])
def test_a_thread_the_campaign_leaves_running_does_not_hold_the_cell(campaign_dir: pytest.Pytester, tmp_path: Path,
                                                                     spawn: str) -> None:
    """The cell ends once its results are written and names the thread; it used to wait out its whole timeout."""
    campaign_dir.makepyfile(c=STRAY_THREAD_CAMPAIGN)
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), "-k", "r1-A",
                                               "--ab-ir-target", "none", "--ab-spawn", spawn, "--cell-timeout", "90",
                                               "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    (row,) = read_status(root)
    assert row.status == "ok" and row.elapsed_s < 60, row
    log = (root / "r1_A" / "stray" / "run.log").read_text()
    assert "[abbench] the campaign left 1 thread(s) running: 'stray' (time.sleep)" in log


def test_a_build_that_calls_sys_exit_fails_its_shape(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    """sys.exit(0) inside build used to end the cell cleanly with nothing measured (NO_SHAPES)."""
    campaign_dir.makepyfile(c=textwrap.dedent("""
        import sys
        from pytest_abbench import Op

        def build(shape, device):
            sys.exit(0)

        OPS = [Op("quits", build=build, shapes={"smoke": [{}]})]
    """))
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), "-k", "r1-A",
                                               "--ab-ir-target", "none", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*cell quits[[]r1-A[]] failed: FAILED_SHAPES (1 failed, 0 ok shapes)*",
                                 "*SystemExit: 0*"])
    assert [(r.status, r.failed) for r in read_status(root)] == [("FAILED_SHAPES", 1)]
