"""``history.sqlite``: every finished root, by commit, in one SQLite file (the standard library's sqlite3).

The schema's version is kept in the table ``schema_info``.  One schema is
read and written; a file of another version is refused by name.  Every
failure (locked, corrupt, not a history file, another schema) is a
``HistoryError`` whose message names the file.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Concatenate, ParamSpec, TypeVar

from pytest_abbench.core.layout import HISTORY_FILE as HISTORY_FILE  # the file's default name, with its format

BUSY_TIMEOUT_S = 2.0  # a session's end waits this long for another writer, then says the file is locked
SCHEMA_VERSION = 2  # the one schema this package reads and writes; a file of another version is refused by name
# The tables of an empty file, created in one transaction.  ops and shapes are keyed by regime: an op reported
# under both timing regimes (--ab-regime both) is two rows.
SCHEMA: tuple[str, ...] = (
    "CREATE TABLE schema_info (version INTEGER NOT NULL)",
    f"INSERT INTO schema_info (version) VALUES ({SCHEMA_VERSION})",
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        recorded_at REAL NOT NULL,        -- unix time the record was written
        root TEXT NOT NULL,               -- relative to the history file's folder where possible
        label TEXT NOT NULL DEFAULT '',   -- e.g. a bisection's step
        exit_code INTEGER,
        complete INTEGER NOT NULL,
        rounds INTEGER NOT NULL,
        margin_pct REAL NOT NULL,
        switch TEXT NOT NULL,
        commit_sha TEXT,                  -- the code under test: side B's tree, else the campaign's repository
        commit_time INTEGER,              -- its committer time (unix), which orders abbench history
        commit_depth INTEGER,             -- its ancestors' count: the order of commits made in one second
        commit_subject TEXT,
        dirty INTEGER,                    -- 1: uncommitted changes to tracked files of that tree
        campaign_hash TEXT NOT NULL,      -- a hash of the campaign files and their content hashes
        campaign TEXT NOT NULL,           -- JSON: campaign file -> content hash
        sources TEXT NOT NULL,            -- JSON: every tree looked at (campaign, A, B) with its git state
        identity TEXT NOT NULL,           -- JSON: device, driver, triton, torch, timer, backend, level
        auto_rounds TEXT NOT NULL DEFAULT '{}'  -- JSON: report.json's auto_rounds
    )""",
    """CREATE TABLE ops (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        op TEXT NOT NULL,
        regime TEXT NOT NULL DEFAULT '',  -- burst | steady
        state TEXT NOT NULL,
        geomean_pct REAL, geomean_lo REAL, geomean_hi REAL,
        rounds_completed INTEGER NOT NULL,  -- the rounds it ran (--ab-rounds auto: up to rounds_expected)
        rounds_expected INTEGER NOT NULL,
        stopped TEXT NOT NULL DEFAULT '', -- --ab-rounds auto: settled | cap | budget
        PRIMARY KEY (run_id, op, regime)
    )""",
    """CREATE TABLE shapes (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        op TEXT NOT NULL,
        regime TEXT NOT NULL DEFAULT '',
        shape TEXT NOT NULL,
        rounds INTEGER NOT NULL,
        a_ms REAL NOT NULL, b_ms REAL NOT NULL,
        delta_pct REAL NOT NULL, ci_lo REAL, ci_hi REAL,
        verdict TEXT NOT NULL,
        within_margin INTEGER NOT NULL,
        flags TEXT NOT NULL,              -- JSON list of report/flags.py names (GPU flags included)
        PRIMARY KEY (run_id, op, regime, shape)
    )""",
    "CREATE INDEX shapes_by_op ON shapes (op, shape)",
)
P = ParamSpec("P")
R = TypeVar("R")


class HistoryError(Exception):
    """The history file cannot be used: the message names it and says why (locked, corrupt, newer schema)."""


@dataclass
class ShapeRecord:
    """One shape of one op in one run, as report.json gave it."""

    op: str
    shape: str
    rounds: int
    a_ms: float
    b_ms: float
    delta_pct: float
    ci_pct: tuple[float, float] | None
    verdict: str
    within_margin: bool = False
    flags: list[str] = field(default_factory=list)  # report/flags.py names, the GPU's included
    regime: str = ""  # the timing regime it was timed under


@dataclass
class OpRecord:
    op: str
    state: str
    geomean_pct: float | None = None
    geomean_ci_pct: tuple[float, float] | None = None
    regime: str = ""
    rounds_completed: int = 0  # the rounds it ran (--ab-rounds auto: up to rounds_expected)
    rounds_expected: int = 0
    stopped: str = ""  # --ab-rounds auto: settled | cap | budget


