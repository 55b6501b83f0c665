"""status.tsv: one row per finished cell, appended the moment the cell finishes.

Rows are whole or absent.  Each row is one ``os.write`` on an ``O_APPEND``
descriptor under an exclusive ``flock``: concurrent xdist workers interleave
rows, never bytes, and a pytest killed mid-campaign leaves every row it wrote.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Callable, Mapping, Sequence

from pytest_abbench.core.layout import STATUS_FILE
from pytest_abbench.core.markers import MARKERS

COLUMNS = ("round", "op", "side", "switch", "rc", "status", "elapsed_s", "success", "failed") + MARKERS
# How a column's text becomes its field, by the field's declared type, and what the text must be.
_PARSERS: dict[str, tuple[Callable[[str], object], str]] = {
    "int": (int, "a whole number"), "float": (float, "a number"), "str": (str, "text")}


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

    @classmethod
    def from_cells(cls, cells: Mapping[str, str]) -> "StatusRow":
        """The row from its text by column name; a ValueError names the column that failed and what it expected.

        A marker column the header lacks counts 0 (its default); any other column it lacks is an error.
        """
        values: dict[str, object] = {}
        for f in fields(cls):
            if f.name not in cells:
                if f.default is MISSING:
                    raise ValueError(f"column {f.name!r}: missing (the header has no such column)")
                continue
            parse, expected = _PARSERS[str(f.type)]
            try:
                values[f.name] = parse(cells[f.name])
            except ValueError:
                raise ValueError(f"column {f.name!r}: expected {expected}, got {cells[f.name]!r}") from None
        return cls(**values)  # type: ignore[arg-type]  # each value parsed by its field's declared type


def header_columns(line: str) -> tuple[str, ...] | None:
    """The column names a header line declares; None when ``line`` is not a header.

    A header's first field is a column name; a row's is a value (the round, in the order written).
    """
    names = tuple(line.split("\t"))
    return names if names[0] in COLUMNS else None


def row_cells(columns: Sequence[str], line: str) -> dict[str, str]:
    """A row's text by the header's column names; a ValueError when it has not one field per column."""
    parts = line.split("\t")
    if len(parts) != len(columns):
        raise ValueError(f"expected {len(columns)} fields, found {len(parts)}")
    return dict(zip(columns, parts))


class StatusFormatError(ValueError):
    """A status.tsv line that cannot be parsed; names the file and line."""


def append_status_row(root: Path, row: StatusRow) -> None:
    """Append one row (and the header, if the file is new) in a single write."""
    path = root / STATUS_FILE
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)  # read: does the last row end its line
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            payload = row.to_line()
            size = os.fstat(fd).st_size
            if size == 0:
                payload = "\t".join(COLUMNS) + "\n" + payload
            elif os.pread(fd, 1, size - 1) != b"\n":
                # A writer stopped mid-row: this row starts on a line of its own, or both would be lost in one line;
                # where that row was the header (no line ends yet), the header is written again before it.
                header_torn = b"\n" not in os.pread(fd, size, 0)
                payload = "\n" + ("\t".join(COLUMNS) + "\n" if header_torn else "") + payload
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
    (only possible on a full disk); it is ignored rather than misread, and
    named to ``on_bad_line``; the next row appended starts on a line of its own,
    after which it is an unparsable line like any other.  A line that cannot be
    parsed raises ``StatusFormatError`` naming file and line, or, with
    ``on_bad_line``, is handed to it and skipped: one bad line must not cost
    every good row.
    """
    path = root / STATUS_FILE
    if not path.exists():
        return []
    rows: list[StatusRow] = []
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    complete = lines[:-1]  # the piece after the last "\n" is empty or torn
    columns: tuple[str, ...] = COLUMNS  # until a header names them (rows written by hand may have none)
    for number, line in enumerate(complete, start=1):
        if not line:
            continue
        try:
            header = header_columns(line)
            if header is not None:
                unknown = [c for c in header if c not in COLUMNS]
                if unknown:
                    raise ValueError(f"column {unknown[0]!r}: not a status.tsv column (known: {', '.join(COLUMNS)})")
                columns = header
                continue
            rows.append(StatusRow.from_cells(row_cells(columns, line)))
        except ValueError as exc:
            error = StatusFormatError(f"{path}:{number}: {exc}")
            if on_bad_line is None:
                raise error from None
            on_bad_line(error)
    if lines[-1] and on_bad_line is not None:
        on_bad_line(StatusFormatError(f"{path}:{len(lines)}: a torn last row (no newline: its writer stopped "
                                      f"mid-row): {lines[-1][:60]!r}"))
    return rows
