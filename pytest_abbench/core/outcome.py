"""CellOutcome: what one cell produced, as one record.

The same record becomes the cell's ``status.tsv`` row, travels on its test
report (junitxml properties, and to the xdist controller as one JSON
property), and is what the report reads.  Nothing else describes a finished
cell.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pytest_abbench.core.fileio import Fields, FormatError
from pytest_abbench.core.layout import CellKey
from pytest_abbench.core.markers import MARKERS
from pytest_abbench.core.status import StatusRow

OUTCOME_PROPERTY = "abbench_cell"  # the JSON record on a test report's user_properties

# Status words besides the child's exit status (exitcodes.status_word).
OK = "ok"
NO_IR_DIFF = "SWITCH_NO_IR_DIFF"  # skipped: round 1 showed the switch changed no generated code
IR_ONLY = "IR_ONLY"  # --ab-ir-only: compiled for the target, timed nothing
FAILED_SHAPES = "FAILED_SHAPES"  # the child exited 0 but some shapes failed
NO_SHAPES = "NO_SHAPES"  # the child exited 0 having measured nothing
NO_GPU = "NO_GPU"  # the worker has no GPU of its own: the cell never started
IMPORT_REFUSED = "KERNEL_IMPORT_REFUSED"  # an --ab-kernel-import file is neither side's key: the cell never started
WORKER_LOST = "WORKER_LOST"  # its xdist worker died before the cell finished: it runs again on --ab-resume
NO_ROW = "NO_STATUS_ROW"  # a cell folder on disk without a status.tsv row: crashed, or still running
# --ab-rounds auto: a round its op did not need, skipped.  Decided again on --ab-resume (the same rounds give the same
# answer; a budget may have grown), so neither counts as finished there; neither is a failure.
SETTLED = "ROUND_SETTLED"  # every shape of the op settled at an earlier round
OVER_BUDGET = "ROUND_OVER_BUDGET"  # --ab-rounds-budget was spent before this round began
# Any plan: every shape of the op raised the same error on both sides in round 1, so no later round runs it.
ALL_FAILED = "ROUND_ALL_SHAPES_FAILED"
NOT_NEEDED = (SETTLED, OVER_BUDGET, ALL_FAILED)
# A cell with one of these needs no new run on --ab-resume; its files are what a rerun would make.
FINISHED = (OK, NO_IR_DIFF, IR_ONLY)


@dataclass
class CellOutcome:
    """One finished (or skipped, or never started) cell."""

    key: CellKey
    cell_dir: Path
    status: str
    switch: str = ""
    campaign: str = ""
    rc: int = 0
    elapsed_s: float = 0.0
    success: int = 0
    failed: int = 0
    markers: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MARKERS, 0))
    non_utf8_sequences: int = 0  # byte sequences of run.log that are not UTF-8 (kept as written)
    overhead_ms: float | None = None  # the plugin's own cost of the cell, outside the child
    resumed: bool = False  # read from a resumed root's status.tsv, not run in this session

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def not_needed(self) -> bool:
        """A round not run and no failure of its own: ``--ab-rounds auto`` skipped it, or round 1 failed every shape
        alike on both sides (that failure is round 1's)."""
        return self.status in NOT_NEEDED

    @property
    def measured(self) -> bool:
        """The child ran and wrote files worth comparing (identity, IR)."""
        return self.status not in (NO_IR_DIFF, NO_GPU, IMPORT_REFUSED, WORKER_LOST, *NOT_NEEDED)

    def to_row(self) -> StatusRow:
        return StatusRow(self.key.round, self.key.op, self.key.role, self.switch, self.rc, self.status,
                         self.elapsed_s, self.success, self.failed, *(self.markers.get(m, 0) for m in MARKERS))

    @classmethod
    def from_row(cls, row: StatusRow, cell_dir: Path, campaign: str = "") -> "CellOutcome":
        return cls(CellKey(row.round, row.op, row.side), cell_dir, row.status, row.switch, campaign, row.rc,
                   row.elapsed_s, row.success, row.failed, {m: getattr(row, m) for m in MARKERS})

    def to_json(self) -> str:
        return json.dumps({"round": self.key.round, "op": self.key.op, "role": self.key.role,
                           "cell_dir": str(self.cell_dir), "status": self.status, "switch": self.switch,
                           "campaign": self.campaign, "rc": self.rc, "elapsed_s": self.elapsed_s,
                           "success": self.success, "failed": self.failed, "markers": self.markers,
                           "non_utf8_sequences": self.non_utf8_sequences, "overhead_ms": self.overhead_ms,
                           "resumed": self.resumed})

    @classmethod
    def from_json(cls, text: str, where: str = "cell record") -> "CellOutcome":
        """The record ``to_json`` wrote; a FormatError names ``where``, the field and what it expected."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise FormatError(f"{where}: not valid JSON ({exc})") from None
        return cls.from_fields(Fields(where, data))

    @classmethod
    def from_fields(cls, d: Fields) -> "CellOutcome":
        return cls(CellKey(d.whole("round"), d.text("op"), d.text("role")), Path(d.text("cell_dir")), d.text("status"),
                   d.text("switch"), d.text("campaign"), d.whole("rc"), d.number("elapsed_s"), d.whole("success"),
                   d.whole("failed"), dict(d.whole_map("markers")), d.whole("non_utf8_sequences"),
                   d.number_or_none("overhead_ms"), d.flag("resumed"))

    def report_properties(self) -> list[tuple[str, object]]:
        """The test report's user_properties: flat fields for junitxml readers, and the whole record."""
        flat: list[tuple[str, object]] = [
            ("abbench_rc", self.rc), ("abbench_status", self.status), ("abbench_elapsed_s", self.elapsed_s),
            ("abbench_success", self.success), ("abbench_failed", self.failed),
            *((m, self.markers.get(m, 0)) for m in MARKERS), ("abbench_cell_dir", str(self.cell_dir)),
        ]
        if self.overhead_ms is not None:
            flat.append(("abbench_overhead_ms", self.overhead_ms))
        return [*flat, (OUTCOME_PROPERTY, self.to_json())]
