"""The round-delta report: ``build_report`` reads a root, ``render_text`` and ``write_report`` show it."""

from __future__ import annotations

from pytest_abbench.report.build import IR_ONLY, build_report, render_text, write_report
from pytest_abbench.report.model import (REPORT_JSON, REPORT_MD, SCHEMA_VERSION, OpReport, Report, ShapeReport,
                                         report_from_json)

__all__ = ["IR_ONLY", "REPORT_JSON", "REPORT_MD", "SCHEMA_VERSION", "OpReport", "Report", "ShapeReport",
           "build_report", "render_text", "report_from_json", "write_report"]
