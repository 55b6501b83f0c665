"""status.tsv: one row per finished cell, appended the moment the cell finishes.

Rows are whole or absent.  Each row is one ``os.write`` on an ``O_APPEND``
descriptor under an exclusive ``flock``: concurrent xdist workers interleave
rows, never bytes, and a pytest killed mid-campaign leaves every row it wrote.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable

from pytest_abbench.core.layout import STATUS_FILE
from pytest_abbench.core.markers import MARKERS

COLUMNS = ("round", "op", "side", "switch", "rc", "status", "elapsed_s", "success", "failed") + MARKERS


@dataclass
class StatusRow:
    round: int
    op: str
    side: str
    switch: str
    rc: int
    status: str
    elapsed_s: float
    success: int
    failed: int
    AUTOTUNE_REPLAY_FALLBACK: int = 0
    BENCHMARK_DIRECT_NO_CUDAGRAPH: int = 0
    BENCHMARK_CAPTURE_POISONED: int = 0

    def to_line(self) -> str:
        cells = []
        for f in fields(self):
            value = getattr(self, f.name)
            text = f"{value:.3f}" if isinstance(value, float) else str(value)
            # A tab or newline inside a field would tear the table.
            cells.append(text.replace("\t", " ").replace("\n", " ").replace("\r", " "))
        return "\t".join(cells) + "\n"


class StatusFormatError(ValueError):
    """A status.tsv line that cannot be parsed; names the file and line."""


def append_status_row(root: Path, row: StatusRow) -> None:
    """Append one row (and the header, if the file is new) in a single write."""
    path = root / STATUS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            payload = row.to_line()
            if os.fstat(fd).st_size == 0:
                payload = "\t".join(COLUMNS) + "\n" + payload
            data = payload.encode()
            written = os.write(fd, data)
            if written != len(data):  # pragma: no cover - regular files write whole
                raise OSError(f"{path}: short write ({written} of {len(data)} bytes)")
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def read_status(root: Path, on_bad_line: Callable[[StatusFormatError], None] | None = None) -> list[StatusRow]:
    """Every complete row of ``<root>/status.tsv``.

    A last line without its newline is the trace of a writer killed mid-row
    (only possible on a full disk); it is ignored rather than misread.  A line
    that cannot be parsed raises ``StatusFormatError`` naming file and line, or,
    with ``on_bad_line``, is handed to it and skipped: one bad line must not
    cost every good row.
    """
    path = root / STATUS_FILE
    if not path.exists():
        return []
    rows: list[StatusRow] = []
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    complete = lines[:-1]  # the piece after the last "\n" is empty or torn
    for number, line in enumerate(complete, start=1):
        if not line or line.startswith("round\t"):
            continue
        parts = line.split("\t")
        try:
            if len(parts) != len(COLUMNS):
                raise StatusFormatError(f"{path}:{number}: expected {len(COLUMNS)} fields, found {len(parts)}")
            rows.append(
                StatusRow(
                    int(parts[0]), parts[1], parts[2], parts[3], int(parts[4]), parts[5], float(parts[6]),
                    int(parts[7]), int(parts[8]), *(int(p) for p in parts[9:]),
                )
            )
        except StatusFormatError as exc:
            if on_bad_line is None:
                raise
            on_bad_line(exc)
        except ValueError as exc:
            error = StatusFormatError(f"{path}:{number}: {exc}")
            if on_bad_line is None:
                raise error from None
            on_bad_line(error)
    return rows
