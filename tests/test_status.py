"""status.tsv: rows appended by concurrent writers stay whole, with one header."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from pytest_abbench.core.status import StatusRow, append_status_row, read_status


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
