"""Fixtures shared by the project's tests, and what pytest must not collect (helpers to import: helpers.py)."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Iterator

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


@pytest.fixture(autouse=True)
def kept_servers_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test's sessions keep fork servers (``--ab-keep-servers``) in a folder of the test's own, short enough
    for a socket path, and never take one the user's sessions kept; those still waiting at the end are ended."""
    from pytest_abbench.core import keptservers

    folder = Path(tempfile.mkdtemp(prefix="abks-"))
    monkeypatch.setenv("ABBENCH_SERVER_DIR", str(folder))
    yield folder
    keptservers.trim(folder, 0)
    # A server still held (a session killed by the test, a cell left hanging) is not listed as waiting: every
    # fork server process (a server, or a cell forked from one) started with this folder in its environment goes,
    # until a pass finds none.
    marker = f"ABBENCH_SERVER_DIR={folder}".encode()
    for _ in range(5):
        found = []
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and keptservers.SERVER_MODULE.encode() in (proc / "cmdline").read_bytes() \
                        and marker in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                pass
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)
    shutil.rmtree(folder, ignore_errors=True)
