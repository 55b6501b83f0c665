"""``<root>/report.html``: the report as one self-contained page, readable offline.

Everything is inline: the CSS in the page's ``<style>``, the plots as SVG drawn here.  The page loads nothing
(no script, font, stylesheet or image from anywhere), so it opens the same from a laptop, a CI artifact or a
mail attachment.  Its words are the text report's (``render``), its numbers report.json's: each numeric cell
carries the exact value in ``data-value`` next to the rounded text.

The building blocks are for any page of reports (a history of runs reuses them):

* :func:`page` wraps a body in the document with the inline CSS;
* :func:`interval_plot_svg` draws labelled deltas with their intervals (:class:`PlotPoint`) as inline SVG, one
  row each; :func:`series_plot_svg` draws a sequence of them (:class:`SeriesPoint`, e.g. runs by commit) left to
  right, joined by a line, with marks between neighbours;
* :func:`table` lays out rows of :class:`Cell` (text, a number with its exact value, or trusted markup);
  :func:`number` and :func:`interval_cell` make numeric cells, :func:`flag_chips` a list of flag names;
* :func:`esc` and :func:`clipped` escape a user's string, the latter clipped to a width with the whole text
  in its ``title``.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from pytest_abbench.report import render
from pytest_abbench.report.flags import FLAGS, holds_under
from pytest_abbench.report.gpustate import READINGS
from pytest_abbench.report.model import OpReport, Report, ShapeReport

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; color: #1c1c1c; margin: 1.5em auto; max-width: 84em; padding: 0 1em; }
h1 { font-size: 1.4em; margin: 0 0 .4em; } h2 { font-size: 1.15em; margin: 1.6em 0 .3em; }
h2 .sub { font-weight: normal; color: #555; font-size: .85em; }
table { border-collapse: collapse; margin: .5em 0; font-size: .92em; }
th, td { border: 1px solid #d4d4d4; padding: .2em .5em; vertical-align: top; }
th { background: #f2f2f2; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.clip { display: inline-block; max-width: var(--clip, 30em); overflow: hidden; text-overflow: ellipsis;
        white-space: nowrap; vertical-align: bottom; }
.banner { border-left: 5px solid #b03a2e; background: #fbeeee; padding: .4em .8em; margin: .4em 0; }
.warn { border-left-color: #b9770e; background: #fdf5e6; }
ul.notes { margin: .3em 0; padding-left: 1.3em; } ul.notes li { margin: .1em 0; }
.v-slower { color: #b03a2e; font-weight: 600; } .v-faster { color: #1e8449; font-weight: 600; }
.v-same { color: #444; } .v-inconclusive { color: #9a6400; }
.flag { display: inline-block; border: 1px solid #999; border-radius: 3px; padding: 0 .3em; margin: 0 .15em;
        font-size: .85em; background: #f7f7f7; }
.muted { color: #666; } svg { display: block; max-width: 100%; height: auto; margin: .5em 0; }
.scroll { overflow-x: auto; } .setup td:first-child { font-weight: 600; white-space: nowrap; }
"""

VERDICT_COLOURS = {"slower": "#b03a2e", "faster": "#1e8449", "same": "#555555", "inconclusive": "#b9770e"}
DEFAULT_COLOUR = "#2e5c8a"
SHAPE_CLIP = "28em"  # a shape id wider than this is clipped in the table, whole in its title and its own text


def esc(text: object) -> str:
    """``text`` as HTML text or an attribute value: every ``<``, ``>``, ``&`` and quote escaped."""
    return html.escape(str(text), quote=True)


def clipped(text: str, width: str = SHAPE_CLIP) -> str:
    """``text`` escaped in a span at most ``width`` wide (a CSS length), cut with an ellipsis, whole in its title."""
    return f'<span class="clip" style="--clip: {esc(width)}" title="{esc(text)}">{esc(text)}</span>'


@dataclass(frozen=True)
class Cell:
    """One table cell: escaped text, a number (``value`` in ``data-value``, ``text`` shown), or trusted ``markup``."""

    text: str = ""
    value: float | None = None  # the exact number the text rounds
    markup: str | None = None  # HTML built here from escaped parts: used as it is
    css: str = ""  # the cell's class
    title: str = ""  # a tooltip: what the cell means

    def to_html(self, tag: str = "td") -> str:
        attrs = ""
        if self.css:
            attrs += f' class="{esc(self.css)}"'
        if self.value is not None:
            attrs += f' data-value="{esc(repr(float(self.value)))}"'
        if self.title:
            attrs += f' title="{esc(self.title)}"'
        return f"<{tag}{attrs}>{self.markup if self.markup is not None else esc(self.text)}</{tag}>"


