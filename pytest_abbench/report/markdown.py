"""The short markdown summary: where a reviewer looks (a CI job summary, a pull-request comment).

One line per op (its verdicts, geomean delta and interval, flags, rounds), then the shapes that are slower or
flagged; report.md, report.json and report.html keep everything.  A session appends it to ``$GITHUB_STEP_SUMMARY``
when that is set; ``abbench comment ROOT`` prints it (``> FILE`` for a file).
"""

from __future__ import annotations

from pathlib import Path

from pytest_abbench.core.layout import RootLayout
from pytest_abbench.report import kernelsplit, render
from pytest_abbench.report.model import Report

# Shapes listed under the op table at most: the table holds every op's verdicts, report.md every shape.
MAX_SHAPE_ROWS = 20
MAX_CALIBER_LINES = 5


def _cell(text: str) -> str:
    """``text`` as one markdown table cell: a ``|`` would end the cell, a newline the row."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _row(*cells: str) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _setup_line(report: Report) -> str:
    setup = report.setup
    if report.ops and all(o.state == "ir_only" for o in report.ops):
        return "IR triage only: nothing timed"
    return (f"backend {setup.get('backend', 'unknown')} · timer {setup.get('timer', 'unknown')} · device "
            f"{setup.get('device', 'unknown')} · regime {setup.get('regime', 'unknown')} · rounds planned "
            f"{report.rounds_planned} · margin ±{report.margin_pct:g}%")


def render_markdown(report: Report) -> str:
    """The summary as markdown: the exit line, what was compared, an op table, the shapes worth a look."""
    title = f"exit {report.exit_code}: {report.exit_reason}" if report.exit_code is not None else "report"
    lines = [f"### abbench: {title}", ""]
    lines += [f"{line}  " for line in render.switch_lines(report)]
    lines.append(_setup_line(report))
    if not report.gpu_timed and not all(o.state == "ir_only" for o in report.ops):
        lines += ["", "> NOT GPU TIMINGS: interpreter or wall-clock numbers say nothing about GPU speed"]
    if not report.complete:
        lines += ["", f"> {render.INCOMPLETE_TEXT}"]
    if report.caliber_lines:
        shown = report.caliber_lines[:MAX_CALIBER_LINES]
        more = len(report.caliber_lines) - len(shown)
        lines += ["", *[f"- `{line}`" for line in shown]] + ([f"- ... {more} more in report.md"] if more else [])
    if report.slower_ops:
        lines += ["", f"**{render.gate_line(report)}**"]
    lines += ["", _row("op", "verdicts", "geomean delta", "95% interval", "flags", "rounds"),
              "| --- | --- | ---: | ---: | --- | ---: |"]
    for o in report.ops:
        delta, interval = render.op_geomean(o)
        lines.append(_row(render.op_title(o, report), render.op_outcome(o), delta, interval, render.op_flags(o),
                          f"{o.rounds_completed}/{o.rounds_expected}"))
    worth = [(o, s) for o in report.ops if o.state == "verdict" for s in o.shapes if render.worth_a_look(s)]
    if worth:
        lines += ["", f"Shapes slower or flagged ({len(worth)}):", "",
                  _row("op", "shape", "verdict", "delta", "95% interval"), "| --- | --- | --- | ---: | ---: |"]
        lines += [_row(render.op_title(o, report), s.shape, render.verdict_text(s), f"{s.delta_pct:+.1f}%",
                       render.interval_text(s.ci_pct)) for o, s in worth[:MAX_SHAPE_ROWS]]
        if len(worth) > MAX_SHAPE_ROWS:
            lines.append(f"\n... and {len(worth) - MAX_SHAPE_ROWS} more in report.md")
    moved = [(o, *m) for o in report.ops for m in kernelsplit.movers(o.kernel_splits)]
    if moved:
        lines += ["", "The kernel that moved most, per shape (ABBENCH_KERNEL_SPLIT):", "",
                  _row("op", "shape", "kernel", "its delta"), "| --- | --- | --- | ---: |"]
        lines += [_row(render.op_title(o, report), shape, f"`{kernel}`", delta)
                  for o, shape, kernel, delta in moved[:MAX_SHAPE_ROWS]]
    lines += ["", f"Every shape: `{RootLayout(Path(report.root)).report_md}`"]
    return "\n".join(lines) + "\n"


def append_step_summary(report: Report, step_summary: Path) -> None:
    """Append the summary to ``$GITHUB_STEP_SUMMARY``'s file: the job's other steps write there too, so never
    replace it.  Raises OSError naming the file."""
    with open(step_summary, "a", encoding="utf-8") as f:
        f.write(render_markdown(report) + "\n")
