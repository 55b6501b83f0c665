"""A Ctrl-C is never lost, even when its KeyboardInterrupt is swallowed where it lands."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from helpers import simple_campaign

from pytest_abbench.core.status import read_status

# Stands for the places CPython swallows a KeyboardInterrupt (a finaliser, an at-fork
# callback, both reported as "Exception ignored"): after the first cell, a real SIGINT
# reaches pytest inside a block that discards the exception.
SWALLOWING_CONFTEST = '''
import os, signal, time

_done = []

def pytest_runtest_logreport(report):
    if report.when == "call" and not _done:
        _done.append(1)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        except KeyboardInterrupt:
            pass  # swallowed, as in a __del__
'''


def test_a_swallowed_ctrl_c_stops_the_session_before_the_next_cell(campaign_dir: pytest.Pytester,
                                                                   tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    campaign_dir.makeconftest(SWALLOWING_CONFTEST)
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "3", "--ab-root", str(root),
                                               "--ab-ir-target", "none", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()[-2000:]
    assert len(read_status(root)) == 1  # the cell that was running finished; no other started
    result.stdout.fnmatch_lines(["*abbench: exit 2: interrupted*"])


def test_the_recorded_interrupt_is_raised_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_abbench.spawn import interrupts

    original = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(interrupts, "_seen", type(interrupts._seen)())
    monkeypatch.setattr(interrupts, "received", [])  # this process's later sessions must not inherit the record
    try:
        interrupts.install()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        with pytest.raises(KeyboardInterrupt):
            interrupts.raise_if_interrupted()
    finally:
        signal.signal(signal.SIGINT, original)


# A real SIGINT swallowed after the last cell's report: no cell is left to raise it again, so pytest never sees
# the KeyboardInterrupt and its own status stays 0.
SWALLOWED_AT_THE_END = SWALLOWING_CONFTEST.replace('if report.when == "call" and not _done:',
                                                   'if report.when == "teardown" and "r1-B" in report.nodeid '
                                                   'and not _done:')


def test_a_ctrl_c_swallowed_after_the_last_cell_still_ends_the_session_as_interrupted(
        campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    """The session said 'exit 0: clean' (now, with planned cells missing, 1) where it had been interrupted: a
    flaky 'rc 1' in the SIGINT tests was this."""
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    campaign_dir.makeconftest(SWALLOWED_AT_THE_END)
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(tmp_path / "root"),
                                               "--ab-ir-target", "none", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines(["*abbench: exit 2: interrupted*"])
