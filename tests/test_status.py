"""status.tsv: rows appended by concurrent writers stay whole, with one header."""

from __future__ import annotations

import multiprocessing
from dataclasses import fields
from pathlib import Path

import pytest

from pytest_abbench.core.status import COLUMNS, StatusFormatError, StatusRow, append_status_row, read_status


def _writer(root: str, worker: int) -> None:
    for i in range(200):
        append_status_row(Path(root), StatusRow(i, f"op{worker}", "A", "X=1", 0, "ok", 1.5, 3, 0))


def test_concurrent_writers_interleave_whole_rows(tmp_path: Path) -> None:
    procs = [multiprocessing.Process(target=_writer, args=(str(tmp_path), w)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    rows = read_status(tmp_path)
    assert len(rows) == 1600
    assert (tmp_path / "status.tsv").read_text().count("round\top") == 1
    assert {(r.op, r.round) for r in rows} == {(f"op{w}", i) for w in range(8) for i in range(200)}


HEADER = "\t".join(COLUMNS)
ROW = StatusRow(3, "mm", "B", "X=1", 0, "ok", 2.25, 4, 1, 0, 2, 0)


def test_the_columns_are_the_row_fields_in_order() -> None:
    assert COLUMNS == tuple(f.name for f in fields(StatusRow))


def test_rows_are_read_through_the_header_names(tmp_path: Path) -> None:
    # Columns in another order than COLUMNS: each value lands in the field its header names.
    order = list(reversed(COLUMNS))
    line = ROW.to_line().rstrip("\n").split("\t")
    by_name = dict(zip(COLUMNS, line))
    (tmp_path / "status.tsv").write_text("\t".join(order) + "\n" + "\t".join(by_name[c] for c in order) + "\n")
    assert read_status(tmp_path) == [ROW]


def test_a_bad_value_names_file_line_column_and_what_it_expected(tmp_path: Path) -> None:
    append_status_row(tmp_path, ROW)
    cells = ROW.to_line().rstrip("\n").split("\t")
    cells[COLUMNS.index("rc")] = "x"
    with (tmp_path / "status.tsv").open("a") as f:
        f.write("\t".join(cells) + "\n")
    path = tmp_path / "status.tsv"
    with pytest.raises(StatusFormatError) as caught:
        read_status(tmp_path)
    assert str(caught.value) == f"{path}:3: column 'rc': expected a whole number, got 'x'"
    seen: list[StatusFormatError] = []
    assert read_status(tmp_path, on_bad_line=seen.append) == [ROW]
    assert [str(e) for e in seen] == [f"{path}:3: column 'rc': expected a whole number, got 'x'"]


def test_a_header_without_a_required_column_or_with_an_unknown_one_is_named(tmp_path: Path) -> None:
    path = tmp_path / "status.tsv"
    without_rc = [c for c in COLUMNS if c != "rc"]
    path.write_text("\t".join(without_rc) + "\n" + "\t".join("1" for _ in without_rc) + "\n")
    with pytest.raises(StatusFormatError, match=r"status\.tsv:2: column 'rc': missing"):
        read_status(tmp_path)
    path.write_text(HEADER + "\tcolour\n")
    with pytest.raises(StatusFormatError, match=r"status\.tsv:1: column 'colour': not a status\.tsv column"):
        read_status(tmp_path)


def test_a_header_without_marker_columns_reads_them_as_zero(tmp_path: Path) -> None:
    plain = COLUMNS[:9]
    (tmp_path / "status.tsv").write_text("\t".join(plain) + "\n" + "1\tmm\tA\tX=1\t0\tok\t1.500\t3\t0\n")
    assert read_status(tmp_path) == [StatusRow(1, "mm", "A", "X=1", 0, "ok", 1.5, 3, 0)]


def test_rows_without_a_header_read_in_the_columns_order(tmp_path: Path) -> None:
    (tmp_path / "status.tsv").write_text(ROW.to_line())
    assert read_status(tmp_path) == [ROW]


def test_a_row_appended_after_a_torn_one_keeps_a_line_of_its_own_and_the_torn_one_is_named(tmp_path: Path) -> None:
    """A writer stopped mid-row (a full disk, a kill during the write) left a last line without its newline.
    Before, the next row was appended onto it: one line of 16 fields, both rows lost, and the torn one never named."""
    first = StatusRow(1, "cpa", "A", "X=1", 0, "ok", 1.5, 3, 0)
    append_status_row(tmp_path, first)
    path = tmp_path / "status.tsv"
    path.write_text(path.read_text() + ROW.to_line()[:20])  # the torn row
    named: list[str] = []
    assert read_status(tmp_path, on_bad_line=lambda exc: named.append(str(exc))) == [first]
    assert named == [f"{path}:3: a torn last row (no newline: its writer stopped mid-row): {ROW.to_line()[:20]!r}"]
    assert read_status(tmp_path) == [first]  # without a handler the torn row is still no error
    append_status_row(tmp_path, ROW)
    named.clear()
    assert read_status(tmp_path, on_bad_line=lambda exc: named.append(str(exc))) == [first, ROW]
    torn_fields = len(ROW.to_line()[:20].split("\t"))
    assert named == [f"{path}:3: expected {len(COLUMNS)} fields, found {torn_fields}"]


def test_rows_appended_after_a_torn_header_keep_a_header_of_their_own(tmp_path: Path) -> None:
    """The first write (header and row) cut at a tab left "round<TAB>op<TAB>side": a row on a line of its own
    under it would be read by that three-column header and lost, every later row with it."""
    (tmp_path / "status.tsv").write_text("\t".join(COLUMNS[:3]))
    append_status_row(tmp_path, ROW)
    append_status_row(tmp_path, ROW)
    assert read_status(tmp_path, on_bad_line=lambda exc: None) == [ROW, ROW]
