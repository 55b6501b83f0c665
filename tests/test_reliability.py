"""Faults a long campaign meets: a SIGKILLed pytest, a resumed root, huge or binary output, a vanished root,
two sessions on one root, several xdist workers.  Real pytest processes, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import VANISHING_ROOT_CAMPAIGN, simple_campaign, synthetic_root, process_alive

from pytest_abbench.cli import main as abbench
from pytest_abbench.core.status import read_status

FAST = ("--ab-ir-target", "none", "-p", "no:cacheprovider")

# "quick" measures a tensor op; "slow" blocks while HANG_FILE exists, after writing its pid and a
# grandchild's pid to PID_FILE (the grandchild must die with the cell).
CRASH_CAMPAIGN = simple_campaign('"quick"', extra='''
        def slow(shape, device):
            import os, subprocess, sys, time
            hang = os.environ.get("HANG_FILE", "")
            if hang and os.path.exists(hang):
                child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
                with open(os.environ["PID_FILE"], "w") as f:
                    f.write(f"{os.getpid()} {child.pid}")
                while os.path.exists(hang):
                    time.sleep(0.1)
            return build(shape, device)
        ''') + 'OPS.append(Op("slow", build=slow, shapes={"smoke": [{"n": 8}]}))\n'


def _wait_for(predicate: "object", timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)


def _start_pytest(where: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=where, env={**os.environ, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _report_shape(root: Path) -> list[tuple[str, str, int, int, list[str]]]:
    data = json.loads((root / "report.json").read_text())
    return [(o["op"], o["state"], o["rounds_completed"], o["rounds_expected"], [s["shape"] for s in o["shapes"]])
            for o in data["ops"]]


def test_sigkilled_session_keeps_its_rows_kills_its_cells_and_resumes(campaign_dir: pytest.Pytester,
                                                                      tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=CRASH_CAMPAIGN)
    root, hang, pidfile = tmp_path / "root", tmp_path / "hang", tmp_path / "pids"
    hang.touch()
    env = {"HANG_FILE": str(hang), "PID_FILE": str(pidfile)}
    session = _start_pytest(campaign_dir.path, "c.py", "--ab-rounds", "2", "--ab-root", str(root), *FAST, env=env)
    _wait_for(pidfile.exists)  # r1 of quick is done; slow[r1-A] is blocked with a grandchild
    os.kill(session.pid, signal.SIGKILL)
    session.wait()
    cell, grandchild = (int(p) for p in pidfile.read_text().split())
    _wait_for(lambda: not process_alive(cell) and not process_alive(grandchild), timeout_s=10)

    rows = read_status(root)  # every row written before the kill parses
    assert {(r.round, r.op, r.side, r.status) for r in rows} == {(1, "quick", "A", "ok"), (1, "quick", "B", "ok")}
    quick_log = root / "r1_A" / "quick" / "run.log"
    written = quick_log.stat().st_mtime_ns

    hang.unlink()
    resumed = campaign_dir.runpytest_subprocess("c.py", "--ab-resume", str(root), "--ab-rounds", "2", *FAST)
    resumed.assert_outcomes(passed=8)
    assert quick_log.stat().st_mtime_ns == written, "a finished cell is read from disk, not run again"
    assert list((root / "attempts").iterdir()), "the crashed attempt of slow[r1-A] is kept aside"
    assert len(read_status(root)) == 8

    whole = tmp_path / "uninterrupted"
    campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "2", "--ab-root", str(whole), *FAST).assert_outcomes(
        passed=8)
    assert _report_shape(root) == _report_shape(whole)
    assert all(state == "verdict" for _, state, *_ in _report_shape(root))


def test_sigkilled_xdist_controller_takes_its_running_cells_down_at_once(campaign_dir: pytest.Pytester,
                                                                          tmp_path: Path) -> None:
    """Under -n 2 the cell's parent is a worker, which outlives its SIGKILLed controller (execnet gives it up
    5 to 15 s later): the worker stops the cell itself, as fast as a serial session's death does, and no row
    is written after the session died."""
    campaign_dir.makepyfile(c=CRASH_CAMPAIGN)
    root, hang, pidfile = tmp_path / "root", tmp_path / "hang", tmp_path / "pids"
    hang.touch()
    session = _start_pytest(campaign_dir.path, "c.py", "-n", "2", "-k", "slow", "--ab-rounds", "1", "--ab-root",
                            str(root), *FAST, env={"HANG_FILE": str(hang), "PID_FILE": str(pidfile)})
    try:
        _wait_for(lambda: pidfile.exists() and len(pidfile.read_text().split()) == 2)
        cell, grandchild = (int(p) for p in pidfile.read_text().split())
        os.kill(session.pid, signal.SIGKILL)
        session.wait()
        killed = time.monotonic()
        _wait_for(lambda: not process_alive(cell) and not process_alive(grandchild), timeout_s=30)
        took = time.monotonic() - killed
        assert took < 2.0, f"the cell outlived its session by {took:.1f} s"
        time.sleep(1.0)  # the worker has had time to write a row, if it were going to
        assert not read_status(root), "a cell of a dead session wrote a row"
    finally:
        hang.unlink(missing_ok=True)


def test_resume_refuses_an_old_root_of_another_campaign(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    """A root written before op fingerprints were kept is resumed only with the same files and switch."""
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    root = tmp_path / "root"
    campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), *FAST).assert_outcomes(
        passed=2)
    manifest = json.loads((root / "campaign.json").read_text())
    del manifest["op_fingerprints"]
    (root / "campaign.json").write_text(json.dumps(manifest))
    campaign_dir.makepyfile(c=simple_campaign('"one"', switch='Switch(env_b={"OTHER": "1"})'))
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-resume", str(root), *FAST)
    assert result.ret == 6
    result.stdout.fnmatch_lines([f"*cannot resume {root}: it was written with campaign file(s)*"])
    missing = campaign_dir.runpytest_subprocess("c.py", "--ab-resume", str(tmp_path / "nothing"), *FAST)
    assert missing.ret == 4
    missing.stderr.fnmatch_lines(["*is not a campaign root (no status.tsv in it)*"])


def test_a_root_that_is_a_file_is_named_as_such(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    afile = tmp_path / "results.txt"
    afile.write_text("not a folder")
    for root in (afile, afile / "sub"):
        result = campaign_dir.runpytest_subprocess("c.py", "--ab-root", str(root), *FAST)
        assert result.ret == 6
        result.stdout.fnmatch_lines([f"*cannot use the root {root}: {afile} is a file, not a folder*"])
        assert "File exists" not in result.stdout.str() and "Not a directory" not in result.stdout.str()


def test_a_second_session_on_a_busy_root_is_refused(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=CRASH_CAMPAIGN)
    root, hang, pidfile = tmp_path / "root", tmp_path / "hang", tmp_path / "pids"
    hang.touch()
    first = _start_pytest(campaign_dir.path, "c.py", "-k", "slow", "--ab-rounds", "1", "--ab-root", str(root),
                          *FAST, env={"HANG_FILE": str(hang), "PID_FILE": str(pidfile)})
    try:
        _wait_for(pidfile.exists)
        second = campaign_dir.runpytest_subprocess("c.py", "--ab-root", str(root), *FAST)
        assert second.ret == 6
        second.stdout.fnmatch_lines([f"*root {root} is in use by another pytest session (pid {first.pid})*"])
    finally:
        hang.unlink()
        first.wait(timeout=120)
    assert first.returncode == 0


LOUD_CAMPAIGN = simple_campaign('"quiet"', extra='''
        def loud(shape, device):
            import sys
            line = "x" * ((1 << 20) - 1) + "\\n"
            for _ in range(200):
                sys.stdout.write(line)  # 200 MiB into run.log
            sys.stdout.flush()
            sys.stdout.buffer.write(b"not utf-8: \\xff\\xfe\\n")
            sys.stdout.buffer.flush()
            return build(shape, device)
        ''') + 'OPS.append(Op("loud", build=loud, shapes={"smoke": [{"n": 8}]}))\n'

PEAK_MEMORY_PLUGIN = '''
def pytest_sessionfinish(session):
    import os
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            open(os.environ["HWM_FILE"], "w").write(line.split()[1])
'''


def test_200_mb_of_output_streams_to_disk_and_binary_bytes_are_counted(campaign_dir: pytest.Pytester,
                                                                      tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    campaign_dir.makepyfile(c=LOUD_CAMPAIGN)
    campaign_dir.makeconftest(PEAK_MEMORY_PLUGIN)
    hwm = tmp_path / "hwm"
    monkeypatch.setenv("HWM_FILE", str(hwm))
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "-k", "loud and r1-A", "--ab-rounds", "1",
                                               "--ab-root", str(root), *FAST)
    result.assert_outcomes(passed=1)
    log = root / "r1_A" / "loud" / "run.log"
    assert log.stat().st_size > 200 * 2**20
    peak_mib = int(hwm.read_text()) / 1024
    assert peak_mib < 150, f"the pytest process peaked at {peak_mib:.0f} MiB: output was held in memory"
    result.stdout.fnmatch_lines([f"abbench: {log}: 2 byte sequence(s) not UTF-8 (kept as written)"])


def test_unwritable_and_vanished_roots_stop_with_exit_6(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=VANISHING_ROOT_CAMPAIGN)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-root", str(blocker / "root"), *FAST)
    assert result.ret == 6
    result.stdout.fnmatch_lines([f"*cannot use the root {blocker / 'root'}: {blocker} is a file, not a folder*"])

    root = tmp_path / "root"
    os.environ["DOOMED_ROOT"] = str(root)
    try:
        gone = campaign_dir.runpytest_subprocess("c.py", "-k", "vanish", "--ab-rounds", "1", "--ab-root", str(root),
                                                 *FAST)
    finally:
        del os.environ["DOOMED_ROOT"]
    assert gone.ret == 6
    gone.stdout.fnmatch_lines([f"*{root}*the root vanished*"])


def test_truncated_results_file_is_named_and_gives_no_verdict(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    synthetic_root(tmp_path, {"s": [0.1, 0.1, 0.1]})
    results = tmp_path / "r2_B" / "op" / "results.jsonl"
    results.write_bytes(results.read_bytes()[:-20])  # a writer killed mid-line
    assert abbench(["summary", str(tmp_path)]) == 1  # a cell's measurement is lost: not a clean run
    out = capsys.readouterr().out
    assert f"unreadable result in op[r2-B], that shape's round left out: {results}:1: truncated or corrupt" in out
    assert "no verdict: no shape has a result on both sides in every round (the lines below say why)" in out
    assert "geomean" not in out
    assert "abbench: exit 1: 1 cell(s) with a results record that cannot be read (report.md names it): op[r2-B]" in out


def test_xdist_matches_the_serial_run_and_pins_one_gpu_per_worker(campaign_dir: pytest.Pytester,
                                                                  tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=simple_campaign())
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    alone = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "2", "--ab-root", str(serial), "--ab-gpus", "3",
                                              "-p", "no:xdist", *FAST)
    alone.assert_outcomes(passed=8)
    assert "PytestUnknownMarkWarning" not in alone.stdout.str(), "the cells' xdist_group mark is known without xdist"
    campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "2", "--ab-root", str(parallel), "-n", "2",
                                      "--dist", "loadgroup", "--ab-gpus", "5,7", *FAST).assert_outcomes(passed=8)

    def rows(root: Path) -> set[tuple[int, str, str, str, int]]:
        return {(r.round, r.op, r.side, r.status, r.success) for r in read_status(root)}

    assert rows(serial) == rows(parallel) and len(rows(serial)) == 8
    assert _report_shape(serial) == _report_shape(parallel)

    def gpus(root: Path) -> dict[str, set[str]]:
        seen: dict[str, set[str]] = {}
        for identity in root.glob("r*_*/*/run_identity.json"):
            seen.setdefault(identity.parent.name, set()).add(json.loads(identity.read_text())["cuda_visible_devices"])
        return seen

    assert gpus(serial) == {"one": {"3"}, "two": {"3"}}
    pinned = gpus(parallel)
    assert all(len(v) == 1 for v in pinned.values()), "every cell of an op ran on one GPU"
    assert set().union(*pinned.values()) <= {"5", "7"}
