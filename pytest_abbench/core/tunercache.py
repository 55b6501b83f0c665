"""Library tuner caches (FlagGems' LibTuner SQLite files) pinned like Triton's autotuner.

Every cell gets its own ``FLAGGEMS_CACHE_DIR``.  Round 1 side A tunes into a
fresh one (record); the plugin then keeps a copy of its ``config_cache`` as
the op's record, and every other cell starts from a copy of that record
(inherited replay).  Keys side A never met (a library only side B calls) are
tuned by round 1 side B, which starts from the record like any cell; when its
database grew, the plugin keeps it as side B's record, a superset of the op's,
and side B's later cells start from that.  A replay cell whose database grew
tuned a key its record lacked: that prints ``AUTOTUNE_REPLAY_FALLBACK`` like
Triton's autotuner does.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path
from typing import Callable

from pytest_abbench.core.layout import CELL_TUNER_CACHE_DIR, RootLayout

CELL_CACHE_DIR = CELL_TUNER_CACHE_DIR
CONFIG_DIR = "config_cache"  # LibTuner's databases live here under FLAGGEMS_CACHE_DIR


def record_dir(root: Path, op: str) -> Path:
    return RootLayout(root).tuner_record(op)


def keep_record(cell_cache: Path, root: Path, op: str) -> bool:
    """After round 1 side A: its tuned databases become the op's record.  False when it tuned nothing."""
    source = cell_cache / CONFIG_DIR
    if not any(source.glob("*.db")):
        return False
    target = record_dir(root, op) / CONFIG_DIR
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    return True


def keep_side_record(cell_cache: Path, root: Path, op: str, side: str) -> bool:
    """After a side's first cell: its databases become the side's record when they grew over the op's record
    (it tuned keys the record lacks).  False (and no side record) when it tuned nothing new."""
    target = RootLayout(root).tuner_side_record(op, side) / CONFIG_DIR
    if target.exists():
        shutil.rmtree(target)  # an earlier attempt's
    mine = content_hash(cell_cache)
    if mine is None or mine == content_hash(record_dir(root, op)):
        return False
    shutil.copytree(cell_cache / CONFIG_DIR, target)
    return True


def seed_source(root: Path, op: str, side: str | None = None) -> Path:
    """The record a replay cell starts from: its side's record where ``side`` has one (pass the side only for cells
    that replay it), else the op's."""
    if side is not None and databases(RootLayout(root).tuner_side_record(op, side)):
        return RootLayout(root).tuner_side_record(op, side)
    return record_dir(root, op)


def seed_from_record(root: Path, op: str, cell_cache: Path, side: str | None = None) -> None:
    """Before a replay cell: start its cache as a copy of its record (``seed_source``; nothing: starts empty)."""
    source = seed_source(root, op, side) / CONFIG_DIR
    if source.is_dir():
        shutil.copytree(source, cell_cache / CONFIG_DIR, dirs_exist_ok=True)


def databases(cache: Path) -> list[Path]:
    return sorted((cache / CONFIG_DIR).glob("*.db")) if (cache / CONFIG_DIR).is_dir() else []


def content_hash(cache: Path) -> str | None:
    """sha256 (16 hex) over the databases' names and bytes; None when there is none."""
    files = databases(cache)
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def row_counts(cache: Path) -> dict[str, int]:
    """``db:table`` -> rows, for every table of every database (read-only; a corrupt file counts as -1)."""
    counts: dict[str, int] = {}
    for path in databases(cache):
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
                tables = [r[0] for r in conn.execute("select name from sqlite_master where type='table'")]
                for table in tables:
                    counts[f"{path.name}:{table}"] = conn.execute(f'select count(*) from "{table}"').fetchone()[0]
        except sqlite3.Error:
            counts[f"{path.name}:?"] = -1
    return counts


def report_growth(before: dict[str, int], after: dict[str, int], log: Callable[[str], None],
                  marker: str) -> int:
    """Print ``marker`` once per table that gained rows during a replay cell; returns how many."""
    grown = 0
    for table, rows in sorted(after.items()):
        if rows > before.get(table, 0):
            grown += 1
            log(f"{marker} kernel=libtuner:{table} key=+{rows - before.get(table, 0)} rows tuned in this cell")
    return grown
