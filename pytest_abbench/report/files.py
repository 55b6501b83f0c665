"""The files a report is written to: report.json, report.md and report.html.

One owner of the set, beside the two renderings it writes (``render`` for the text, ``html`` for the page,
which builds on the text's lines): neither rendering imports the other's writer.
"""

from __future__ import annotations

from pathlib import Path

from pytest_abbench.core.fileio import write_json_atomic
from pytest_abbench.core.layout import RootLayout
from pytest_abbench.report.html import render_html
from pytest_abbench.report.model import Report
from pytest_abbench.report.render import render_text


def write_report(root: Path, report: Report) -> None:
    """report.json, report.md and report.html (whose SVG figures need no plotting library)."""
    layout = RootLayout(root)
    write_json_atomic(layout.report_json, report.to_json())
    layout.report_md.write_text("# abbench report\n\n```\n" + render_text(report) + "\n```\n")
    layout.report_html.write_text(render_html(report), encoding="utf-8")
