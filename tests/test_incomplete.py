"""A campaign stopped before its planned rounds ran gives no verdict, live and offline; a bad status line costs only itself."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers import simple_campaign

from pytest_abbench.core.status import read_status

FAST = ("--ab-ir-target", "none", "--ab-samples", "1", "-p", "no:cacheprovider")
VERDICT_WORDS = ("verdicts:", "slower", "faster", "same", "inconclusive")

# Side B's build fails from its second call on: round 1 completes, round 2's first cell (r2-B) fails.
FAILS_IN_ROUND_2 = """
import os
from pathlib import Path

from pytest_abbench import Case, Op, Switch

def build(shape, device):
    import torch
    if os.environ.get("ABBENCH_TEST_SWITCH") == "1":
        calls = Path(__file__).with_name("b_calls")
        calls.write_text(calls.read_text() + "x" if calls.exists() else "x")
        if len(calls.read_text()) > 1:
            raise RuntimeError("side B breaks in round 2")
    x = torch.arange(4.0)
    return Case(run=lambda: x + 1, expected=lambda: x + 1)

OPS = [Op("one", build=build, shapes={"smoke": [{"n": 4}]})]
SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
"""


def summary(pytester: pytest.Pytester, root: Path) -> pytest.RunResult:
    """``abbench summary ROOT`` in its own process, as a user runs it."""
    return pytester.run(sys.executable, "-m", "pytest_abbench.cli", "summary", str(root))


def assert_no_verdict(text: str, rounds_run: int, planned: int) -> None:
    assert f"stopped after round {rounds_run} of {planned}: no verdict" in text
    for word in VERDICT_WORDS:
        assert word not in text.split("== one")[1], f"{word!r} printed for an incomplete op"


def test_x_on_a_failing_round_2_cell_reports_no_verdict(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=FAILS_IN_ROUND_2)
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "6", "--ab-root", str(root), "-x", *FAST)
    result.assert_outcomes(passed=2, failed=1)
    assert result.ret == 1
    out = result.stdout.str()
    assert_no_verdict(out, 1, 6)
    result.stdout.fnmatch_lines(["abbench: exit 1: 1 cell(s) failed: one[[]r2-B[]]; planned cells never ran"])
    report = json.loads((root / "report.json").read_text())
    assert report["complete"] is False and report["ops"][0]["state"] == "no_verdict"
    assert report["ops"][0]["rounds_expected"] == 6
    assert (report["exit_code"], report["failed_cells"]) == (1, ["one[r2-B]"])

    offline = summary(campaign_dir, root)
    assert offline.ret == 1
    offline = offline.stdout.str()
    assert_no_verdict(offline, 1, 6)
    assert "abbench: exit 1: 1 cell(s) failed: one[r2-B]; planned cells never ran" in offline


def signal_after_rows(campaign_dir: pytest.Pytester, tmp_path: Path, rounds: int, rows: int,
                      signum: signal.Signals) -> tuple[Path, str]:
    """Run a one-op campaign in a real pytest process and send it ``signum`` once ``rows`` rows are written;
    the root and what pytest printed.  It must end with pytest's "interrupted" code, 2."""
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    root = tmp_path / "root"
    proc = campaign_dir.popen([sys.executable, "-m", "pytest", "c.py", "--ab-rounds", str(rounds), "--ab-root",
                               str(root), *FAST], stdout=open(tmp_path / "out.txt", "wb"),
                              stderr=open(tmp_path / "err.txt", "wb"))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if (root / "status.tsv").exists() and len(read_status(root)) >= rows:
            break
        time.sleep(0.05)
    running = proc.poll() is None
    proc.send_signal(signum)
    rc = proc.wait(timeout=120)
    out = (tmp_path / "out.txt").read_text()
    assert rc == 2, f"rc {rc}, pytest {'was' if running else 'was NOT'} running at the {signum.name}; " + out[-3000:]
    return root, out


