"""The cell test itself: its parameter, its function, and the properties its reports carry.

Owned apart from the fixtures so that the session (which collects and
parametrizes cell tests) and the fixtures (which run them) both build on it
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from pytest_abbench.core.layout import CellKey
from pytest_abbench.core.outcome import CellOutcome

GATE_PROPERTY = "abbench_irgate"
NOTICE_PROPERTY = "abbench_notice"  # a line for the terminal, found while the test's output was captured
CELL_TEST_ATTR = "__abbench_cell__"  # on a campaign file's cell test: (campaign path, op)
CALIBER_PROPERTY = "abbench_caliber"


@dataclass(frozen=True)
class PlannedCell:
    """The parameter of a cell test: which cell, of which campaign file, at which place in it."""

    key: CellKey
    campaign_path: Path
    op_index: int


class RunnableCell(Protocol):
    """What the ``abbench_cell`` fixture gives a cell test (``fixtures.Cell``)."""

    def run(self) -> CellOutcome: ...


def cell_test_for(campaign_path: Path, op: str) -> Callable[..., None]:
    """The test function of one op of a campaign file; pytest parametrizes it over the plan's cells."""

    def cell_test(abbench_cell: RunnableCell, abbench_ir_gate: None, abbench_caliber: None) -> None:
        abbench_cell.run()

    cell_test.__name__ = cell_test.__qualname__ = op
    cell_test.__doc__ = f"Every round x side of op {op!r}: one child process per cell."
    setattr(cell_test, CELL_TEST_ATTR, (str(campaign_path), op))
    return cell_test
