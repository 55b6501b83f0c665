"""A history record from a finished root: its report.json, campaign.json, a cell's identity, and git.

``record_root`` is what a session calls at its end (and the bisection after
each step): it reads only the root's own files, plus git for the trees the
run's code came from, and writes one row set into the history file.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from pytest_abbench.core.fileio import CorruptFileError
from pytest_abbench.core.identity import CALIBER_AXES, INFO_FIELDS, LATER_AXES, read_identity
from pytest_abbench.core.layout import IDENTITY_FILE, RootLayout
from pytest_abbench.core.plan import read_manifest
from pytest_abbench.history import git
from pytest_abbench.history.store import (History, OpRecord, RunRecord, ShapeRecord, SourceTree,
                                          stored_root)
from pytest_abbench.report.model import read_report

# The identity fields a history row keeps: what a number means, and what built it.
IDENTITY_KEPT = (*CALIBER_AXES, *LATER_AXES, "autotune_mode", *(f for f in INFO_FIELDS if f != "campaign_hash"))


def source_tree(role: str, path: Path) -> SourceTree:
    """``path``'s git state: the commit of the work tree holding it, its time, subject and dirtiness."""
    top = git.toplevel(path)
    state = git.head_state(top) if top is not None else None
    if state is None:
        return SourceTree(role, str(path))
    sha, when, subject, dirty, depth = state
    return SourceTree(role, str(top), sha, when, subject, dirty, depth)


def run_identity(layout: RootLayout) -> dict[str, Any]:
    """The kept fields of the first readable side-A identity (then any side's), with side B's versions."""
    found: dict[str, dict[str, Any]] = {}
    for key, folder in layout.cell_folders():
        if key.role in found:
            continue
        try:
            found[key.role] = read_identity(folder / IDENTITY_FILE)
        except (OSError, CorruptFileError):
            continue
    first = found.get("A") or next(iter(found.values()), {})
    kept = {k: first[k] for k in IDENTITY_KEPT if k in first}
    other = found.get("B", {})
    for name in ("triton", "torch", "python_executable"):
        if name in other and other[name] != first.get(name):
            kept[f"{name}_b"] = other[name]
    return kept


def build_record(root: Path, exit_code: int | None, trees: Mapping[str, Sequence[str]] | None = None,
                 label: str = "") -> RunRecord:
    """The record of the finished root at ``root`` (report.json must exist); ``trees``: side -> the folders
    its switch puts on the import path (``campaign.switches.source_trees``)."""
    layout = RootLayout(root)
    report = read_report(layout.report_json)
    campaign: dict[str, str] = {}
    if layout.manifest.exists():
        campaign = dict(read_manifest(layout.manifest).campaign_files or {})
    sources: list[SourceTree] = []
    seen: set[str] = set()
    for path in campaign:
        tree = source_tree("campaign", Path(path))
        if tree.path not in seen:
            seen.add(tree.path)
            sources.append(tree)
    for side, folders in sorted((trees or {}).items()):
        for folder in folders:
            sources.append(source_tree(side, Path(folder)))
    ops = [OpRecord(o.op, o.state, o.geomean_pct, o.geomean_ci_pct, o.regime, o.rounds_completed, o.rounds_expected,
                    o.stopped) for o in report.ops]
    shapes = [ShapeRecord(o.op, s.shape, s.rounds, s.a_ms, s.b_ms, s.delta_pct, s.ci_pct, s.verdict,
                          s.within_margin, list(s.flags), o.regime) for o in report.ops for s in o.shapes]
    identity = {**report.setup, **run_identity(layout)}
    return RunRecord(root=str(root), exit_code=exit_code, complete=report.complete, rounds=report.rounds_planned,
                     margin_pct=report.margin_pct, switch=report.setup.get("switch", ""), campaign=campaign,
                     campaign_hash=hashlib.sha256(json.dumps(campaign, sort_keys=True).encode()).hexdigest()[:16],
                     sources=sources, identity=identity, ops=ops, shapes=shapes, label=label,
                     recorded_at=time.time(), auto_rounds=dict(report.auto_rounds))


def record_root(history_file: Path, root: Path, exit_code: int | None,
                trees: Mapping[str, Sequence[str]] | None = None, label: str = "") -> int:
    """Add the finished root to the history file; returns the run's id.

    Raises HistoryError (naming the file) when the history cannot be written, and CorruptFileError or
    OSError (naming the root's file) when the root cannot be read; the caller says so in one line.
    """
    record = build_record(root, exit_code, trees, label)
    record.root = stored_root(history_file, root)
    with History(history_file) as history:
        return history.add_run(record)