def number(value: float | None, text: str) -> Cell:
    """A numeric cell: ``text`` shown, ``value`` exact in ``data-value``; ``-`` and no value for None."""
    return Cell("-", css="num") if value is None else Cell(text, value=value, css="num")


def table(headers: Sequence[str | Cell], rows: Iterable[Sequence[Cell]], css: str = "") -> str:
    """A ``<table>`` that scrolls sideways when wide: header strings (escaped) or cells (none: no header row),
    then rows of :class:`Cell`."""
    head = "".join(h.to_html("th") if isinstance(h, Cell) else f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(c.to_html() for c in row) + "</tr>\n" for row in rows)
    cls = f' class="{esc(css)}"' if css else ""
    thead = f"<thead><tr>{head}</tr></thead>\n" if head else ""
    return f'<div class="scroll"><table{cls}>\n{thead}<tbody>\n{body}</tbody>\n</table></div>\n'


def notes(lines: Iterable[str], css: str = "notes") -> str:
    """Lines of text as an escaped list; nothing for no lines."""
    items = "".join(f"<li>{esc(line)}</li>" for line in lines)
    return f'<ul class="{esc(css)}">{items}</ul>\n' if items else ""


def page(title: str, body_html: str) -> str:
    """The whole document: ``title`` (escaped) and ``body_html`` (trusted markup) with the inline CSS."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n{body_html}</body>\n</html>\n")


# -- the interval plot ---------------------------------------------------------------
@dataclass(frozen=True)
class PlotPoint:
    """One row of an interval plot: a label, its delta in percent and the delta's interval.

    ``rounds`` are drawn as small dots (each round's delta), ``band`` as a grey box behind the row (an A/A
    interval), ``verdict`` picks the colour (``VERDICT_COLOURS``), ``emphasis`` draws the row in bold (a geomean).
    """

    label: str
    delta: float | None
    low: float | None = None
    high: float | None = None
    rounds: Sequence[float] = ()
    band: tuple[float, float] | None = None
    verdict: str = ""
    emphasis: bool = False
    tooltip: str = ""  # the row's hover text; the label and numbers when empty


def _finite(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) covering ``low`` to ``high``."""
    if not high > low:
        low, high = low - 1.0, high + 1.0
    raw = (high - low) / max(1, count - 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)
    slack = 1e-6  # of a step: a value a rounding error past a tick (10.000000000000009) stays at that tick
    first = math.floor(low / step + slack) * step
    ticks = [round(first, 10)]
    while ticks[-1] < high - slack * step:
        ticks.append(round(first + len(ticks) * step, 10))
    return ticks


def _num(v: float) -> str:
    """A coordinate in SVG: two decimals are finer than a pixel."""
    return f"{v:.2f}"


def _clip_label(label: str, chars: int) -> str:
    return label if len(label) <= chars else label[: chars - 1] + "\u2026"


def _tick_text(v: float) -> str:
    return f"{v:+g}%" if v else "0"


