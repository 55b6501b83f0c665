"""The compact terminal report of a big campaign: a line per op, then only the shapes worth a look.

A 100-op campaign's full report is a thousand lines; the terminal gets this instead when the full one would be
longer than ``COMPACT_ABOVE_LINES``, or always under ``-q``.  ``-v`` prints the full report, and report.md,
report.json and report.html keep everything.
"""

from __future__ import annotations

from pytest_abbench.report import render
from pytest_abbench.report.model import OpReport, Report, ShapeReport

COMPACT_ABOVE_LINES = 150  # a full report longer than this is printed compact unless -v
MAX_SHAPE_LINES = 30  # shapes the compact report names at most, the most telling first
MAX_CALIBER_LINES = 10
VERDICT_DOCS = "docs/verdicts.md"
REGIME_DOCS = "docs/explanation/regimes.md"


def terminal_lines(report: Report, verbosity: int) -> list[str]:
    """The report for the terminal: full under -v (verbosity >= 1), compact under -q (< 0), and by default
    compact only when the full report would be longer than ``COMPACT_ABOVE_LINES``."""
    full = render.render_text(report).splitlines()
    if verbosity >= 1 or (verbosity == 0 and len(full) <= COMPACT_ABOVE_LINES):
        return full
    return compact_lines(report)


def _header(report: Report) -> list[str]:
    """The switch, where it ran, rounds and regime, a short line each; the rule's wording is in the docs."""
    if report.ops and all(o.state == "ir_only" for o in report.ops):
        return render.header_lines(report)  # already short: nothing was timed
    setup = report.setup
    run = [o.rounds_completed for o in report.ops if o.state != "ir_only"]
    rounds_run = "-" if not run else str(min(run)) if min(run) == max(run) else f"{min(run)}-{max(run)}"
    lines = render.switch_lines(report)
    lines.append(f"backend {setup.get('backend', 'unknown')}; timer {setup.get('timer', 'unknown')}; "
                 f"device {setup.get('device', 'unknown')}")
    lines.append(f"rounds planned {report.rounds_planned}, run {rounds_run}; margin +-{report.margin_pct:g}% "
                 f"({report.margin_source}); verdict rule: {VERDICT_DOCS}")
    lines.append(f"regime {setup.get('regime', 'unknown')} ({REGIME_DOCS})")
    if not report.gpu_timed:
        lines.append("NOT GPU TIMINGS: interpreter or wall-clock numbers say nothing about GPU speed")
    else:
        lines.append(render.SCOPE_TEXT)
    return lines


def op_line(o: OpReport, report: Report) -> str:
    """``== mm: slower 2, same 1; geomean +4.1% [+3.2 ~ +5.0%]; flags drift 1; rounds 6/6``."""
    parts = [render.op_outcome(o)]
    delta, interval = render.op_geomean(o)
    if delta != "-":
        parts.append(f"geomean {delta} [{interval}]")
    flags = render.op_flags(o)
    if flags != "-":
        parts.append(f"flags {flags}")
    if o.unreadable:
        parts.append(f"unreadable results in {', '.join(sorted(o.unreadable))} (report.md names them)")
    if o.failed_shapes:
        parts.append(f"{len(o.failed_shapes)} shape(s) failed (report.md names them)")
    parts.append(f"rounds {o.rounds_completed}/{o.rounds_expected}")
    return f"== {render.op_title(o, report)}: {'; '.join(parts)}"


def _rank(s: ShapeReport) -> int | None:
    """How telling a shape is: slower, then flagged, faster, inconclusive; None for a plain ``same``."""
    if s.verdict == "slower":
        return 0
    if s.flags:
        return 1
    return {"faster": 2, "inconclusive": 3}.get(s.verdict)


def shape_line(o: OpReport, s: ShapeReport, report: Report) -> str:
    return (f"   {render.op_title(o, report)}[{s.shape}]: {render.verdict_text(s)}, delta {s.delta_pct:+.1f}% "
            f"[{s.delta_min_pct:+.1f} ~ {s.delta_max_pct:+.1f}], 95% CI {render.interval_text(s.ci_pct)}"
            + (f", in-process ref {render.reference_text(s)}" if s.reference_delta_pct is not None else "")
            + (f" ({s.note})" if s.note else ""))


def compact_lines(report: Report) -> list[str]:
    """Header, caliber findings, a line per op, the shapes worth a look (at most ``MAX_SHAPE_LINES``), the tail."""
    lines = _header(report)
    lead = render.lead_lines(report)
    if len(report.caliber_lines) > MAX_CALIBER_LINES:
        hidden = set(report.caliber_lines[MAX_CALIBER_LINES:])
        lead = [line for line in lead if line not in hidden]
        lead.append(f"... {len(hidden)} more caliber line(s) in report.md")
    lines += lead
    lines += [op_line(o, report) for o in report.ops]
    ranked = sorted(((rank, index, o, s) for index, (o, s) in
                     enumerate((o, s) for o in report.ops if o.state == "verdict" for s in o.shapes)
                     if (rank := _rank(s)) is not None), key=lambda t: (t[0], t[1]))
    total = sum(len(o.shapes) for o in report.ops if o.state == "verdict")
    if ranked:
        lines.append(f"shapes slower, flagged, faster or inconclusive: {len(ranked)} of {total}"
                     + (f" (the first {MAX_SHAPE_LINES}, slower and flagged first)" if len(ranked) > MAX_SHAPE_LINES
                        else ""))
        lines += [shape_line(o, s, report) for _, _, o, s in ranked[:MAX_SHAPE_LINES]]
    lines += render.tail_lines(report)
    lines.append(f"compact report of {len(report.ops)} ops: every shape and column in report.md; -v prints it here")
    return lines
