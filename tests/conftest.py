"""Fixtures shared by the project's tests, and what pytest must not collect (helpers to import: helpers.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

# A run started in the background by a shell without job control has SIGINT ignored, and every process it
# starts inherits that: the Ctrl-C tests would send a signal nobody hears.  Restore Python's default here.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# helpers.py holds campaign sources as strings (lines starting "OPS =") and imports
# pytest_abbench: the plugin's looks_like_campaign would collect it as a campaign.
collect_ignore = ["helpers.py"]


@pytest.fixture(autouse=True)
def kernel_cache_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's sessions keep their persistent kernel cache (``--ab-kernel-cache auto``) under a folder of
    the test's own, never in the user's ~/.cache, and start with it empty; their history file is the test's own."""
    home = tmp_path_factory.mktemp("xdg-cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv("ABBENCH_KERNEL_CACHE", raising=False)
    # Sessions whose rootdir is this checkout (the repository's campaigns) would record into its .abbench/.
    monkeypatch.setenv("ABBENCH_HISTORY", str(tmp_path_factory.mktemp("history") / "history.sqlite"))
    return home


@pytest.fixture
def campaign_dir(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\n")
    return pytester
