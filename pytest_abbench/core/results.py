"""results.jsonl: one record per shape a cell measured (or failed), appended as each shape finishes.

The cell process writes it (``child/measure.py``); the parent counts it
(``spawn/runner.count_shapes``) and the report reads it (``report/build.py``).
Each record carries the format version; a record without one is the layout
from before versions (version 1, the same fields).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from pytest_abbench.core.fileio import SCHEMA_FIELD, Fields, append_jsonl, numbered_jsonl

RESULTS_SCHEMA = 1
OK = "ok"  # timed; every other status (wrong, error, poisoned) is a failed shape


@dataclass
class ShapeResult:
    """One shape of one cell: timed (``ok``, with its samples) or failed (``wrong``, ``error``, ``poisoned``)."""

    shape: str
    status: str
    params: dict[str, Any] = field(default_factory=dict)
    index: int | None = None  # its place in the op's shape list
    layout_pad_bytes: list[int] | None = None  # --ab-layout-shift: the pads held while it ran
    timer: str | None = None
    samples_ms: list[float] = field(default_factory=list)
    median_ms: float | None = None
    n: int | None = None
    marker: str | None = None  # a timer's fallback marker (core/markers.py)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {SCHEMA_FIELD: RESULTS_SCHEMA, "shape": self.shape, "params": self.params,
                               "status": self.status}
        for name in ("index", "layout_pad_bytes", "timer", "error"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.ok:
            out.update(samples_ms=self.samples_ms, median_ms=self.median_ms, n=self.n, marker=self.marker)
        return out

    @classmethod
    def from_json(cls, data: Fields) -> "ShapeResult":
        data.version(RESULTS_SCHEMA)
        return cls(data.text("shape"), data.text("status"), data.mapping("params", {}), data.whole_or_none("index"),
                   data.wholes_or_none("layout_pad_bytes"), data.text_or_none("timer"), data.numbers("samples_ms", []),
                   data.number_or_none("median_ms"), data.whole_or_none("n"), data.text_or_none("marker"),
                   data.text_or_none("error"))

def append_result(path: Path, result: ShapeResult) -> None:
    """One line, one write (``fileio.append_jsonl``): a crash loses at most the shape in flight."""
    append_jsonl(path, result.to_json())


def read_results(path: Path) -> Iterator[ShapeResult]:
    """Every record of ``path``; a torn line, an unknown version or a bad field raises naming file, line and field."""
    for number, record in numbered_jsonl(path):
        yield ShapeResult.from_json(Fields(f"{path}:{number}", record))
