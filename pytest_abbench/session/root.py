"""The campaign root's lifecycle: claim and lock it, write or check its manifest, append rows, resume.

Only the controller (or a serial session) claims a root; xdist workers write
into the root the controller claimed.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Callable, Mapping

import pytest

from pytest_abbench.campaign.loader import looks_like_campaign
from pytest_abbench.campaign.model import Campaign, CampaignError, CampaignSkipped
from pytest_abbench.core.exitcodes import EXIT_ROOT
from pytest_abbench.core.fileio import CorruptFileError, write_bytes_atomic
from pytest_abbench.core.identity import file_hash
from pytest_abbench.core.layout import ABBENCH_DIR, SIDES, CellKey, RootLayout, results_file
from pytest_abbench.core.lockfile import lock_with_note
from pytest_abbench.core.outcome import CellOutcome
from pytest_abbench.core.settings import ALLOW_NO_IR_DIFF
from pytest_abbench.core.plan import CampaignManifest, CampaignPlan, read_manifest, write_manifest
from pytest_abbench.core.results import read_results
from pytest_abbench.core.status import COLUMNS, append_status_row, header_columns, read_status, row_cells
from pytest_abbench.core.wording import count

Fingerprint = Mapping[str, str]


def op_fingerprints(ops: Mapping[str, str | Path], load: Callable[[Path], Campaign],
                    level: str, is_campaign: Callable[[Path], bool] = looks_like_campaign) -> dict[str, dict[str, str]]:
    """Each op's fingerprint, ``ops`` mapping an op to its file.

    A file that is no campaign (a hand-written ``@pytest.mark.abbench`` test
    seen from the xdist controller) is known only by its content hash.
    """
    found: dict[str, dict[str, str]] = {}
    for op, where in ops.items():
        path = Path(where)
        try:
            found[op] = load(path).fingerprint(op, level) if is_campaign(path) else {}
        except (CampaignError, CampaignSkipped):
            found[op] = {}
        if not found[op] and path.is_file():
            found[op] = {"file": file_hash(path)}
    return found


class RootStop(pytest.exit.Exception):  # type: ignore[name-defined,misc]
    """Stops the session with exit 6, the root cannot be used; the user reads ``abbench: <why>``."""

    # pytest prints an exit as "<module>.<class>: <message>", i.e. "_pytest.outcomes.Exit: ...". A class of
    # module "builtins" is printed without its module (pytest's own Interrupted is declared so for that
    # reason), and the class is named for the product: the line reads as the product's own error.
    __module__ = "builtins"
    __qualname__ = "abbench"

    def __init__(self, why: str) -> None:
        super().__init__(why, returncode=EXIT_ROOT)


RootStop.__name__ = "abbench"  # an exit before the session started is printed as "<__name__>: <message>"


def default_root(rootpath: Path) -> Path:
    """A new folder per session: ``<rootdir>/.abbench/<timestamp>-<pid>``."""
    return (rootpath / ABBENCH_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}").resolve()


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

    def claim(self, campaign_files: list[Path], switch_env: dict[str, str] | None, plan: CampaignPlan,
              fingerprints: Mapping[str, Fingerprint] | None = None,
              caliber_options: Mapping[str, str] | None = None) -> None:
        """Create the root and hold its lock for the session; exit 6 when that is impossible."""
        if self.claimed:
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.layout.lock, os.O_RDWR | os.O_CREAT, 0o644)
        except (FileExistsError, NotADirectoryError):
            blocker = next((p for p in (self.path, *self.path.parents) if p.exists() and not p.is_dir()), self.path)
            raise RootStop(f"cannot use the root {self.path}: {blocker} is a file, not a folder; "
                           "give --ab-root a folder")
        except OSError as exc:
            raise RootStop(f"cannot write the root {self.path}: {exc.strerror}")
        holder = lock_with_note(fd, str(os.getpid()))
        if holder is not None:
            os.close(fd)
            who = f"pid {holder}" if holder else "a session still starting"
            raise RootStop(f"root {self.path} is in use by another pytest session ({who}); "
                           "use another --ab-root")
        self._lock_fd = fd
        self.claimed = True
        problem = self.write_manifest(campaign_files, switch_env, plan, fingerprints or {}, caliber_options)
        if problem:
            self.release()
            raise RootStop(problem)
        self.say(f"abbench root: {self.path}" + (" (resumed)" if self.resume else ""))

    def write_manifest(self, campaign_files: list[Path], switch_env: dict[str, str] | None,
                       plan: CampaignPlan, fingerprints: Mapping[str, Fingerprint],
                       caliber_options: Mapping[str, str] | None = None) -> str | None:
        """Write ``campaign.json``; on --ab-resume first reconcile it with the root's (a str: why not).

        A root that keeps op fingerprints is resumed op by op: an op whose
        fingerprint changed has its old cells set aside and runs again, ops of
        the root this session does not select are kept.  A root written before
        fingerprints were kept must have the same campaign files and switch.
        Fewer rounds than the root's plan are refused: the report of the rounds
        this session collects would replace the one of every round on disk.
        """
        manifest = CampaignManifest({str(p): file_hash(p) for p in sorted(set(campaign_files))}, switch_env,
                                    {k: dict(v) for k, v in fingerprints.items()}, plan,
                                    dict(caliber_options) if caliber_options is not None else None)
        if not self.resume:
            held = self.cells_held()
            if held:
                # Reusing it would mix an earlier session's cells (and a cell's shapes already on disk) into
                # this session's report as if measured now, under whatever switch this session names.
                return (f"root {self.path} already holds {held} of an earlier session; continue that campaign "
                        f"with --ab-resume={self.path}, or give a new --ab-root (or none: a new folder under "
                        ".abbench/)")
        if self.resume and self.layout.manifest.exists():
            try:
                before = read_manifest(self.layout.manifest)
            except CorruptFileError as exc:  # not JSON, or a field that is not what campaign.json holds
                return f"cannot resume {self.path}: {self.layout.manifest} is unreadable ({exc})"
            planned = before.plan
            if before.caliber_options is not None and manifest.caliber_options is not None:
                differ = [(option, was, manifest.caliber_options.get(option))
                          for option, was in before.caliber_options.items()
                          if manifest.caliber_options.get(option, was) != was]
                if differ:
                    given = "; ".join(f"{option}: the root has {was}, this session {now}" for option, was, now in differ)
                    again = " and ".join(_resume_with(option, was) for option, was, _ in differ)
                    why = []
                    if any(option != ALLOW_NO_IR_DIFF for option, _, _ in differ):
                        why.append("its new cells would not compare with the ones on disk (a caliber mismatch)")
                    if any(option == ALLOW_NO_IR_DIFF for option, _, _ in differ):
                        why.append("the ops whose code did not change would be skipped past round 1 where the root "
                                   "timed them, or timed where it skipped them")
                    return (f"cannot resume {self.path}: {given}; {'; '.join(why)}; resume {again}, or start a "
                            "new root")
            if planned is not None and plan.rounds < planned.rounds:
                return (f"cannot resume {self.path} with {count(plan.rounds, 'round')}: it was planned with "
                        f"{planned.rounds}, and a {plan.rounds}-round report would replace the one its "
                        f"{planned.rounds} rounds make; resume with --ab-rounds {planned.rounds} (or more), or read "
                        f"it as it is with `abbench summary {self.path}`")
            if before.op_fingerprints is None:
                for what, was, now in (("campaign file(s)", before.campaign_files, manifest.campaign_files),
                                       ("--ab-switch-env", before.switch_env, manifest.switch_env)):
                    if was != now:
                        return (f"cannot resume {self.path}: it was written with {what} {was!r}, this session "
                                f"has {now!r}; resume with the same campaign and switch, or start a new root")
            else:
                unrelated = self._unrelated(before, manifest)
                if unrelated is not None:
                    return unrelated
                self._reconcile(before, manifest, plan, planned)
        write_manifest(self.layout.manifest, manifest)
        return None

    def cells_held(self) -> str:
        """What of an earlier session's cells this root holds ("" when none): its rows, else its cell folders."""
        rows = len(read_status(self.path, on_bad_line=lambda exc: None)) if self.layout.status.exists() else 0
        if rows:
            return count(rows, "status row")
        folders = sum(1 for _ in self.layout.cell_folders())
        return count(folders, "cell folder") if folders else ""

    def _unrelated(self, before: CampaignManifest, manifest: CampaignManifest) -> str | None:
        """Why resuming would only add a campaign to a root made by another (a mistyped --ab-resume): no campaign
        file and no op in common; None where they share one (a subset of the ops, a campaign added to a folder)."""
        files_before, files_now = set(before.campaign_files or ()), set(manifest.campaign_files or ())
        ops_before, ops_now = set(before.op_fingerprints or ()), set(manifest.op_fingerprints or ())
        if not files_before or not files_now or files_before & files_now or ops_before & ops_now:
            return None
        return (f"cannot resume {self.path}: it was written by {', '.join(sorted(files_before))} (ops "
                f"{', '.join(sorted(ops_before)) or 'none'}), and this session's {', '.join(sorted(files_now))} "
                "shares no campaign file and no op with it; give the root this campaign wrote, or a new --ab-root")

    def _reconcile(self, before: CampaignManifest, manifest: CampaignManifest, plan: CampaignPlan,
                   planned: CampaignPlan | None) -> None:
        """Set aside the ops whose fingerprint changed, keep the root's other ops in ``manifest``, say what changed."""
        old = before.op_fingerprints or {}
        now = manifest.op_fingerprints or {}
        changed: dict[str, list[str]] = {}
        for op, mine in now.items():
            was = old.get(op)
            if was is None:
                continue
            shared = [k for k in mine if k in was]
            differ = [k for k in shared if was[k] != mine[k]] if shared else ["definition"]
            if differ:
                changed[op] = differ
        moved = sum(self.set_aside_op(op, old[op], planned) for op in changed)
        if changed:
            self._finished = None  # rows of the ops set aside are gone from status.tsv
        kept = [op for op in old if op not in now]
        # The root's record covers every op it holds: a subset session leaves the others as they are.
        manifest.op_fingerprints = {**{op: old[op] for op in kept}, **now}
        if before.campaign_files is not None:
            manifest.campaign_files = {**before.campaign_files, **(manifest.campaign_files or {})}
        if planned is not None:  # a copy: the session's own plan keeps its own ops
            manifest.plan = dataclasses.replace(plan, ops={**planned.ops, **plan.ops})
        parts = []
        if changed:
            if len(changed) == 1:
                (op, differ), = changed.items()
                what = f"op {op} changed ({', '.join(differ)}), its"
            else:
                what = "ops " + ", ".join(f"{op} ({', '.join(d)})" for op, d in changed.items()) + " changed, their"
            parts.append(f"{what} {count(moved, 'cell')} run again (the old ones are kept in {self.layout.attempts})")
        unchanged = sum(1 for op in now if op in old and op not in changed)
        new = sum(1 for op in now if op not in old)
        if changed or new or kept:
            parts.append(f"{count(unchanged, 'op')} unchanged")
        if new:
            parts.append(f"{count(new, 'op')} new")
        if kept:
            parts.append(f"{count(len(kept), 'op')} of the root not in this session, kept as they are")
        if changed or new or kept:
            self.say("abbench: resume: " + "; ".join(parts))

    def set_aside_op(self, op: str, fingerprint: Fingerprint, planned: CampaignPlan | None) -> int:
        """Move every file of ``op`` (cells, status rows, autotune, tuner and output records, IR-gate decision) into
        ``attempts/<op>_<stamp>/``, a root of its own that ``abbench summary`` reads; returns how many cells
        it held."""
        dest = RootLayout(self.layout.op_attempt(op, time.time_ns()))
        cells = {key for key, _ in self.layout.cell_folders() if key.op == op}
        paths = [folder for key, folder in self.layout.cell_folders() if key.op == op]
        paths += [self.layout.autotune_record(op), self.layout.tuner_record(op), self.layout.gate_decision(op)]
        paths += [p for side in SIDES for p in (self.layout.autotune_side_record(op, side),
                                                self.layout.tuner_side_record(op, side),
                                                self.layout.output_record(op, side))]
        for path in paths:
            if path.exists():
                target = dest.root / path.relative_to(self.path)
                target.parent.mkdir(parents=True, exist_ok=True)
                path.rename(target)
        cells |= self._move_rows(op, dest)
        if dest.root.exists():
            write_manifest(dest.manifest, CampaignManifest(
                op_fingerprints={op: dict(fingerprint)},
                plan=None if planned is None else dataclasses.replace(planned, ops={op: planned.ops.get(op, "")})))
        return len(cells)

    def _move_rows(self, op: str, dest: RootLayout) -> set[CellKey]:
        """Move ``op``'s rows of status.tsv into ``dest``'s; every other line stays, byte for byte."""
        if not self.layout.status.exists():
            return set()
        data = self.layout.status.read_bytes()
        *lines, tail = data.split(b"\n")  # ``tail``: empty, or a row torn by a writer killed mid-write
        columns: tuple[str, ...] = COLUMNS  # until a header names them, as read_status reads the file
        header: bytes | None = None  # the moved rows' header: the one in effect at the first of them
        mine, others, keys = [], [], set()
        for line in lines:
            text = line.decode("utf-8", errors="replace")
            named = header_columns(text)
            if named is not None:
                columns = named
                others.append(line)
                continue
            try:
                cells = row_cells(columns, text)
            except ValueError:
                cells = {}
            if cells.get("op") == op:
                header = header if header is not None else "\t".join(columns).encode()
                mine.append(line)
                try:
                    keys.add(CellKey(int(cells["round"]), op, cells["side"]))
                except (KeyError, ValueError):
                    pass
            else:
                others.append(line)
        if not mine:
            return keys
        assert header is not None  # set with the first row moved
        dest.root.mkdir(parents=True, exist_ok=True)
        # The rows reach their new file before they leave the old one: a crash between keeps them twice, never none.
        write_bytes_atomic(dest.status, b"".join(line + b"\n" for line in [header, *mine]))
        write_bytes_atomic(self.layout.status, b"".join(line + b"\n" for line in others) + tail)
        return keys

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def check_alive(self) -> None:
        """A root deleted or unmounted mid-campaign stops the session instead of being silently recreated."""
        if not self.layout.lock.exists():
            raise RootStop(f"the root {self.path} vanished or lost its {self.layout.lock.name} during the "
                           "session; every row written before is in its status.tsv if the folder still exists")

    def append(self, outcome: CellOutcome) -> None:
        """Append the outcome's status row; a root that cannot take it stops the session (exit 6)."""
        try:
            append_status_row(self.path, outcome.to_row())
        except OSError as exc:
            why = "the root vanished" if not self.path.is_dir() else (exc.strerror or str(exc))
            raise RootStop(f"cannot append to {self.layout.status}: {why}")

    def finished(self, key: CellKey) -> CellOutcome | None:
        """On --ab-resume: the cell's outcome when it finished before (the last row of each cell decides)."""
        if not self.resume:
            return None
        if self._finished is None:
            rows = read_status(self.path, on_bad_line=lambda exc: self.notices.append(
                f"abbench: {exc}: line skipped; its cell runs again if no good row says it finished"))
            last = {CellKey(r.round, r.op, r.side): r for r in rows}
            outcomes = (CellOutcome.from_row(r, self.layout.cell(k)) for k, r in last.items())
            self._finished = {o.key: o for o in outcomes if o.finished and self._results_read(o)}
            for outcome in self._finished.values():
                outcome.resumed = True  # read from disk, not run in this session
        return self._finished.get(key)

    def _results_read(self, outcome: CellOutcome) -> bool:
        """Whether every record of a finished cell's results reads; one that does not is named, and the cell runs
        again (its folder set aside), so a resume repairs what the report would otherwise leave out for good."""
        path = results_file(outcome.cell_dir)
        if not path.exists():
            return True
        bad: list[str] = []
        try:
            for _ in read_results(path, lambda exc: bad.append(str(exc))):
                pass
        except OSError as exc:
            bad.append(f"{path}: {exc.strerror or exc}")
        if bad:
            self.notices.append(f"abbench: {bad[0]}{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''}: "
                                f"{outcome.key} runs again")
        return not bad

    def set_aside(self, key: CellKey) -> None:
        """An attempt that crashed or failed is kept aside, never mixed into this run's files."""
        folder = self.layout.cell(key)
        if self.resume and folder.exists():
            self.layout.attempts.mkdir(exist_ok=True)
            folder.rename(self.layout.attempt(key, time.time_ns()))


def _resume_with(option: str, value: str) -> str:
    """How to give ``option`` its kept ``value`` again: ``with --ab-regime=steady``; the flag, or its absence."""
    if option != ALLOW_NO_IR_DIFF:
        return f"with {option}={value}"
    return f"with {option}" if value == "on" else f"without {option}"
