"""Processes and files a cell leaves behind: no surviving descendant, files readable like the logs."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import simple_campaign, process_alive
from pytest_abbench.core.fileio import write_json_atomic

FAST = ("--ab-ir-target", "none", "--ab-samples", "1", "-p", "no:cacheprovider")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_json_files_honour_the_umask_like_the_logs(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    root = tmp_path / "root"
    old = os.umask(0o022)
    try:
        result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), *FAST)
    finally:
        os.umask(old)
    assert result.ret == 0, result.stdout.str()
    written = [root / "campaign.json", root / "report.json", root / "autotune" / "one.json",
               root / "irgate" / "one.json", root / "r1_A" / "one" / "run_identity.json",
               root / "r1_B" / "one" / "cell_timing.json"]
    log = root / "r1_A" / "one" / "run.log"
    assert _mode(log) == 0o644
    assert {str(p.relative_to(root)): oct(_mode(p)) for p in written} == \
        {str(p.relative_to(root)): "0o644" for p in written}


def test_json_files_follow_a_stricter_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_json_atomic(tmp_path / "x.json", {"a": 1})
        with open(tmp_path / "x.log", "w"):
            pass
    finally:
        os.umask(old)
    assert _mode(tmp_path / "x.json") == _mode(tmp_path / "x.log") == 0o640


# Each op's build starts a grandchild that leaves the cell's process group and session
# (setsid) and is orphaned at once (its shell exits): the process-group kill cannot reach it.
DAEMON_CAMPAIGN = textwrap.dedent('''
    import os, subprocess, time
    from pytest_abbench import Case, Op, Switch

    def spawn_daemon(tag):
        pidfile = os.path.join(os.environ["DAEMON_DIR"], tag)
        subprocess.run(["sh", "-c", 'setsid sh -c \\'echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 1000\\' "$0" &',
                        pidfile], check=True)
        deadline = time.monotonic() + 30
        while not os.path.exists(pidfile) and time.monotonic() < deadline:
            time.sleep(0.01)

    def finishes(shape, device):
        spawn_daemon("finishes")
        import torch
        x = torch.ones(4)
        return Case(run=lambda: x * 2, expected=lambda: torch.full((4,), 2.0))

    def crashes(shape, device):
        spawn_daemon("crashes")
        os._exit(3)

    def hangs(shape, device):
        spawn_daemon("hangs")
        time.sleep(600)

    OPS = [Op("finishes", build=finishes, shapes={"smoke": [{"n": 4}]}),
           Op("crashes", build=crashes, shapes={"smoke": [{"n": 4}]}),
           Op("hangs", build=hangs, shapes={"smoke": [{"n": 4}]})]
    SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
''')


@pytest.mark.parametrize("spawn", ["fork", "exec"])
def test_no_descendant_outlives_its_cell(campaign_dir: pytest.Pytester, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch, spawn: str) -> None:
    campaign_dir.makepyfile(d=DAEMON_CAMPAIGN)
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("DAEMON_DIR", str(pids))
    result = campaign_dir.runpytest_subprocess("d.py", "--ab-rounds", "1", "-k", "r1-A and not hangs", "--ab-root",
                                               str(tmp_path / "root"), "--ab-spawn", spawn, *FAST)
    daemons = {f.name: int(f.read_text()) for f in pids.iterdir()}
    try:
        result.assert_outcomes(passed=1, failed=1)  # "crashes" exits 3 in build, after its daemon started
        assert sorted(daemons) == ["crashes", "finishes"]
        deadline = time.monotonic() + 10
        while any(process_alive(p) for p in daemons.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert {name: process_alive(pid) for name, pid in daemons.items()} == {"crashes": False, "finishes": False}
    finally:
        for pid in daemons.values():  # never leave a sleep 1000 on a shared machine
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("spawn", ["fork", "exec"])
def test_ctrl_c_during_a_cell_leaves_no_descendant(campaign_dir: pytest.Pytester, tmp_path: Path, spawn: str) -> None:
    campaign_dir.makepyfile(d=DAEMON_CAMPAIGN)
    pids = tmp_path / "pids"
    pids.mkdir()
    session = subprocess.Popen([sys.executable, "-m", "pytest", "d.py", "--ab-rounds", "1", "-k", "hangs and r1-A",
                                "--ab-root", str(tmp_path / "root"), "--ab-spawn", spawn, *FAST], cwd=campaign_dir.path,
                               env={**os.environ, "DAEMON_DIR": str(pids)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    daemon = pids / "hangs"
    try:
        deadline = time.monotonic() + 120
        while not daemon.exists() and session.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert daemon.exists(), "the cell never started its daemon"
        session.send_signal(signal.SIGINT)
        assert session.wait(timeout=60) == pytest.ExitCode.INTERRUPTED
        pid = int(daemon.read_text())
        deadline = time.monotonic() + 10
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not process_alive(pid), "the setsid grandchild outlived its interrupted cell"
    finally:
        if session.poll() is None:
            session.kill()
        if daemon.exists() and process_alive(int(daemon.read_text())):
            os.kill(int(daemon.read_text()), signal.SIGKILL)
