"""The report as text (the terminal section, ``abbench summary``, report.md) and the files written at the end.

Every line is a pure function of a :class:`Report`, so a report.json read back
renders the same text as the session that wrote it.
"""

from __future__ import annotations

from pathlib import Path

from pytest_abbench.core.fileio import write_json_atomic
from pytest_abbench.report import plots
from pytest_abbench.core.layout import RootLayout
from pytest_abbench.core.outcome import NO_IR_DIFF
from pytest_abbench.report import cost
from pytest_abbench.report import gpustate
from pytest_abbench.report.flags import FLAGS
from pytest_abbench.report.model import OpReport, Report, ShapeReport
from pytest_abbench.report.sequential import look_alpha
from pytest_abbench.report.stats import ALPHA


def _range(ci: tuple[float, float] | None) -> str:
    """An interval in percent (two decimals when it is narrower than a point), or - when there is none."""
    if not ci:
        return "-"
    digits = 2 if ci[1] - ci[0] < 1.0 else 1
    return f"{ci[0]:+.{digits}f} ~ {ci[1]:+.{digits}f}%"


def _fmt(v: float | None, unit: str = "%") -> str:
    """A signed percent, another unit to 4 significant digits, or - for None."""
    return "-" if v is None else f"{v:+.1f}{unit}" if unit == "%" else f"{v:.4g}{unit}"


def _caliber_text(o: OpReport) -> str:
    if o.state == "ir_only":
        return "not checked (nothing timed)"
    return "MISMATCH" if o.caliber_mismatch else "ok"


def _gate_text(o: OpReport) -> str:
    """The gate's decision, what it was compiled at, and what it did to the op's later rounds."""
    if o.gate is None:
        return "not decided"
    state = str(o.gate["state"])
    if state == "unavailable":
        return f"unavailable: {o.gate['reason']}" + ("" if o.state == "ir_only" else "; all rounds run")
    basis = o.gate.get("basis")

    def decided(*notes: str) -> str:
        inner = "; ".join(n for n in (f"compiled at {basis}" if basis else "", *notes) if n)
        return f"{state} ({inner})" if inner else state

    if state == "no_diff" and o.state != "no_ir_diff" and o.rounds_expected > 1:
        if o.state == "verdict":  # a verdict needs every cell: none was skipped
            return decided("overridden: every round run")
        if NO_IR_DIFF in o.reason:  # the reason lists the cells it skipped
            later = "round 2" if o.rounds_expected == 2 else f"rounds 2-{o.rounds_expected}"
            return (decided() + f": {later} skipped (round 1 showed the same code on both sides), but a round-1 "
                    "cell did not finish ok, so the op is not reported as unchanged")
    return decided()


RULE_TEXT = ("direction: t-test of the round deltas at 5% after Benjamini-Hochberg across the op's shapes, and more "
             "than half of the rounds on that side; same: 90% interval inside +-margin; a flag "
             f"({', '.join(FLAGS)}) withholds a verdict it could have made")


def header_lines(report: Report) -> list[str]:
    """What was compared and how: switch, backend, timer, device, rounds, margin, the rule; a warning off-GPU."""
    setup = report.setup
    run = [o.rounds_completed for o in report.ops if o.state not in ("ir_only",)]
    rounds_run = "-" if not run else str(min(run)) if min(run) == max(run) else f"{min(run)}-{max(run)}"
    lines = [f"switch (side B): {setup.get('switch', 'unknown')}; backend {setup.get('backend', 'unknown')}; "
             f"timer {setup.get('timer', 'unknown')}; device {setup.get('device', 'unknown')}",
             f"rounds planned {report.rounds_planned}, run {rounds_run}; margin +-{report.margin_pct:g}% "
             f"({report.margin_source}); {RULE_TEXT}"]
    if report.auto_rounds:
        lines.append(auto_line(report))
    chance = chance_line(report)
    if chance:
        lines.append(chance)
    if not report.gpu_timed:
        lines.append("NOT GPU TIMINGS: interpreter or wall-clock numbers say nothing about GPU speed; a direction "
                     "below describes this machine only")
    return lines


STOPPED_TEXT = {"settled": "every shape settled", "cap": "the cap reached", "budget": "the --ab-rounds-budget spent"}


def auto_line(report: Report) -> str:
    """--ab-rounds auto: the looks, each look's level, and why the ops' rounds ended."""
    auto = report.auto_rounds
    first, last = auto["first"], auto["last"]
    judged = auto["settled"] + auto["cap"] + auto["budget"]
    why = ", ".join(f"{auto[k]} {STOPPED_TEXT[k]}" for k in ("settled", "cap", "budget") if auto[k]) or "no op judged"
    mean = f"; {auto['rounds_run'] / judged:.1f} rounds per op" if judged else ""
    return (f"rounds auto, {first} to {last}: after round {first} an op adds rounds only while a shape has no "
            f"verdict and an interval wider than the margin; each look before round {last} judges at "
            f"{look_alpha(first, first, last):.2%}, round {last} at {look_alpha(last, first, last):.2%} (shares of "
            f"{ALPHA:.0%}); ops stopped: {why}{mean}")


def _rounds_text(o: OpReport, report: Report) -> str:
    """``rounds 4/6``; with auto rounds ``rounds 4 of up to 10 (every shape settled)``."""
    if not o.stopped:
        return f"rounds {o.rounds_completed}/{o.rounds_expected}"
    unsettled = f": {len(o.unsettled)} shape(s) unsettled" if o.unsettled else ""
    return f"rounds {o.rounds_completed} of up to {report.rounds_planned} ({STOPPED_TEXT[o.stopped]}{unsettled})"