def interval_plot_svg(points: Sequence[PlotPoint], margin_pct: float | None = None, axis_label: str = "B/A - 1 (%)",
                      title: str = "", width: int = 760, label_chars: int = 34) -> str:
    """Inline SVG: one row per point, its delta as a dot, its interval as a bar, a zero line and +-``margin_pct``
    shaded; labels longer than ``label_chars`` end in an ellipsis (the whole label in the row's hover text).

    The x axis spans every delta, interval, round and band, zero and the margin.  A point without a finite
    delta is labelled and left empty.  Every string is escaped.
    """
    row_h, top, bottom = 22, 30 if title else 12, 44
    label_w = min(300, 12 + 7 * max([4] + [len(_clip_label(p.label, label_chars)) for p in points]))
    plot_l, plot_r = label_w, width - 16
    height = top + row_h * max(1, len(points)) + bottom
    spans = _finite([0.0] + [v for p in points for v in (p.delta, p.low, p.high, *p.rounds,
                                                          *(p.band or ()))])
    if margin_pct:
        spans += [-margin_pct, margin_pct]
    ticks = nice_ticks(min(spans), max(spans))
    lo, hi = ticks[0], ticks[-1]

    def x(v: float) -> float:
        return plot_l + (v - lo) / (hi - lo) * (plot_r - plot_l)

    out = [f'<svg role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="11">']
    if title:
        out.append(f'<text x="{width / 2:.0f}" y="18" text-anchor="middle" font-size="13">{esc(title)}</text>')
    y0, y1 = top, top + row_h * max(1, len(points))
    if margin_pct:
        m_lo, m_hi = max(lo, -margin_pct), min(hi, margin_pct)
        out.append(f'<rect x="{_num(x(m_lo))}" y="{y0}" width="{_num(x(m_hi) - x(m_lo))}" height="{y1 - y0}" '
                   f'fill="#e8f0e8"><title>{esc(f"+-{margin_pct:g}% margin")}</title></rect>')
    for t in ticks:
        out.append(f'<line x1="{_num(x(t))}" y1="{y0}" x2="{_num(x(t))}" y2="{y1}" stroke="#e2e2e2"/>')
        out.append(f'<text x="{_num(x(t))}" y="{y1 + 14}" text-anchor="middle" fill="#444">{esc(_tick_text(t))}'
                   "</text>")
    out.append(f'<line x1="{_num(x(0.0))}" y1="{y0}" x2="{_num(x(0.0))}" y2="{y1}" stroke="#666"/>')
    out.append(f'<text x="{(plot_l + plot_r) / 2:.0f}" y="{y1 + 32}" text-anchor="middle" fill="#333">'
               f"{esc(axis_label)}</text>")
    for i, p in enumerate(points):
        cy = top + row_h * i + row_h / 2
        colour = VERDICT_COLOURS.get(p.verdict, DEFAULT_COLOUR)
        hover = p.tooltip or _hover(p)
        out.append(f"<g><title>{esc(hover)}</title>")
        weight = ' font-weight="bold"' if p.emphasis else ""
        out.append(f'<text x="{label_w - 6}" y="{_num(cy + 4)}" text-anchor="end"{weight}>'
                   f"{esc(_clip_label(p.label, label_chars))}</text>")
        if p.band is not None and all(math.isfinite(v) for v in p.band):
            out.append(f'<rect x="{_num(x(p.band[0]))}" y="{_num(cy - 8)}" width="{_num(x(p.band[1]) - x(p.band[0]))}" '
                       'height="16" fill="#d9d9d9" opacity="0.8"/>')
        if p.low is not None and p.high is not None and math.isfinite(p.low) and math.isfinite(p.high):
            out.append(f'<line x1="{_num(x(p.low))}" y1="{_num(cy)}" x2="{_num(x(p.high))}" y2="{_num(cy)}" '
                       f'stroke="{colour}" stroke-width="{5 if p.emphasis else 3}" opacity="0.55"/>')
        for r in _finite(p.rounds):
            out.append(f'<circle cx="{_num(x(r))}" cy="{_num(cy + 5)}" r="1.8" fill="#333" opacity="0.6"/>')
        if p.delta is not None and math.isfinite(p.delta):
            out.append(f'<circle cx="{_num(x(p.delta))}" cy="{_num(cy)}" r="{5 if p.emphasis else 4}" '
                       f'fill="{colour}"/>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _hover(p: PlotPoint) -> str:
    delta = "-" if p.delta is None else f"{p.delta:+.2f}%"
    interval = "" if p.low is None or p.high is None else f" [{p.low:+.2f} ~ {p.high:+.2f}%]"
    return f"{p.label}: {delta}{interval}" + (f" {p.verdict}" if p.verdict else "")


def plot_caption(margin_pct: float | None, band: bool = False) -> str:
    """What an interval plot's marks mean, for the line under it."""
    parts = ["large dot: median delta (colour: verdict)", "bar: 95% interval", "small dots: each round's delta"]
    if margin_pct:
        parts.append(f"green: the +-{margin_pct:g}% margin")
    if band:
        parts.append("grey box: the A/A 95% interval")
    return "; ".join(parts)


# -- the series plot ----------------------------------------------------------------
@dataclass(frozen=True)
class SeriesPoint:
    """One step of a series plot: its label on the x axis, its delta in percent with the delta's interval.

    ``verdict`` picks the dot's colour (``VERDICT_COLOURS``); a ``mark`` is drawn as a dashed line between this
    point and the one before, with its text at the top (where something changed between the two).
    """

    label: str
    delta: float | None
    low: float | None = None
    high: float | None = None
    verdict: str = ""
    mark: str = ""
    tooltip: str = ""  # the point's hover text; the label and numbers when empty


MARK_COLOUR = "#c0392b"


def series_plot_svg(points: Sequence[SeriesPoint], margin_pct: float | None = None,
                    axis_label: str = "B/A - 1 (%)", title: str = "", width: int = 760, plot_h: int = 220,
                    label_chars: int = 14) -> str:
    """Inline SVG: the points left to right in the order given, each delta a dot on its interval's vertical bar,
    consecutive deltas joined by a line (broken where a point has none), a zero line and +-``margin_pct`` shaded;
    x labels longer than ``label_chars`` end in an ellipsis (the whole label in the point's hover text).

    The y axis spans every delta, interval, zero and the margin.  Every string is escaped.
    """
    labels = [_clip_label(p.label, label_chars) for p in points]
    top = 34 if title else 16
    if any(p.mark for p in points):
        top += 26  # the marks' text sits above the plot, in two rows so neighbouring marks do not overlap
    plot_l, plot_r = 64, width - 16
    plot_t, plot_b = top, top + plot_h
    height = plot_b + 16 + int(5.0 * max([4] + [len(label) for label in labels])) + 8  # labels at 45 degrees
    spans = _finite([0.0] + [v for p in points for v in (p.delta, p.low, p.high)])
    if margin_pct:
        spans += [-margin_pct, margin_pct]
    ticks = nice_ticks(min(spans), max(spans))
    lo, hi = ticks[0], ticks[-1]
    step = (plot_r - plot_l) / max(1, len(points))

    def x(i: int) -> float:
        return plot_l + (i + 0.5) * step

    def y(v: float) -> float:
        return plot_b - (v - lo) / (hi - lo) * (plot_b - plot_t)

    out = [f'<svg role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="11">']
    if title:
        out.append(f'<text x="{width / 2:.0f}" y="18" text-anchor="middle" font-size="13">{esc(title)}</text>')
    if margin_pct:
        m_lo, m_hi = max(lo, -margin_pct), min(hi, margin_pct)
        out.append(f'<rect x="{plot_l}" y="{_num(y(m_hi))}" width="{plot_r - plot_l}" '
                   f'height="{_num(y(m_lo) - y(m_hi))}" fill="#e8f0e8"><title>{esc(f"+-{margin_pct:g}% margin")}'
                   "</title></rect>")
    for t in ticks:
        out.append(f'<line x1="{plot_l}" y1="{_num(y(t))}" x2="{plot_r}" y2="{_num(y(t))}" stroke="#e2e2e2"/>')
        out.append(f'<text x="{plot_l - 6}" y="{_num(y(t) + 4)}" text-anchor="end" fill="#444">'
                   f"{esc(_tick_text(t))}</text>")
    out.append(f'<line x1="{plot_l}" y1="{_num(y(0.0))}" x2="{plot_r}" y2="{_num(y(0.0))}" stroke="#666"/>')
    out.append(f'<text x="14" y="{(plot_t + plot_b) / 2:.0f}" text-anchor="middle" fill="#333" '
               f'transform="rotate(-90 14 {(plot_t + plot_b) / 2:.0f})">{esc(axis_label)}</text>')
    segment: list[str] = []
    for i, p in enumerate(list(points) + [SeriesPoint("", None)]):  # a point without a delta ends a segment
        if p.delta is not None and math.isfinite(p.delta):
            segment.append(f"{_num(x(i))},{_num(y(p.delta))}")
            continue
        if len(segment) > 1:
            out.append(f'<polyline points="{" ".join(segment)}" fill="none" stroke="#8a8a8a" stroke-width="1.2"/>')
        segment = []
    mark_chars = max(8, int(2 * step / 6))  # a mark's text may span two steps: the next one is a row apart
    for i, p in enumerate(points):
        if p.mark and i > 0:
            mx = (x(i - 1) + x(i)) / 2
            ty = plot_t - 4 - 12 * (i % 2)
            out.append(f'<g class="mark"><title>{esc(p.mark)}</title>'
                       f'<line x1="{_num(mx)}" y1="{plot_t}" x2="{_num(mx)}" y2="{plot_b}" stroke="{MARK_COLOUR}" '
                       'stroke-dasharray="4 3"/>'
                       f'<text x="{_num(mx)}" y="{ty}" text-anchor="middle" font-size="10" '
                       f'fill="{MARK_COLOUR}">{esc(_clip_label(p.mark, mark_chars))}</text></g>')
    for i, (p, label) in enumerate(zip(points, labels)):
        colour = VERDICT_COLOURS.get(p.verdict, DEFAULT_COLOUR)
        hover = p.tooltip or _hover(PlotPoint(p.label, p.delta, p.low, p.high, verdict=p.verdict))
        out.append(f'<g class="point"><title>{esc(hover)}</title>')
        if p.low is not None and p.high is not None and math.isfinite(p.low) and math.isfinite(p.high):
            out.append(f'<line x1="{_num(x(i))}" y1="{_num(y(p.low))}" x2="{_num(x(i))}" y2="{_num(y(p.high))}" '
                       f'stroke="{colour}" stroke-width="3" opacity="0.55"/>')
        if p.delta is not None and math.isfinite(p.delta):
            out.append(f'<circle cx="{_num(x(i))}" cy="{_num(y(p.delta))}" r="4" fill="{colour}"/>')
        out.append(f'<text x="{_num(x(i))}" y="{plot_b + 14}" text-anchor="end" '
                   f'transform="rotate(-45 {_num(x(i))} {plot_b + 14})">{esc(label)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def series_caption(margin_pct: float | None, marked: str = "") -> str:
    """What a series plot's marks mean, for the line under it; ``marked``: what a dashed line marks."""
    parts = ["dot: delta (colour: verdict)", "bar: 95% interval"]
    if margin_pct:
        parts.append(f"green: the +-{margin_pct:g}% margin")
    if marked:
        parts.append(f"dashed red line: {marked}")
    return "; ".join(parts)


def _ends(ci: tuple[float, float] | None) -> tuple[float | None, float | None]:
    return ci if ci else (None, None)


def shape_points(o: OpReport) -> list[PlotPoint]:
    """An op's shapes as plot rows (their 95% interval, rounds and A/A interval), then its geomean."""
    points = [PlotPoint(s.shape, s.delta_pct, *_ends(s.ci_pct), s.per_round_pct, s.aa_ci_pct, s.verdict)
              for s in o.shapes]
    if o.geomean_pct is not None:
        points.append(PlotPoint("geomean", o.geomean_pct, *_ends(o.geomean_ci_pct), emphasis=True))
    return points


# -- the report --------------------------------------------------------------------
SETUP_LABELS = {"switch": "switch (side B)", "device": "device", "backend": "backend", "timer": "timer",
                "triton": "Triton", "torch": "torch", "bench_level": "level", "driver": "driver"}


def _pct(v: float | None, digits: int = 1) -> Cell:
    return number(v, f"{v:+.{digits}f}%" if v is not None else "-")


def interval_cell(ci: tuple[float, float] | None) -> Cell:
    """An interval's text (``render.interval_text``) with both ends exact in ``data-low`` and ``data-high``."""
    if not ci:
        return Cell("-", css="num")
    return Cell(markup=f'<span data-low="{esc(repr(float(ci[0])))}" data-high="{esc(repr(float(ci[1])))}">'
                       f"{esc(render.interval_text(ci))}</span>", css="num")


def flag_chips(names: Sequence[str]) -> str:
    """Flag names as chips, each with its meaning (report/flags.py) on hover."""
    return "".join(f'<span class="flag" title="{esc(FLAGS[n].meaning if n in FLAGS else "")}">{esc(n)}</span>'
                   for n in names)


def _verdict_cell(s: ShapeReport) -> Cell:
    text = f"{s.verdict}, within +-{s.margin_pct:g}%" if s.within_margin else s.verdict
    markup = f'<span class="v-{esc(s.verdict)}" data-verdict="{esc(s.verdict)}">{esc(text)}</span>'
    condition = holds_under(s.flags)
    if condition:
        markup += f' <span class="muted">({esc(condition)})</span>'
    for note in (s.note, s.reference_note):
        if note:
            markup += f' <span class="muted">({esc(note)})</span>'
    return Cell(markup=markup)


def _shape_row(s: ShapeReport, control: bool, reference: bool = False) -> list[Cell]:
    noise = "/".join("-" if v is None else f"{v:.1f}%" for v in (s.noise_within_a_pct, s.noise_within_b_pct))
    across = "/".join("-" if v is None else f"{v:.1f}%" for v in (s.noise_across_a_pct, s.noise_across_b_pct))
    row = [Cell(markup=clipped(s.shape), css="shape"), number(s.a_ms, f"{s.a_ms:.4g}"),
           number(s.b_ms, f"{s.b_ms:.4g}"), _pct(s.delta_pct),
           Cell(f"{s.delta_min_pct:+.1f} ~ {s.delta_max_pct:+.1f}%", css="num"), interval_cell(s.ci_pct),
           *([_pct(s.reference_delta_pct), interval_cell(s.reference_ci_pct)] if reference else []),
           interval_cell(s.ci90_pct), Cell(f"{s.faster_rounds}/{s.rounds}", css="num"), Cell(noise, css="num"),
           Cell(across, css="num"), Cell("yes" if s.sign_flip else "no"), Cell(f"+-{s.margin_pct:g}%", css="num"),
           _verdict_cell(s),
           # The flags that withhold a verdict, then the GPU's, which keep it and name the condition it holds under.
           Cell(markup=flag_chips([n for n in s.flags if not (n in FLAGS and FLAGS[n].gpu)]), css="flags"),
           Cell(markup=flag_chips([n for n in s.flags if n in FLAGS and FLAGS[n].gpu]), css="gpu-flags")]
    if control:
        row.append(interval_cell(s.aa_ci_pct))
    return row


REFERENCE_HEADERS = (Cell("in-process ref", title="--ab-reference: median over pairs of B/A - 1, both sides in one "
                                                   "process, interleaved in pairs; never the verdict"),
                     Cell("ref 95% CI", title="t-interval of the pairs' log ratios"))
SHAPE_HEADERS = (Cell("shape"), Cell("A ms", title="side A's median over rounds"),
                 Cell("B ms", title="side B's median over rounds"),
                 Cell("delta", title="median over rounds of B/A - 1"), Cell("min ~ max", title="of the rounds' deltas"),
                 Cell("95% CI", title="t-interval of the rounds' log ratios"))
SHAPE_HEADERS_AFTER = (Cell("90% CI", title="the equivalence test's interval: same when inside +-margin"),
                 Cell("faster", title="rounds in which B was faster"),
                 Cell("noise A/B", title="within-cell noise: half the IQR over the median, per side"),
                 Cell("rounds A/B", title="spread of each side's medians across rounds"), Cell("flip"),
                 Cell("margin"), Cell("verdict"), Cell("flags"), Cell("GPU flags"))


def _gpu_table(o: OpReport) -> str:
    """The op's GPU state per side as report.json holds it; nothing where no window was recorded."""
    sides = [(side, o.gpu_state.get(side)) for side in ("A", "B")]
    if not any(state and state.get("recorded") for _, state in sides):
        return ""
    reasons = list(dict.fromkeys(name for _, st in sides for name in (st or {}).get("reason_share", {})))
    headers = ["side", "windows", "recorded", "SM MHz", "memory MHz", "NVML avg power W", "energy counter power W",
               "temperature C", *(f"{name} share" for name in reasons), "temperature first window C",
               "temperature last window C", "not recorded"]
    rows = []
    for side, state in sides:
        st: dict[str, Any] = state or {}
        readings = [number(st.get(k), f"{st[k]:.0f}" if st.get(k) is not None else "-")
                    for k in (*READINGS[:3], "energy_power_w", READINGS[3])]
        shares = [number(st.get("reason_share", {}).get(name, 0.0) if st.get("recorded") else None,
                         f"{100.0 * st.get('reason_share', {}).get(name, 0.0):.0f}%") for name in reasons]
        ends = [number(st.get(k), f"{st[k]:.0f}" if st.get(k) is not None else "-")
                for k in ("temperature_first_c", "temperature_last_c")]
        rows.append([Cell(side), number(st.get("windows"), str(st.get("windows"))),
                     number(st.get("recorded"), str(st.get("recorded"))), *readings, *shares, *ends,
                     Cell(str(st.get("not_recorded") or ""))])
    return table(headers, rows, css="gpu")


def _op_section(o: OpReport, report: Report) -> str:
    heading = render.op_heading(o, report.rounds_planned)
    sub = f"{o.campaign}: {heading}" if o.campaign else heading
    regime = f' data-regime="{esc(o.regime)}"' if o.regime else ""
    parts = [f'<section class="op" data-op="{esc(o.op)}"{regime}>\n<h2>{clipped(render.op_title(o, report), "40em")} '
             f'<span class="sub">{esc(sub)}</span></h2>\n']
    parts.append(notes(render.op_notes(o, render.gpu_state_said_in_header(report))))
    if o.state == "verdict" and o.shapes:
        reference = render.has_reference(o)
        headers = [*SHAPE_HEADERS, *(REFERENCE_HEADERS if reference else ()), *SHAPE_HEADERS_AFTER,
                   *([Cell("A/A 95% CI", title="a diagnostic, never the margin")] if o.control else [])]
        parts.append(table(headers, (_shape_row(s, o.control, reference) for s in o.shapes), css="shapes"))
        parts.append(_gpu_table(o))
        margin = max(s.margin_pct for s in o.shapes)
        parts.append(interval_plot_svg(shape_points(o), margin_pct=margin, title=f"{o.op}: B/A - 1 per shape"))
        parts.append(f'<p class="muted">{esc(plot_caption(margin, o.control))}</p>\n')
    parts.append("</section>\n")
    return "".join(parts)


def _rounds_run(report: Report) -> str:
    run = [o.rounds_completed for o in report.ops if o.state != "ir_only"]
    return "-" if not run else str(min(run)) if min(run) == max(run) else f"{min(run)}-{max(run)}"


def _header(report: Report) -> str:
    known = [k for k in SETUP_LABELS if k in report.setup]
    extra = [k for k in report.setup if k not in SETUP_LABELS]  # fields a later report adds: shown as they are
    switches = render.switch_lines(report)
    rows = [[Cell(SETUP_LABELS.get(k, k).replace("_", " ")), Cell(markup=clipped(report.setup[k], "60em"))]
            for k in known + extra if not (k == "switch" and len(switches) > 1)]
    if len(switches) > 1:  # several switches: which ops each one is for, as the text header says
        rows[:0] = [[Cell("switch"), Cell(markup=clipped(line.removeprefix("switch (side B) "), "60em"))]
                    for line in switches]
    if report.ops and all(o.state == "ir_only" for o in report.ops):
        rows += [[Cell("IR triage"), Cell(render.header_lines(report)[-1])]]
    else:
        rows += [[Cell("rounds"), Cell(f"planned {report.rounds_planned}, run {_rounds_run(report)}")],
                 [Cell("margin"), Cell(f"+-{report.margin_pct:g}% ({report.margin_source})")],
                 [Cell("rule"), Cell(render.RULE_TEXT)]]
    rows += [[Cell("root"), Cell(markup=clipped(report.root, "60em"))]]
    if report.exit_code is not None:
        rows.append([Cell("exit"), Cell(f"{report.exit_code}: {report.exit_reason}")])
    parts = [f"<h1>abbench report: {clipped(_title(report), '50em')}</h1>\n",
             table([], rows, css="setup")]
    banners = []
    if not report.complete:
        failed = f" (cells not finished: {', '.join(report.failed_cells)})" if report.failed_cells else ""
        banners.append(render.INCOMPLETE_TEXT + failed)
    if report.caliber_mismatch:
        banners.append("CALIBER MISMATCH: the two sides' numbers mean different things for "
                       + ", ".join(o.op for o in report.ops if o.caliber_mismatch))
    if report.slower_ops:
        banners.append(render.gate_line(report))
    parts += [f'<p class="banner">{esc(b)}</p>\n' for b in banners]
    if not report.gpu_timed:
        parts.append('<p class="banner warn">NOT GPU TIMINGS: interpreter or wall-clock numbers say nothing about '
                     "GPU speed; a direction below describes this machine only</p>\n")
    chance = render.chance_line(report)
    lead = [line for line in render.lead_lines(report) if line != render.INCOMPLETE_TEXT]
    auto = [render.auto_line(report)] if report.auto_rounds else []
    scope = [render.SCOPE_TEXT] if report.gpu_timed else []
    parts.append(notes(render.regime_lines(report) + auto + ([chance] if chance else []) + scope + lead))
    return "".join(parts)


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page: header, banners, one section per op, the closing lines."""
    tail = [line for line in render.tail_lines(report) if line != render.gate_line(report)]  # a banner up top
    body = _header(report) + "".join(_op_section(o, report) for o in report.ops) + notes(tail)
    return page(f"abbench report: {_title(report)}", body)


def _title(report: Report) -> str:
    """The switch a page is about, or how many when its ops have several (the header names each)."""
    switches = render.switch_lines(report)
    return report.setup.get("switch", "unknown") if len(switches) <= 1 else f"{len(switches)} switches"
