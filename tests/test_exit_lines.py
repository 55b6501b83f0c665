"""What a session and ``abbench summary`` say at the end: the exit line, report.json's reason, the lock holder.

- A caliber mismatch ends with ``abbench: exit 4: caliber mismatch ...`` and
  report.json's ``exit_reason`` says so, which tells it from pytest's own 4.
- ``abbench summary`` of a root where every cell failed exits 1 like the
  live session and writes report.json and report.md into the root.
- A root locked by a session that has not yet written its pid is named as
  "a session still starting", never "pid unknown".
- README: the ``n`` progress letter is documented; the usage block does not
  suggest ``--dist loadgroup`` (the plugin schedules ops itself).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FAULT_CAMPAIGN, other_shapes_campaign, simple_campaign

FAST = ("--ab-ir-target", "none", "--ab-samples", "1", "-p", "no:cacheprovider")
README = Path(__file__).resolve().parents[1] / "README.md"


def test_a_caliber_mismatch_says_so_in_the_exit_line_and_report_json(campaign_dir: pytest.Pytester,
                                                                   tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=other_shapes_campaign())
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), *FAST)
    assert result.ret == 4
    result.stdout.fnmatch_lines(["abbench: exit 4: caliber mismatch: the two sides' numbers mean different things "
                                 "for one"])
    report = json.loads((root / "report.json").read_text())
    assert report["exit_code"] == 4 and report["exit_reason"].startswith("caliber mismatch")


def test_summary_of_a_root_where_every_cell_failed_gates_like_the_live_run(campaign_dir: pytest.Pytester,
                                                                        tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=FAULT_CAMPAIGN)
    root = tmp_path / "root"
    live = campaign_dir.runpytest_subprocess("c.py", "-k", "exit3 or wrong", "--ab-rounds", "1", "--ab-root",
                                             str(root), *FAST)
    assert live.ret == 1
    live_line = next(line for line in live.stdout.lines if line.startswith("abbench: exit "))
    for name in ("report.json", "report.md"):
        (root / name).unlink()
    offline = subprocess.run([sys.executable, "-m", "pytest_abbench.cli", "summary", str(root)],
                             capture_output=True, text=True, timeout=120)
    assert offline.returncode == 1, offline.stdout + offline.stderr
    assert live_line.split(":")[:2] == ["abbench", " exit 1"]
    assert re.search(r"abbench: exit 1: \d cell\(s\) failed: ", offline.stdout), offline.stdout
    assert (root / "report.md").exists()
    report = json.loads((root / "report.json").read_text())
    assert report["exit_code"] == 1 and "failed" in report["exit_reason"]


def test_a_deselected_cell_ends_the_session_as_the_gate_reads_its_root(campaign_dir: pytest.Pytester,
                                                                       tmp_path: Path) -> None:
    """One round-2 cell deselected: the op has no verdict.  Before, the session said "exit 0: clean" and
    ``abbench gate`` on its root said 1 "planned cells never ran": CI reading the session's code passed it."""
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    root = tmp_path / "root"
    live = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "2", "--ab-root", str(root), *FAST,
                                             "--deselect", "c.py::one[r2-A]")
    live.assert_outcomes(passed=3, deselected=1)
    assert live.ret == 1, live.stdout.str()[-2000:]
    live.stdout.fnmatch_lines(["abbench: exit 1: planned cells never ran"])
    gate = subprocess.run([sys.executable, "-m", "pytest_abbench.cli", "gate", str(root)],
                          capture_output=True, text=True, timeout=120)
    assert (gate.returncode, gate.stdout) == (1, f"abbench gate: exit 1: planned cells never ran ({root}/report.json)\n")


def test_a_root_locked_by_a_session_still_starting_is_named_so(campaign_dir: pytest.Pytester,
                                                             tmp_path: Path) -> None:
    """The lock is held but empty: the holder took it and has not written its pid yet."""
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    root = tmp_path / "root"
    root.mkdir()
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), *FAST)
    finally:
        os.close(fd)
    assert result.ret == 6
    out = result.stdout.str() + result.stderr.str()
    assert "is in use by another pytest session (a session still starting)" in out
    assert "pid unknown" not in out and "pid )" not in out


def test_the_readme_documents_the_n_letter_and_no_loadgroup_usage() -> None:
    text = README.read_text()
    usage_block = text[text.index("## Usage"):].split("```")[1]
    assert "pytest campaigns -n 2" in usage_block and "--dist loadgroup" not in usage_block
    assert "pytest's progress line shows such a cell as `n`" in text


def test_an_allowed_mismatch_with_no_shape_in_common_says_so_instead_of_a_blank_op(campaign_dir: pytest.Pytester,
                                                                                   tmp_path: Path) -> None:
    """Side B's shape set depends on its switch: no shape is timed on both sides.  With --allow-caliber-mismatch the
    op read 'geomean delta - [-]; verdicts: ' and an empty table."""
    source = simple_campaign('"one"').replace('[{"n": 8}, {"n": 16}]',
                                              '[{"n": 8 if os.environ.get("ABBENCH_TEST_SWITCH") else 16}]')
    campaign_dir.makepyfile(c="import os\n" + source)
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root),
                                               "--allow-caliber-mismatch", *FAST)
    assert result.ret == 0, result.stdout.str()[-2000:]
    report = json.loads((root / "report.json").read_text())
    op = report["ops"][0]
    assert (op["state"], op["shapes"]) == ("no_verdict", []), op
    assert op["reason"] == ("no verdict: no shape has a result on both sides in every round (the sides' shape sets "
                            "differ: the caliber lines above)")
    result.stdout.fnmatch_lines(["*no verdict: no shape has a result on both sides in every round*"])
