"""The campaign root's lifecycle: claim and lock it, write or check its manifest, append rows, resume.

Only the controller (or a serial session) claims a root; xdist workers write
into the root the controller claimed.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from pytest_abbench.exitcodes import EXIT_ROOT
from pytest_abbench.fileio import CorruptFileError, read_json, write_json_atomic
from pytest_abbench.identity import file_hash
from pytest_abbench.layout import CellKey, RootLayout
from pytest_abbench.outcome import CellOutcome
from pytest_abbench.plan import PLAN_FIELD, CampaignPlan
from pytest_abbench.status import append_status_row, read_status

def default_root(rootpath: Path) -> Path:
    """A new folder per session: ``<rootdir>/.abbench/<timestamp>-<pid>``."""
    return (rootpath / ".abbench" / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}").resolve()


class CampaignRoot:
    """One session's hold on its root folder."""

    def __init__(self, path: Path, resume: bool, say: Callable[[str], None]) -> None:
        self.layout = RootLayout(path)
        self.resume = resume
        self.say = say
        self.claimed = False
        self._lock_fd: int | None = None
        self._finished: dict[CellKey, CellOutcome] | None = None
        # Found while a test runs, where pytest captures output: carried on the next cell's report instead.
        self.notices: list[str] = []

    @property
    def path(self) -> Path:
        return self.layout.root

    def claim(self, campaign_files: list[Path], switch_env: dict[str, str] | None, plan: CampaignPlan) -> None:
        """Create the root and hold its lock for the session; exit 6 when that is impossible."""
        if self.claimed:
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.layout.lock, os.O_RDWR | os.O_CREAT, 0o644)
        except (FileExistsError, NotADirectoryError):
            blocker = next((p for p in (self.path, *self.path.parents) if p.exists() and not p.is_dir()), self.path)
            pytest.exit(f"abbench: cannot use the root {self.path}: {blocker} is a file, not a folder; "
                        "give --ab-root a folder", returncode=EXIT_ROOT)
        except OSError as exc:
            pytest.exit(f"abbench: cannot write the root {self.path}: {exc.strerror}", returncode=EXIT_ROOT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Empty only between the holder's lock and its write below: it is starting.
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
            os.close(fd)
            who = f"pid {holder}" if holder else "a session still starting"
            pytest.exit(f"abbench: root {self.path} is in use by another pytest session ({who}); "
                        "use another --ab-root", returncode=EXIT_ROOT)
        # Write, then cut: a reader never sees an empty file where a previous holder's pid was.
        pid = str(os.getpid()).encode()
        os.pwrite(fd, pid, 0)
        os.ftruncate(fd, len(pid))
        self._lock_fd = fd
        self.claimed = True
        problem = self.write_manifest(campaign_files, switch_env, plan)
        if problem:
            self.release()
            pytest.exit(problem, returncode=EXIT_ROOT)
        self.say(f"abbench root: {self.path}" + (" (resumed)" if self.resume else ""))

    def write_manifest(self, campaign_files: list[Path], switch_env: dict[str, str] | None,
                       plan: CampaignPlan) -> str | None:
        """Write ``campaign.json``; on --ab-resume first refuse a root written by another campaign or switch."""
        manifest: dict[str, Any] = {"campaign_files": {str(p): file_hash(p) for p in sorted(set(campaign_files))},
                                    "switch_env": switch_env, PLAN_FIELD: plan.to_json()}
        if self.resume and self.layout.manifest.exists():
            try:
                before = read_json(self.layout.manifest)
            except CorruptFileError as exc:
                return f"abbench: cannot resume {self.path}: {exc}"
            for field_name, what in (("campaign_files", "campaign file(s)"), ("switch_env", "--ab-switch-env")):
                if before.get(field_name) != manifest[field_name]:
                    return (f"abbench: cannot resume {self.path}: it was written with {what} "
                            f"{before.get(field_name)!r}, this session has {manifest[field_name]!r}; "
                            "resume with the same campaign and switch, or start a new root")
        write_json_atomic(self.layout.manifest, manifest)
        return None

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def check_alive(self) -> None:
        """A root deleted or unmounted mid-campaign stops the session instead of being silently recreated."""
        if not self.layout.lock.exists():
            pytest.exit(f"abbench: the root {self.path} vanished or lost its {self.layout.lock.name} during the "
                        "session; every row written before is in its status.tsv if the folder still exists",
                        returncode=EXIT_ROOT)

    def append(self, outcome: CellOutcome) -> None:
        """Append the outcome's status row; a root that cannot take it stops the session (exit 6)."""
        try:
            append_status_row(self.path, outcome.to_row())
        except OSError as exc:
            why = "the root vanished" if not self.path.is_dir() else (exc.strerror or str(exc))
            pytest.exit(f"abbench: cannot append to {self.layout.status}: {why}", returncode=EXIT_ROOT)

    def finished(self, key: CellKey) -> CellOutcome | None:
        """On --ab-resume: the cell's outcome when it finished before (the last row of each cell decides)."""
        if not self.resume:
            return None
        if self._finished is None:
            rows = read_status(self.path, on_bad_line=lambda exc: self.notices.append(
                f"abbench: {exc}: line skipped; its cell runs again if no good row says it finished"))
            last = {CellKey(r.round, r.op, r.side): r for r in rows}
            outcomes = (CellOutcome.from_row(r, self.layout.cell(k)) for k, r in last.items())
            self._finished = {o.key: o for o in outcomes if o.finished}
            for outcome in self._finished.values():
                outcome.resumed = True  # read from disk, not run in this session
        return self._finished.get(key)

    def set_aside(self, key: CellKey) -> None:
        """An attempt that crashed or failed is kept aside, never mixed into this run's files."""
        folder = self.layout.cell(key)
        if self.resume and folder.exists():
            self.layout.attempts.mkdir(exist_ok=True)
            folder.rename(self.layout.attempt(key, time.time_ns()))
