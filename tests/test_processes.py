"""Processes and files a cell leaves behind: no surviving descendant, files readable like the logs."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from helpers import simple_campaign
from pytest_abbench.fileio import write_json_atomic

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