@dataclass
class SourceTree:
    """A folder the run's code came from, and its git state (commit None: not in a git repository)."""

    role: str  # campaign | A | B
    path: str
    commit: str | None = None
    commit_time: int | None = None
    subject: str | None = None
    dirty: bool | None = None
    depth: int | None = None  # commits reachable from it: orders commits of one second along a branch

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunRecord:
    """What the history keeps of one finished root."""

    root: str
    exit_code: int | None
    complete: bool
    rounds: int
    margin_pct: float
    switch: str
    campaign: dict[str, str]
    campaign_hash: str
    sources: list[SourceTree]
    identity: dict[str, Any]
    ops: list[OpRecord]
    shapes: list[ShapeRecord]
    label: str = ""
    recorded_at: float = 0.0
    id: int | None = None
    auto_rounds: dict[str, int] = field(default_factory=dict)  # report.json's: empty with fixed rounds

    @property
    def subject_tree(self) -> SourceTree | None:
        """The code under test: side B's tree when the switch points B at one in git, else the campaign's."""
        for role in ("B", "campaign"):
            for tree in self.sources:
                if tree.role == role and tree.commit is not None:
                    return tree
        return None


def _pair(lo: Any, hi: Any) -> tuple[float, float] | None:
    return None if lo is None or hi is None else (float(lo), float(hi))


