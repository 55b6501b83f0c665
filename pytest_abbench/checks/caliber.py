"""Caliber: refuse to compare two sides whose numbers mean different things.

Each cell's ``run_identity.json`` is compared with the other side's before a
single latency is read.  A mismatch is a ``!!! [caliber]`` line and exit 4;
recording into a shared tuner cache is a warning; differing versions or
hosts are notes.  A missing or unreadable identity is a mismatch, never a pass.
Within one root both sides pin the one autotune record of the op; two cells of
separate roots each pin their own root's record, and those must hold the same
choices.  Side B's supplement (keys only side B meets) is not compared with
side A, but every round of side B must pin the one its round 1 cell recorded
(``compare_side_rounds``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pytest_abbench.core.fileio import CorruptFileError, read_json
from pytest_abbench.core.identity import (CALIBER_AXES, GPU_SETTING_AXES, IDENTITY_FILE, INFO_FIELDS, LATER_AXES,
                                          file_hash, read_identity, record_key, recorded)
from pytest_abbench.core.layout import SIDES, RootLayout


@dataclass
class CaliberFinding:
    """One line of the caliber check."""

    level: str  # mismatch | unchecked | warning | note
    op: str
    axis: str
    value_a: Any
    value_b: Any
    detail: str = ""
    files: tuple[str, str] = ("", "")
    labels: tuple[str, str] = ("A", "B")  # what value_a and value_b belong to: the sides, or two rounds of one side

    def key(self) -> tuple[str, str, str, str, str, str]:
        return self.level, self.op, self.axis, repr(self.value_a), repr(self.value_b), self.detail

    def line(self) -> str:
        files = f" ({self.files[0]} vs {self.files[1]})" if any(self.files) else ""
        if self.level == "mismatch":
            return (f"!!! [caliber] op={self.op} axis={self.axis}: {self.labels[0]}={self.value_a!r} "
                    f"{self.labels[1]}={self.value_b!r}"
                    f"{' - ' + self.detail if self.detail else ''}{files}")
        if self.level == "unchecked":
            return f"[caliber] op={self.op}: not compared: {self.detail}"
        if self.level == "warning":
            return f"[caliber warning] op={self.op} axis={self.axis}: {self.detail}"
        return f"[caliber note] op={self.op} {self.axis} differs: A={self.value_a!r} B={self.value_b!r}"


@dataclass
class CaliberResult:
    findings: list[CaliberFinding] = field(default_factory=list)

    @property
    def mismatches(self) -> list[CaliberFinding]:
        return [f for f in self.findings if f.level == "mismatch"]

    def extend(self, other: "CaliberResult") -> None:
        """Add findings not already present; one line per (level, op, axis, values), not per file pair."""
        seen = {f.key() for f in self.findings}
        for f in other.findings:
            if f.key() not in seen:
                self.findings.append(f)
                seen.add(f.key())


def load_identity(cell_dir: Path) -> tuple[dict[str, Any] | None, str]:
    """The identity of a cell folder, or None and why it cannot be used."""
    path = cell_dir / IDENTITY_FILE
    if not path.exists():
        return None, f"{path} is missing"
    try:
        return read_identity(path), ""
    except CorruptFileError as exc:  # not JSON, or not an identity (core/identity.py: the field and what it expected)
        return None, str(exc)
    except OSError as exc:
        return None, f"{path}: {exc}"


def _tuner_start(identity: dict[str, Any]) -> Any:
    """The op's library tuner record a cell started from: its seed, or for a cell that started from its side's
    record (keys only that side has, added to the op's), the op's record that one grew from."""
    return identity.get("tuner_cache_base", identity.get("tuner_cache_seed"))


def judge_autotune(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """None when the two autotune modes may be compared, else why not."""
    ma, mb = a.get("autotune_mode"), b.get("autotune_mode")
    if ma == "record" and mb == "record":
        return "both sides recorded their own autotune choice: each side timed its own tuner's pick, so the delta mixes the switch with autotune noise"
    if {ma, mb} == {"record", "replay"}:
        replayer, recorder = (b, a) if ma == "record" else (a, b)
        # The replaying side must replay the very record the other side wrote.
        if recorder.get("autotune_record") and (record_key(replayer.get("autotune_record"))
                                                != record_key(recorder.get("autotune_record"))):
            return (f"replay side reads {replayer.get('autotune_record')!r}, "
                    f"not the record side's {recorder.get('autotune_record')!r}")
        return None
    if ma == "replay" and mb == "replay":
        if record_key(a.get("autotune_record")) != record_key(b.get("autotune_record")):
            return "both sides replay, but from different records"
        if a.get("autotune_record_hash") != b.get("autotune_record_hash"):
            return "both sides replay the same record path, but its content changed between them"
        if _tuner_start(a) != _tuner_start(b):
            return (f"the library tuner started from different records (seed {_tuner_start(a)!r} vs "
                    f"{_tuner_start(b)!r})")
        return None
    if ma == "off" and mb == "off":
        return None
    return f"autotune modes {ma!r} and {mb!r} cannot be compared"


def run_root(cell_dir: Path) -> Path | None:
    """The campaign root a cell folder ``<root>/r<k>_<role>/<op>`` belongs to; None for any other folder."""
    root = cell_dir.parent.parent
    return root.resolve() if RootLayout(root).key_of(cell_dir) is not None else None


def _record_entries(cell_dir: Path) -> tuple[list[str] | None, Path, str]:
    """The autotune choices of the run a cell belongs to, as sorted JSON lines; None and why when unreadable."""
    root = cell_dir.parent.parent
    key = RootLayout(root).key_of(cell_dir)
    record = RootLayout(root).autotune_record(key.op if key is not None else cell_dir.name)
    if not record.exists():
        return [], record, ""  # nothing recorded: no choice pinned, like an empty record
    try:
        data = read_json(record)
        entries = data["entries"]
        return sorted(json.dumps(e, sort_keys=True) for e in entries), record, ""
    except (CorruptFileError, OSError, KeyError, TypeError) as exc:
        return None, record, f"{record} cannot be read ({exc})"


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def judge_autotune_across_runs(a: dict[str, Any], dir_a: Path, b: dict[str, Any], dir_b: Path) -> str | None:
    """Two cells of separate runs: each recorded or replayed its own run's record; those must hold the same choices.

    None when they may be compared (two empty records are equal), else why not.
    """
    ma, mb = a.get("autotune_mode"), b.get("autotune_mode")
    if ma == "off" and mb == "off":
        return None
    if "off" in (ma, mb):
        return f"autotune modes {ma!r} and {mb!r} cannot be compared"
    for side, ident, folder in (("A", a, dir_a), ("B", b, dir_b)):
        if ident.get("autotune_mode") == "replay" and ident.get("autotune_record_hash"):
            _, record, _ = _record_entries(folder)
            now = file_hash(record) if record.exists() else "missing"
            if now != ident["autotune_record_hash"]:
                return (f"side {side} replayed {record} with hash {ident['autotune_record_hash']}, "
                        f"which is now {now}: its run's record changed after it ran")
    entries_a, record_a, why_a = _record_entries(dir_a)
    entries_b, record_b, why_b = _record_entries(dir_b)
    if entries_a is None or entries_b is None:
        return why_a or why_b
    if entries_a != entries_b:
        return (f"the two runs pinned different autotune choices: {record_a} ({_entries(len(entries_a))}) and "
                f"{record_b} ({_entries(len(entries_b))}) differ, so the sides timed different configs")
    if ma == "replay" and mb == "replay" and _tuner_start(a) != _tuner_start(b):
        return (f"the library tuner started from different records (seed {_tuner_start(a)!r} vs "
                f"{_tuner_start(b)!r})")
    return None


IdentityLoader = Callable[[Path], "tuple[dict[str, Any] | None, str]"]


def compare_identities(op: str, dir_a: Path, dir_b: Path, load: IdentityLoader | None = None) -> CaliberResult:
    """Compare side A's and side B's cell folders of one op; ``load`` may serve identities from a cache."""
    result = CaliberResult()
    load = load or load_identity
    a, why_a = load(dir_a)
    b, why_b = load(dir_b)
    files = (str(dir_a / IDENTITY_FILE), str(dir_b / IDENTITY_FILE))
    if a is None or b is None:
        for side, why in (("A", why_a), ("B", why_b)):
            if why:
                # A missing file is a cell that stopped before writing it: that cell's failure, not a
                # caliber mismatch (exit 4 only when two identities exist and disagree).  A file that
                # exists but cannot be read leaves the comparison undecidable: a mismatch.
                folder = dir_a if side == "A" else dir_b
                level = "mismatch" if (folder / IDENTITY_FILE).exists() else "unchecked"
                result.findings.append(CaliberFinding(level, op, "identity", "missing" if side == "A" else "",
                                                      "missing" if side == "B" else "",
                                                      f"side {side}: {why}", files))
        return result
    for axis in CALIBER_AXES + LATER_AXES:
        if a.get(axis) != b.get(axis):
            result.findings.append(CaliberFinding("mismatch", op, axis, a.get(axis), b.get(axis), "", files))
    for axis in GPU_SETTING_AXES:
        # Only two readings can disagree: a side without one (no GPU, no NVML, a query the card refuses, an identity
        # from before these fields) says nothing about the other's settings.
        if recorded(a.get(axis)) and recorded(b.get(axis)) and a.get(axis) != b.get(axis):
            result.findings.append(CaliberFinding(
                "mismatch", op, axis, a.get(axis), b.get(axis),
                "the GPU's clock or power settings changed between the sides: at another clock or power limit the "
                "same kernel runs at another speed", files))
    root_a, root_b = run_root(dir_a), run_root(dir_b)
    if root_a is not None and root_b is not None and root_a != root_b:
        # Cells of two separate runs (abbench summary --ab): each side's own record, compared by content.
        problem = judge_autotune_across_runs(a, dir_a, b, dir_b)
    else:
        problem = judge_autotune(a, b)
    if problem:
        result.findings.append(CaliberFinding("mismatch", op, "autotune_mode", a.get("autotune_mode"),
                                              b.get("autotune_mode"), problem, files))
    for side_id in (a, b):
        cache = str(side_id.get("tuner_cache", ""))
        if cache.startswith("shared:") and side_id.get("autotune_mode") in ("record", "off"):
            result.findings.append(CaliberFinding(
                "warning", op, "tuner_cache", a.get("tuner_cache"), b.get("tuner_cache"),
                f"side {side_id.get('side')} tuned into a shared cache ({cache}): the pinned configs depend on what "
                "else ran on this machine; relative conclusions hold, absolute latencies are not quotable"))
            break
    for info in INFO_FIELDS:
        if a.get(info) != b.get(info):
            result.findings.append(CaliberFinding("note", op, info, a.get(info), b.get(info)))
    return result


def cell_pairs(round_no: int, folder: "Callable[[int, str], Path]", control: bool = False) -> list[tuple[Path, Path]]:
    """The folder pairs a round's cells are checked against: the same round, and round 1 of the other side.

    Round 1 is where side A recorded the autotune choices every later cell
    replays, so a later cell that drifted from it is as wrong as one that
    drifted from its own round's partner.  The A/A control cell (A2) is
    checked against its round's A.
    """
    pairs = [(folder(round_no, "A"), folder(round_no, "B"))]
    if round_no != 1:
        pairs += [(folder(round_no, "A"), folder(1, "B")), (folder(1, "A"), folder(round_no, "B"))]
    if control:
        pairs.append((folder(round_no, "A"), folder(round_no, "A2")))
    return pairs


def side_pairs(round_no: int, folder: "Callable[[int, str], Path]") -> list[tuple[Path, Path]]:
    """The folder pairs of one side a round's cells are checked against: each side's rounds 1 and 2 (the cell
    that recorded its side's supplement, the first that replayed it).

    A side's supplement record (the tuner keys the op's record lacks) differs
    between the sides by design; within a side every round must replay the
    one its first cell recorded.
    """
    firsts = [1, 2] if round_no > 2 else [1] if round_no == 2 else []  # the recorder, and the first replayer
    return [(folder(first, side), folder(round_no, side)) for first in firsts for side in SIDES]


def compare_side_rounds(op: str, first: Path, later: Path, load: IdentityLoader | None = None) -> CaliberResult:
    """A side's later cell against an earlier one: the same supplement record, by path and content, and the same
    library tuner record to start from.

    An identity that is missing or unreadable is the cross-side check's to
    report (``compare_identities``); nothing is said of it here.
    """
    result = CaliberResult()
    load = load or load_identity
    a, _ = load(first)
    b, _ = load(later)
    if a is None or b is None:
        return result
    path_a, path_b = a.get("autotune_side_record"), b.get("autotune_side_record")
    hash_a, hash_b = a.get("autotune_side_record_hash"), b.get("autotune_side_record_hash")
    # A recorder that ended before saving its record (a crash, a timeout) left no record: there is nothing its
    # side's later cells could have replayed from it, and the cell's own failure is what the session reports.
    never_saved = a.get("autotune_side_mode") == "record" and hash_a is None
    if not never_saved and (record_key(path_a) != record_key(path_b) or hash_a != hash_b):
        result.findings.append(_side_finding(op, first, later, "autotune_side_record", hash_a, hash_b,
                                             f"pinned the tuner keys only it has from different records ({path_a!r} "
                                             f"hash {hash_a!r}, then {path_b!r} hash {hash_b!r})"))
    if b.get("autotune_side_mode") is None:
        return result  # side A: its record cell tuned from nothing, its later cells start from what it recorded
    # Two cells that replay the side's records started from the same library tuner record; the one that recorded
    # it started from the op's record, which the side's record grew from.
    both_replay = a.get("autotune_side_mode") == b.get("autotune_side_mode") == "replay"
    seed_a, seed_b = ((a.get("tuner_cache_seed"), b.get("tuner_cache_seed")) if both_replay
                      else (_tuner_start(a), _tuner_start(b)))
    if seed_a != seed_b:
        result.findings.append(_side_finding(op, first, later, "tuner_cache_seed", seed_a, seed_b,
                                             "started its library tuner from different records"))
    return result


def _side_finding(op: str, first: Path, later: Path, axis: str, value_a: Any, value_b: Any,
                  what: str) -> CaliberFinding:
    keys = [RootLayout(folder.parent.parent).key_of(folder) for folder in (first, later)]
    labels = [key.cell_id if key is not None else str(folder) for key, folder in zip(keys, (first, later))]
    side = keys[1].side if keys[1] is not None else "?"
    return CaliberFinding("mismatch", op, axis, value_a, value_b,
                          f"side {side}'s cells {what}: its rounds timed different configs",
                          (str(first / IDENTITY_FILE), str(later / IDENTITY_FILE)), (labels[0], labels[1]))


@dataclass(frozen=True)
class MixedTimer:
    """A shape the two sides timed with different timers: its latencies are not comparable."""

    shape: str
    timer_a: str
    timer_b: str

    def text(self) -> str:
        return f"{self.shape} (A {self.timer_a}, B {self.timer_b})"


def compare_shape_timers(op: str, results_a: dict[str, dict[str, Any]],
                         results_b: dict[str, dict[str, Any]]) -> list[MixedTimer]:
    """Shapes timed with a different timer on the two sides, in shape order: they get no verdict."""
    mixed = []
    for shape in sorted(set(results_a) & set(results_b)):
        ta, tb = results_a[shape].get("timer"), results_b[shape].get("timer")
        if ta and tb and ta != tb:
            mixed.append(MixedTimer(shape, str(ta), str(tb)))
    return mixed