def test_sigint_after_round_3_reports_no_verdict(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    root, out = signal_after_rows(campaign_dir, tmp_path, rounds=6, rows=6, signum=signal.SIGINT)
    rows = read_status(root)
    assert len(rows) in (6, 7), out  # a cell that started before the signal may have finished
    rounds_run = max(r.round for r in rows if r.side == "A" and any(
        o.round == r.round and o.side == "B" for o in rows))
    assert_no_verdict(out, rounds_run, 6)
    assert "abbench: exit 2: interrupted or a collection error (pytest's code); planned cells never ran" in out
    assert json.loads((root / "report.json").read_text())["complete"] is False

    offline = summary(campaign_dir, root)
    assert offline.ret == 1
    assert_no_verdict(offline.stdout.str(), rounds_run, 6)


def test_sigterm_ends_with_the_report_and_the_exit_line(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    """A cancelled CI job (SIGTERM) ends like a Ctrl-C: rows kept, report marked incomplete, the exit line."""
    root, out = signal_after_rows(campaign_dir, tmp_path, rounds=3, rows=2, signum=signal.SIGTERM)
    assert "abbench: stopped by SIGTERM" in out
    assert "abbench: exit 2: interrupted or a collection error (pytest's code); planned cells never ran" in out
    assert 2 <= len(read_status(root)) < 6
    assert json.loads((root / "report.json").read_text())["complete"] is False


def test_a_malformed_status_line_is_named_and_skipped(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    """One torn or edited line of status.tsv costs that line, not every good row (summary and --ab-resume)."""
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    root = tmp_path / "root"
    first = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), *FAST)
    assert first.ret == 0
    status = root / "status.tsv"
    lines = status.read_text().split("\n")
    lines.insert(2, "not\ta\trow")  # between r1-A's row and r1-B's
    status.write_text("\n".join(lines))

    offline = summary(campaign_dir, root)
    assert offline.ret == 0
    out = offline.stdout.str()
    assert f"problem: {status}:3: expected 12 fields, found 3 (line skipped)" in out
    assert "verdicts:" in out  # both good rows kept: the op still has its verdict

    resumed = campaign_dir.runpytest_subprocess("c.py", "--ab-resume", str(root), "--ab-rounds", "1", *FAST)
    assert resumed.ret == 0
    resumed.stdout.fnmatch_lines([f"abbench: {status}:3: expected 12 fields, found 3: line skipped*"])
    assert "Traceback" not in resumed.stdout.str()


def test_a_damaged_result_record_costs_its_shape_that_round_fails_the_run_and_a_resume_runs_its_cell_again(
        campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    """Before, one torn results.jsonl line took the verdict of every shape of the op, the run still said "exit 0:
    clean", and a resume re-ran nothing (its status row said ok), so the root stayed that way."""
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    root = tmp_path / "root"
    first = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "2", "--ab-root", str(root), *FAST)
    assert first.ret == 0
    results = root / "r2_B" / "one" / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    assert len(lines) == 2  # n=8, then n=16
    results.write_text(lines[0] + lines[1][:30] + "\n")  # n=16's record torn

    offline = summary(campaign_dir, root)
    assert offline.ret == 1
    out = offline.stdout.str()
    assert f"unreadable result in one[r2-B], that shape's round left out: {results}:2: truncated or corrupt" in out
    assert ("abbench: exit 1: 1 cell(s) with a results record that cannot be read (report.md names it): one[r2-B]"
            in out)
    report = json.loads((root / "report.json").read_text())
    # The intact shape keeps both rounds and its verdict; the damaged one is named, not judged on one round.
    assert [(s["shape"], s["rounds"]) for s in report["ops"][0]["shapes"]] == [("n=8", 2)]
    assert "no verdict for n=16: measured in 1 of 2 rounds" in out

    resumed = campaign_dir.runpytest_subprocess("c.py", "--ab-resume", str(root), "--ab-rounds", "2", *FAST)
    assert resumed.ret == 0, resumed.stdout.str()[-2000:]
    said = [line for line in resumed.stdout.lines if line.startswith(f"abbench: {results}:2: truncated or corrupt")]
    assert len(said) == 1 and said[0].endswith("): one[r2-B] runs again"), resumed.stdout.str()[-2000:]
    resumed.assert_outcomes(passed=4)  # three read from the root, one run again
    report = json.loads((root / "report.json").read_text())
    assert [(s["shape"], s["rounds"]) for s in report["ops"][0]["shapes"]] == [("n=8", 2), ("n=16", 2)]
    assert list((root / "attempts").iterdir())  # the damaged folder kept aside, not deleted


def test_a_cell_without_a_status_row_is_not_called_failed_and_a_missing_status_file_is_named(
        campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    """Read offline, a cell folder without its row may be a cell Ctrl-C stopped, one that crashed or one still
    running: the exit line said "1 cell(s) failed", where the live session had said "interrupted"."""
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    root = tmp_path / "root"
    assert campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), *FAST).ret == 0
    status = root / "status.tsv"
    status.write_text("".join(status.read_text().splitlines(keepends=True)[:-1]))  # r1-B's row gone
    offline = summary(campaign_dir, root)
    assert offline.ret == 1
    offline.stdout.fnmatch_lines(["abbench: exit 1: 1 cell(s) without a status row (interrupted, crashed or still "
                                  "running): one[[]r1-B[]]"])
    assert "failed" not in offline.stdout.lines[-1]
    status.unlink()
    offline = summary(campaign_dir, root)
    offline.stdout.fnmatch_lines([f"*{status} is missing: every cell is read from its folder alone, without its row*",
                                  "abbench: exit 1: 2 cell(s) without a status row *"])