def chance_line(report: Report) -> str:
    """How many false directions this report's size and rule give by chance: Benjamini-Hochberg at 5% across each
    op's shapes bounds the chance that an op with no change gets any direction by 5%, and the share of false ones
    among the directions of an op by 5% (the majority of rounds a direction also needs only lowers both)."""
    judged = [o for o in report.ops if o.state == "verdict" and o.shapes]
    if not judged:
        return ""
    shapes = sum(len(o.shapes) for o in judged)
    directions = sum(o.verdicts.get("faster", 0) + o.verdicts.get("slower", 0) for o in judged)
    return (f"by chance: with no change anywhere this rule gives a false direction to at most about {ALPHA:.0%} of "
            f"ops, up to {ALPHA * len(judged):.1f} of these {len(judged)} ops ({shapes} shapes); of the {directions} "
            f"direction(s) reported, up to {ALPHA:.0%} may be false")


def _verdict_text(s: ShapeReport) -> str:
    """The verdict, with 'within +-m%' for a real effect smaller than the margin, and the shape's flags."""
    text = f"{s.verdict}, within +-{s.margin_pct:g}%" if s.within_margin else s.verdict
    return f"{text} [{', '.join(s.flags)}]" if s.flags else text


def _shape_table(o: OpReport) -> list[str]:
    """One line per shape in declared order; the shape id is never cut (the column is as wide as the longest)."""
    width = max([len("shape")] + [len(s.shape) for s in o.shapes])
    lines = [f"   {'shape':<{width}} {'A ms':>10} {'B ms':>10} {'delta med [min ~ max]':>26} "
             f"{'95% CI':>18} {'faster':>7} {'noise A/B':>11} {'rounds A/B':>11} {'flip':>4} {'margin':>7}  verdict"
             + (f"  {'A/A 95% CI':>18}" if o.control else "")]
    for s in o.shapes:
        rng = f"{s.delta_pct:+.1f}% [{s.delta_min_pct:+.1f} ~ {s.delta_max_pct:+.1f}]"
        noise = "/".join("-" if v is None else f"{v:.1f}%" for v in (s.noise_within_a_pct, s.noise_within_b_pct))
        # Spread of each side's medians across rounds: how much the machine moved between processes.
        across = "/".join("-" if v is None else f"{v:.1f}%" for v in (s.noise_across_a_pct, s.noise_across_b_pct))
        faster = f"{s.faster_rounds}/{s.rounds}"  # rounds in which B was faster: "faster in x of N rounds"
        line = (f"   {s.shape:<{width}} {s.a_ms:>10.4g} {s.b_ms:>10.4g} {rng:>26} {_range(s.ci_pct):>18} "
                f"{faster:>7} {noise:>11} {across:>11} {'yes' if s.sign_flip else 'no':>4} "
                f"{f'+-{s.margin_pct:g}%':>7}  "
                f"{_verdict_text(s):<22}" + (f"  {_range(s.aa_ci_pct):>18}" if o.control else ""))
        lines.append(line.rstrip() + (f"  ({s.note})" if s.note else ""))
    return lines


def render_text(report: Report) -> str:
    """The report as lines: header, caliber findings and problems, then one block per op."""
    lines: list[str] = header_lines(report)
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
        lines.append(f"== {o.op}: {_rounds_text(o, report)}, {marker_text}, "
                     f"caliber {_caliber_text(o)}, "
                     f"IR gate {_gate_text(o)}")
        lines += [f"   IR: {g}" for g in o.gate_lines]
        if o.state != "verdict":
            lines.append(f"   {o.reason}")
            continue
        counts = ", ".join(f"{k} {v}" for k, v in sorted(o.verdicts.items()))
        lines.append(f"   geomean delta {_fmt(o.geomean_pct)} [{_range(o.geomean_ci_pct)}]; verdicts: {counts}")
        lines += gpustate.op_lines(o)
        if o.control:
            biased = sum(1 for s in o.shapes if s.aa_bias_pct is not None)
            lines.append(f"   A/A control (a diagnostic, never the margin): geomean interval "
                         f"[{_range(o.aa_geomean_ci_pct)}]; " + (
                             f"{biased} shape(s) show a bias between processes (A/A t-test at 5% after "
                             "Benjamini-Hochberg across the op's shapes): directions no larger than it are withheld"
                             if biased else "no shape shows a bias"))
        lines += [f"   {f}" for f in o.findings]
        if o.flags:
            lines.append("   flagged (no plain verdict where the condition could have made it): "
                         + ", ".join(f"{name} on {n} of {len(o.shapes)} shapes" for name, n in o.flags.items()))
        if o.sign_flips:
            lines.append(f"   {o.sign_flips} of {len(o.shapes)} shapes changed sign between rounds: a direction needs "
                         "more than half of the rounds on its side as well as the t-test")
        for m in o.mixed_timer_shapes:
            lines.append(f"   no verdict for {m} (timer differs between sides or shape missing)")
        lines += _shape_table(o)
    if report.slower_ops:
        lines.append(f"REGRESSION GATE: slower beyond the threshold: {', '.join(report.slower_ops)}")
    if report.gate_held:
        lines.append("regression gate: beyond the threshold but not counted (no plain 'slower'): "
                     + ", ".join(report.gate_held))
    spent = cost.describe(report.time_spent)
    if spent:
        lines.append(spent)
    return "\n".join(lines)


def write_report(root: Path, report: Report) -> list[Path]:
    """report.json, report.md and (with matplotlib) plots/<op>.png; returns the plots written."""
    layout = RootLayout(root)
    write_json_atomic(layout.report_json, report.to_json())
    layout.report_md.write_text("# abbench report\n\n```\n" + render_text(report) + "\n```\n")
    return plots.write_plots(root, report)