def _named_errors(method: Callable[Concatenate["History", P], R]) -> Callable[Concatenate["History", P], R]:
    """sqlite3's errors as HistoryError naming the file: busy (locked) and corrupt get their own words."""

    def wrapped(self: "History", /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise HistoryError(f"{self.path}: locked by another process (still busy after "
                                   f"{self.timeout_s:g} s)") from None
            raise HistoryError(f"{self.path}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{self.path}: corrupt or not an SQLite file ({exc})") from None
        except (ValueError, TypeError, KeyError) as exc:  # a row that does not hold what the schema says
            raise HistoryError(f"{self.path}: corrupt history record ({exc!r})") from None

    wrapped.__name__, wrapped.__doc__ = method.__name__, method.__doc__
    return wrapped


class History:
    """An open history file.  Use as a context manager; every method raises HistoryError naming the file."""

    def __init__(self, path: Path, timeout_s: float = BUSY_TIMEOUT_S, create: bool = True) -> None:
        self.path = path
        self.timeout_s = timeout_s
        if not create and not path.is_file():
            raise HistoryError(f"{path}: no history file there")
        try:
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise HistoryError(f"{path}: cannot open the history file ({exc})") from None
        try:
            self.version = self._open(create)
        except HistoryError:
            self.db.close()
            raise

    def __enter__(self) -> "History":
        return self

    def __exit__(self, *exc: object) -> None:
        self.db.close()

    @_named_errors
    def _read_version(self) -> int:
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return 0
        if "schema_info" not in tables:
            raise HistoryError(f"{self.path}: not a pytest-abbench history file (no schema_info table; it has "
                               f"{', '.join(sorted(tables))})")
        row = self.db.execute("SELECT version FROM schema_info").fetchone()
        if row is None or not isinstance(row[0], int):
            raise HistoryError(f"{self.path}: corrupt history file (schema_info holds no version)")
        return int(row[0])

    def _check_version(self, version: int) -> int:
        if version > SCHEMA_VERSION:
            raise HistoryError(f"{self.path}: history schema version {version} is newer than this pytest-abbench's "
                               f"{SCHEMA_VERSION}: upgrade pytest-abbench, or record into another file "
                               "(--ab-history PATH)")
        if version < SCHEMA_VERSION:
            raise HistoryError(f"{self.path}: history schema version {version}, older than {SCHEMA_VERSION}, which "
                               "this pytest-abbench no longer reads: record into another file (--ab-history PATH)")
        return version

    @_named_errors
    def _open(self, create: bool) -> int:
        """The file's schema version, checked; an empty file given ``create`` gets the schema (BEGIN IMMEDIATE:
        one writer)."""
        if not create:
            return self._check_version(self._read_version())
        self.db.execute("BEGIN IMMEDIATE")
        try:
            version = self._read_version()
            if version == 0:
                for statement in SCHEMA:
                    self.db.execute(statement)
                version = SCHEMA_VERSION
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        return self._check_version(version)

    @_named_errors
    def add_run(self, record: RunRecord) -> int:
        """Store one run in one transaction; returns its id.

        A root recorded before (a resumed root, a bisection step given more rounds) keeps only this, its
        latest, record: one row per root.
        """
        subject = record.subject_tree
        self.db.execute("BEGIN IMMEDIATE")
        try:
            for table, column in (("shapes", "run_id"), ("ops", "run_id"), ("runs", "id")):
                self.db.execute(f"DELETE FROM {table} WHERE {column} IN (SELECT id FROM runs WHERE root = ?)",
                                (record.root,))
            cursor = self.db.execute(
                "INSERT INTO runs (recorded_at, root, label, exit_code, complete, rounds, margin_pct, switch, "
                "commit_sha, commit_time, commit_depth, commit_subject, dirty, campaign_hash, campaign, sources, identity, "
                "auto_rounds) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.recorded_at, record.root, record.label, record.exit_code, int(record.complete), record.rounds,
                 record.margin_pct, record.switch, subject.commit if subject else None,
                 subject.commit_time if subject else None, subject.depth if subject else None,
                 subject.subject if subject else None,
                 None if subject is None or subject.dirty is None else int(subject.dirty), record.campaign_hash,
                 json.dumps(record.campaign, sort_keys=True), json.dumps([t.to_json() for t in record.sources]),
                 json.dumps(record.identity, sort_keys=True, default=str), json.dumps(record.auto_rounds)))
            run_id = int(cursor.lastrowid or 0)
            for op in record.ops:
                ci = op.geomean_ci_pct
                self.db.execute("INSERT INTO ops (run_id, op, regime, state, geomean_pct, geomean_lo, geomean_hi, "
                                "rounds_completed, rounds_expected, stopped) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                (run_id, op.op, op.regime, op.state, op.geomean_pct, ci[0] if ci else None,
                                 ci[1] if ci else None, op.rounds_completed, op.rounds_expected, op.stopped))
            for s in record.shapes:
                self.db.execute("INSERT INTO shapes (run_id, op, regime, shape, rounds, a_ms, b_ms, delta_pct, ci_lo, "
                                "ci_hi, verdict, within_margin, flags) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                (run_id, s.op, s.regime, s.shape, s.rounds, s.a_ms, s.b_ms, s.delta_pct,
                                 s.ci_pct[0] if s.ci_pct else None, s.ci_pct[1] if s.ci_pct else None, s.verdict,
                                 int(s.within_margin), json.dumps(s.flags)))
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        record.id = run_id
        return run_id

    @_named_errors
    def runs(self) -> list[RunRecord]:
        """Every run, oldest record first, with its ops and shapes."""
        out: dict[int, RunRecord] = {}
        for row in self.db.execute("SELECT id, recorded_at, root, label, exit_code, complete, rounds, margin_pct, "
                                   "switch, campaign_hash, campaign, sources, identity, auto_rounds FROM runs "
                                   "ORDER BY id"):
            (run_id, recorded_at, root, label, exit_code, complete, rounds, margin, switch, campaign_hash,
             campaign, sources, identity, auto_rounds) = row
            out[run_id] = RunRecord(root=root, exit_code=exit_code, complete=bool(complete), rounds=rounds,
                                    margin_pct=margin, switch=switch, campaign=json.loads(campaign),
                                    campaign_hash=campaign_hash,
                                    sources=[SourceTree(**t) for t in json.loads(sources)],
                                    identity=json.loads(identity), ops=[], shapes=[], label=label,
                                    recorded_at=recorded_at, id=run_id, auto_rounds=json.loads(auto_rounds))
        for (run_id, op, regime, state, geo, lo, hi, done, expected, stopped) in self.db.execute(
                "SELECT run_id, op, regime, state, geomean_pct, geomean_lo, geomean_hi, rounds_completed, "
                "rounds_expected, stopped FROM ops ORDER BY run_id, op, regime"):
            out[run_id].ops.append(OpRecord(op, state, geo, _pair(lo, hi), regime, done, expected, stopped))
        for (run_id, op, regime, shape, rounds, a_ms, b_ms, delta, lo, hi, verdict, within,
             flags) in self.db.execute("SELECT run_id, op, regime, shape, rounds, a_ms, b_ms, delta_pct, ci_lo, "
                                       "ci_hi, verdict, within_margin, flags FROM shapes ORDER BY run_id, op, regime, "
                                       "rowid"):
            out[run_id].shapes.append(ShapeRecord(op, shape, rounds, a_ms, b_ms, delta, _pair(lo, hi), verdict,
                                                  bool(within), json.loads(flags), regime))
        return list(out.values())

    def root_path(self, record: RunRecord) -> Path:
        """A run's root as a path: relative roots are relative to the history file's folder."""
        return Path(record.root) if os.path.isabs(record.root) else self.path.parent / record.root


def stored_root(history_file: Path, root: Path) -> str:
    """``root`` as the history keeps it: relative to the history file's folder where one path leads to the
    other (the two move together), else absolute."""
    try:
        return os.path.relpath(root.resolve(), history_file.resolve().parent)
    except ValueError:  # another drive (Windows)
        return str(root.resolve())
