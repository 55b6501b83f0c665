"""The report as text (the terminal section, ``abbench summary``, report.md) and the files written at the end.

Every line is a pure function of a :class:`Report`, so a report.json read back
renders the same text as the session that wrote it.
"""

from __future__ import annotations

from pathlib import Path

from pytest_abbench.fileio import write_json_atomic
from pytest_abbench.report import plots
from pytest_abbench.layout import RootLayout
from pytest_abbench.report.model import OpReport, Report


def _range(ci: tuple[float, float] | None) -> str:
    """An interval in percent, or - when there is none."""
    return f"{ci[0]:+.1f} ~ {ci[1]:+.1f}%" if ci else "-"


def _fmt(v: float | None, unit: str = "%") -> str:
    """A signed percent, another unit to 4 significant digits, or - for None."""
    return "-" if v is None else f"{v:+.1f}{unit}" if unit == "%" else f"{v:.4g}{unit}"


def _caliber_text(o: OpReport) -> str:
    if o.state == "ir_only":
        return "not checked (nothing timed)"
    return "MISMATCH" if o.caliber_mismatch else "ok"


def _gate_text(o: OpReport) -> str:
    if o.gate is None:
        return "not decided"
    if o.gate["state"] == "no_diff" and o.state != "no_ir_diff" and o.rounds_expected > 1:
        return "no_diff (overridden: every round run)"
    if o.gate["state"] == "unavailable":
        return f"unavailable: {o.gate['reason']}" + ("" if o.state == "ir_only" else "; all rounds run")
    return str(o.gate["state"])


def render_text(report: Report) -> str:
    """The report as lines: caliber findings and problems first, then one block per op."""
    lines: list[str] = []
    if not report.complete:
        lines.append("INCOMPLETE: the session stopped before every planned cell ran; ops missing rounds get no verdict")
    lines += report.caliber_lines
    lines += [f"problem: {p}" for p in report.problems]
    triage = [o for o in report.ops if o.state == "ir_only"]
    if triage:
        changed = [o.op for o in triage if o.gate and o.gate["state"] == "diff"]
        lines.append(f"IR triage: the switch changes the generated code of {len(changed)} of {len(triage)} ops"
                     + (f": {', '.join(changed)} (worth GPU time)" if changed else ""))
    for o in report.ops:
        marker_text = " ".join(f"{k}={v}" for k, v in o.markers.items() if v) or "markers clean"
        lines.append(f"== {o.op}: rounds {o.rounds_completed}/{o.rounds_expected}, {marker_text}, "
                     f"caliber {_caliber_text(o)}, "
                     f"IR gate {_gate_text(o)}")
        lines += [f"   IR: {g}" for g in o.gate_lines]
        if o.state != "verdict":
            lines.append(f"   {o.reason}")
            continue
        ci = f" [{o.geomean_ci_pct[0]:+.1f}% ~ {o.geomean_ci_pct[1]:+.1f}%]" if o.geomean_ci_pct else ""
        counts = ", ".join(f"{k} {v}" for k, v in sorted(o.verdicts.items()))
        if o.control:
            floor = o.aa_geomean_ci_pct
            floor_text = f"; A/A floor [{floor[0]:+.1f}% ~ {floor[1]:+.1f}%]" if floor else "; A/A floor -"
            margin_text = "margin: each shape's A/A floor" if report.margin_source != "--ab-margin" \
                else f"margin +-{report.margin_pct:g}% (--ab-margin)"
        else:
            floor_text = ""
            margin_text = f"margin +-{report.margin_pct:g}% ({report.margin_source})"
        lines.append(f"   geomean delta {_fmt(o.geomean_pct)}{ci}{floor_text}; verdicts: {counts}; {margin_text}")
        if o.sign_flips:
            lines.append(f"   {o.sign_flips} of {len(o.shapes)} shapes changed sign: their direction is not a conclusion")
        for m in o.mixed_timer_shapes:
            lines.append(f"   no verdict for {m} (timer differs between sides or shape missing)")
        lines.append(f"   {'shape':<28} {'A ms':>10} {'B ms':>10} {'delta med [min ~ max]':>26} "
                     f"{'95% CI':>18} {'noise A/B':>11} {'rounds A/B':>11} {'flip':>4}  verdict"
                     + (f"  {'A/A floor (95% CI)':>20}" if o.control else ""))
        for s in o.shapes:
            rng = f"{s.delta_pct:+.1f}% [{s.delta_min_pct:+.1f} ~ {s.delta_max_pct:+.1f}]"
            ci_text = f"{s.ci_pct[0]:+.1f} ~ {s.ci_pct[1]:+.1f}%" if s.ci_pct else "-"
            noise = "/".join("-" if v is None else f"{v:.1f}%" for v in (s.noise_within_a_pct, s.noise_within_b_pct))
            # Spread of each side's medians across rounds: how much the machine moved between processes.
            across = "/".join("-" if v is None else f"{v:.1f}%" for v in (s.noise_across_a_pct, s.noise_across_b_pct))
            lines.append(f"   {s.shape[:28]:<28} {s.a_ms:>10.4g} {s.b_ms:>10.4g} {rng:>26} {ci_text:>18} "
                         f"{noise:>11} {across:>11} {'yes' if s.sign_flip else 'no':>4}  {s.verdict:<12}"
                         + (f"  {_range(s.aa_ci_pct):>20}" if o.control else ""))
    if report.slower_ops:
        lines.append(f"REGRESSION GATE: slower beyond the threshold: {', '.join(report.slower_ops)}")
    return "\n".join(lines)


def write_report(root: Path, report: Report) -> list[Path]:
    """report.json, report.md and (with matplotlib) plots/<op>.png; returns the plots written."""
    layout = RootLayout(root)
    write_json_atomic(layout.report_json, report.to_json())
    layout.report_md.write_text("# abbench report\n\n```\n" + render_text(report) + "\n```\n")
    return plots.write_plots(root, report)
