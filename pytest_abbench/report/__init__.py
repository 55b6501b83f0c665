"""The round-delta report: machine noise vs verdict stability, per shape and per op.

The experimental unit is the round: one log ratio ``ln(B/A)`` per round per
shape, summarised across rounds.  Samples inside a cell say how noisy the
machine was; the spread of per-round deltas says whether the verdict holds.
Caliber is checked for every round before a latency is read.  The same code
serves the pytest session and ``abbench summary``.

``build`` reads a root into a ``Report`` (``model``), judged with ``stats``;
``render`` turns it into text; ``files`` writes report.md, report.json and report.html.
"""

from __future__ import annotations

from pytest_abbench.core.outcome import IR_ONLY
from pytest_abbench.report.build import build_report
from pytest_abbench.report.model import (REPORT_JSON, REPORT_MD, SCHEMA_VERSION, OpReport, Report, ShapeReport,
                                         read_report, report_from_json)
from pytest_abbench.report.files import write_report
from pytest_abbench.report.render import render_text

__all__ = ["IR_ONLY", "REPORT_JSON", "REPORT_MD", "SCHEMA_VERSION", "OpReport", "Report", "ShapeReport",
           "build_report", "read_report", "render_text", "report_from_json", "write_report"]
