"""``abbench history --html FILE``: the history as one self-contained page, readable offline.

The runs as a table; for an op (and shape), each shape's delta with its interval per run, ordered by commit time
(``view.series``), as a table and an inline SVG with the verdict changes between neighbouring commits marked.
Built from report/html.py's parts, as report.html is: inline CSS and SVG, nothing loaded from anywhere, every
string escaped, each numeric cell's exact value in ``data-value`` (an interval's ends in ``data-low`` and
``data-high``) beside its rounded text.
"""

from __future__ import annotations

from pathlib import Path

from pytest_abbench.history.store import RunRecord
from pytest_abbench.history.view import Point, run_commit, stamp, verdict_change, verdict_counts
from pytest_abbench.report.html import (Cell, SeriesPoint, clipped, esc, flag_chips, interval_cell, notes, number,
                                        page, series_caption, series_plot_svg, table)

RUN_HEADERS = (Cell("run", title="the run's id in the history file"), Cell("recorded"),
               Cell("commit", title="side B's source tree where its switch points at one in git, else the "
                                    "campaign's repository; *: uncommitted changes to tracked files"),
               Cell("committed"), Cell("exit"), Cell("complete"),
               Cell("rounds", title="planned; with --ab-rounds auto the looks' range and the rounds the ops ran"),
               Cell("regime", title="the timing regime (--ab-regime)"), Cell("device"), Cell("margin"),
               Cell("verdicts", title="shapes per verdict"), Cell("label"), Cell("root"))
SERIES_HEADERS = (Cell("run"), Cell("commit"), Cell("committed"), Cell("delta", title="median over rounds of B/A - 1"),
                  Cell("95% CI"), Cell("verdict"), Cell("rounds"), Cell("flags"),
                  Cell("verdict changed", title="against the commit before it in this series"))


def _commit_cell(run: RunRecord) -> Cell:
    tree = run.subject_tree
    full = "" if tree is None or tree.commit is None else f"{tree.commit} {tree.subject or ''}".strip()
    return Cell(run_commit(run), css="commit", title=full)


def _when(seconds: float | None) -> Cell:
    return Cell("-") if seconds is None else Cell(stamp(seconds))


def _rounds_text(run: RunRecord) -> str:
    auto = run.auto_rounds
    if not auto:
        return str(run.rounds)
    return f"auto {auto.get('first', '?')}-{auto.get('last', run.rounds)}, {auto.get('rounds_run', '?')} run"


def _run_row(run: RunRecord) -> list[Cell]:
    tree = run.subject_tree
    exit_code = run.exit_code
    return [number(run.id, str(run.id)), _when(run.recorded_at), _commit_cell(run),
            _when(None if tree is None or tree.commit_time is None else float(tree.commit_time)),
            number(exit_code, str(exit_code)), Cell("yes" if run.complete else "no: incomplete"),
            Cell(_rounds_text(run), css="num"), Cell(str(run.identity.get("regime", "-"))),
            Cell(str(run.identity.get("device", "-"))), number(run.margin_pct, f"+-{run.margin_pct:g}%"),
            Cell(verdict_counts(run)), Cell(markup=clipped(run.label, "16em")), Cell(markup=clipped(run.root, "30em"))]


def _verdict_cell(p: Point) -> Cell:
    s = p.shape
    text = f"{s.verdict}, within +-{p.run.margin_pct:g}%" if s.within_margin else s.verdict
    return Cell(markup=f'<span class="v-{esc(s.verdict)}" data-verdict="{esc(s.verdict)}">{esc(text)}</span>')


def _series_section(op: str, key: str, points: list[Point]) -> str:
    rows: list[list[Cell]] = []
    plotted: list[SeriesPoint] = []
    previous: Point | None = None
    for p in points:
        s = p.shape
        change = verdict_change(previous, p)
        rows.append([number(p.run.id, str(p.run.id)), _commit_cell(p.run), _when(p.when),
                     number(s.delta_pct, f"{s.delta_pct:+.1f}%"), interval_cell(s.ci_pct), _verdict_cell(p),
                     number(s.rounds, str(s.rounds)), Cell(markup=flag_chips(s.flags), css="flags"),
                     Cell(change, css="changed" if change else "")])
        low, high = s.ci_pct if s.ci_pct else (None, None)
        interval = f" [{low:+.2f} ~ {high:+.2f}%]" if low is not None and high is not None else ""
        plotted.append(SeriesPoint(p.commit, s.delta_pct, low, high, s.verdict, change,
                                   f"run {p.run.id}, {p.commit} {stamp(p.when)}: {s.delta_pct:+.2f}%{interval} "
                                   f"{s.verdict}"))
        previous = p
    margins = {p.run.margin_pct for p in points}
    margin = margins.pop() if len(margins) == 1 else None  # several margins: none drawn rather than a wrong one
    changes = sum(1 for sp in plotted if sp.mark)
    sub = f"{len(points)} run(s), ordered by commit time; the verdict changed {changes} time(s)"
    return (f'<section class="series" data-op="{esc(op)}" data-series="{esc(key)}">\n'
            f'<h2>{clipped(f"{op}[{key}]", "40em")} <span class="sub">{esc(sub)}</span></h2>\n'
            + table(SERIES_HEADERS, rows, css="series")
            + series_plot_svg(plotted, margin_pct=margin, title=f"{op}[{key}]: B/A - 1 across commits")
            + f'<p class="muted">{esc(series_caption(margin, "the verdict changed from the commit before"))}</p>\n'
            "</section>\n")


def render_history_html(history_file: Path, runs: list[RunRecord], op: str | None = None,
                        shape: str | None = None, found: dict[str, list[Point]] | None = None) -> str:
    """The page: what it shows, each of ``found``'s series (``view.series(runs, op, shape)``), then every run."""
    subject = "every run" if op is None else f"{op}[{shape}]" if shape else op
    rows = [[Cell("history file"), Cell(markup=clipped(str(history_file), "60em"))],
            [Cell("runs"), number(len(runs), str(len(runs)))]]
    if op is not None:
        rows.append([Cell("op"), Cell(markup=clipped(op, "60em"))])
    if shape is not None:
        rows.append([Cell("shape"), Cell(markup=clipped(shape, "60em"))])
    body = [f"<h1>abbench history: {clipped(subject, '50em')}</h1>\n", table([], rows, css="setup"),
            notes(["commit: side B's source tree where its switch points at one in git, else the campaign's "
                   "repository; * marks uncommitted changes to tracked files",
                   "a series is ordered by commit time (commits of one second by their depth); a burst and a steady "
                   "delta are different quantities, so each timing regime has its own series"])]
    body += [_series_section(op, key, points) for key, points in (found or {}).items() if op is not None]
    body.append('<h2>Runs <span class="sub">oldest record first</span></h2>\n')
    body.append(table(RUN_HEADERS, (_run_row(r) for r in runs), css="runs") if runs
                else '<p class="muted">no runs recorded</p>\n')
    return page(f"abbench history: {subject}", "".join(body))
