"""The report as text (the terminal section, ``abbench summary``, report.md); ``files`` writes it out.

Every line is a pure function of a :class:`Report`, so a report.json read back
renders the same text as the session that wrote it.
"""

from __future__ import annotations

from pytest_abbench.core.outcome import NO_IR_DIFF
from pytest_abbench.report import cost
from pytest_abbench.core import regimes
from pytest_abbench.report import gpustate, kernelsplit, peak
from pytest_abbench.report.flags import WITHHOLDING, holds_under
from pytest_abbench.report.model import OpReport, Report, ShapeReport
from pytest_abbench.report.sequential import look_alpha
from pytest_abbench.report.stats import ALPHA


def interval_text(ci: tuple[float, float] | None) -> str:
    """An interval in percent (two decimals when it is narrower than a point), or - when there is none."""
    if not ci:
        return "-"
    digits = 2 if ci[1] - ci[0] < 1.0 else 1
    return f"{_pct_end(ci[0], digits)} ~ {_pct_end(ci[1], digits)}%"


BEYOND_PCT = 9999.0  # B/A of 100x: an interval end past it reads ">+9999" (stats.PCT_CAP bounds the number)


def _pct_end(value: float, digits: int) -> str:
    return f">+{BEYOND_PCT:.0f}" if value > BEYOND_PCT else f"{value:+.{digits}f}"


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
             f"({', '.join(WITHHOLDING)}) withholds a verdict it could have made; a GPU flag keeps it and says under "
             "which condition it holds")


# What an interval covers: the rounds of this run.  Each round is a new pair of processes on this card, so the
# between-process noise is in it; the card is not (two H200s of one model differ by more than either's interval).
SCOPE_TEXT = ("intervals cover this run's rounds on this card under its regime, not another card of the same model "
              "(docs/verdicts.md#what-an-interval-covers)")


def switch_lines(report: Report) -> list[str]:
    """What side B changes: one line when every op has the same switch, else one line per switch naming its ops."""
    by_switch: dict[str, list[str]] = {}
    for o in report.ops:
        by_switch.setdefault(o.switch or report.setup.get("switch", "unknown"), []).append(o.op)
    if len(by_switch) <= 1:
        return [f"switch (side B): {next(iter(by_switch), report.setup.get('switch', 'unknown'))}"]
    return [f"switch (side B) of {', '.join(ops)}: {switch}" for switch, ops in by_switch.items()]


def header_lines(report: Report) -> list[str]:
    """What was compared and how: switch, backend, timer, device, rounds, margin, the rule; a warning off-GPU."""
    setup = report.setup
    if report.ops and all(o.state == "ir_only" for o in report.ops):
        # Nothing ran on any device: there is no backend, timer or device to name, and no rule was applied.
        bases = dict.fromkeys(str(o.gate.get("basis")) for o in report.ops if o.gate and o.gate.get("basis"))
        compiled = f"compiled at {', '.join(bases)}" if bases else "compiled"
        return [*switch_lines(report), f"IR triage only: {compiled}; nothing timed, so no backend, timer, device, "
                                       "rounds or verdict rule apply"]
    run = [o.rounds_completed for o in report.ops if o.state not in ("ir_only",)]
    rounds_run = "-" if not run else str(min(run)) if min(run) == max(run) else f"{min(run)}-{max(run)}"
    switches = switch_lines(report)
    where = (f"backend {setup.get('backend', 'unknown')}; timer {setup.get('timer', 'unknown')}; "
             f"device {setup.get('device', 'unknown')}")
    # One switch shares its line with where it ran; several get a line each, then where they ran.
    lines = [f"{switches[0]}; {where}"] if len(switches) == 1 else [*switches, where]
    lines += [f"rounds planned {report.rounds_planned}, run {rounds_run}; margin +-{report.margin_pct:g}% "
             f"({report.margin_source}); {RULE_TEXT}"]
    if report.auto_rounds:
        lines.append(auto_line(report))
    lines += regime_lines(report)
    chance = chance_line(report)
    if chance:
        lines.append(chance)
    if not report.gpu_timed:
        lines.append("NOT GPU TIMINGS: interpreter or wall-clock numbers say nothing about GPU speed; a direction "
                     "below describes this machine only")
    else:
        lines.append(SCOPE_TEXT)
    return lines


STOPPED_TEXT = {"settled": "every shape settled", "cap": "the cap reached", "budget": "the --ab-rounds-budget spent",
                "failed": "every shape failed alike in round 1"}


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


UNSETTLED_SHOWN = 3  # the unsettled shapes an op's rounds line names; the rest are counted


def _rounds_text(o: OpReport, rounds_planned: int) -> str:
    """``rounds 4/6``; with auto rounds ``rounds 4 of up to 10 (every shape settled)``."""
    if not o.stopped:
        return f"rounds {o.rounds_completed}/{o.rounds_expected}"
    shown = o.unsettled[:UNSETTLED_SHOWN] + ([f"{len(o.unsettled) - UNSETTLED_SHOWN} more"]
                                            if len(o.unsettled) > UNSETTLED_SHOWN else [])
    unsettled = f"; held by {len(o.unsettled)} shape(s): {', '.join(shown)}" if o.unsettled else ""
    return f"rounds {o.rounds_completed} of up to {rounds_planned} ({STOPPED_TEXT[o.stopped]}{unsettled})"


def regime_lines(report: Report) -> list[str]:
    """Which timing regime ran, what it measures and why that matters; whether its condition could be checked;
    or that GPU state was not recorded at all, and why."""
    named = report.setup.get("regime", "unknown")
    timed = [o for o in report.ops if o.state == "verdict"]
    if named in regimes.REGIME_CHOICES:
        shown = regimes.cell_regimes(named)
        what = "; ".join(f"{r}: {regimes.WHAT_IT_MEASURES[r]}" if len(shown) > 1 else regimes.WHAT_IT_MEASURES[r]
                         for r in shown)
        both = " (each op reported under both)" if named == regimes.BOTH else ""
        lines = [f"regime {named}{both}: {what}. Why it matters: {regimes.WHY_IT_MATTERS}"]
    else:
        lines = [f"regime: not named ({named}: cells from before regimes, whose timed stretch began on an idle card "
                 "and caught the power controller's ramp)"]
    if timed and not gpustate.recorded_anywhere(timed):
        why = gpustate.not_recorded_why(timed)
        unchecked = named in regimes.REGIME_CHOICES and not gpustate.conditions_checked(timed)
        lines.append(f"GPU state: not recorded ({why})" + ("; the regime's condition could not be checked"
                                                          if unchecked else ""))
    return lines


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


def verdict_text(s: ShapeReport) -> str:
    """The verdict, with 'within +-m%' for a real effect smaller than the margin, the shape's flags, and the
    condition a GPU flag says it holds under."""
    text = f"{s.verdict}, within +-{s.margin_pct:g}%" if s.within_margin else s.verdict
    condition = holds_under(s.flags)
    clocks = gpustate.shape_clocks(s) if condition else ""
    condition += f": {clocks}" if clocks else ""
    return (f"{text} [{', '.join(s.flags)}]" if s.flags else text) + (f" ({condition})" if condition else "")


SHAPE_COLUMN_MAX = 48  # a shape id longer than this is shortened in its row and given whole under the table


def _shape_labels(o: OpReport) -> tuple[list[str], list[str]]:
    """The shape column's text per shape, and the notes that give shortened ids whole.

    A long id (a campaign can build one from every argument) would make every row as wide as it is; its row
    shows the start and a note number, and the note under the table keeps the whole id, so it is never lost.
    """
    labels: list[str] = []
    notes: list[str] = []
    for s in o.shapes:
        if len(s.shape) <= SHAPE_COLUMN_MAX:
            labels.append(s.shape)
            continue
        mark = f"... [{len(notes) + 1}]"
        labels.append(s.shape[:SHAPE_COLUMN_MAX - len(mark)] + mark)
        notes.append(f"   [{len(notes) + 1}] shape {s.shape}")
    return labels, notes


def has_reference(o: OpReport) -> bool:
    """Some shape of the op has an in-process reference delta, or a note on why it has none."""
    return any(s.reference_delta_pct is not None or s.reference_note for s in o.shapes)


def reference_text(s: ShapeReport) -> str:
    """The shape's in-process reference: ``+8.2% [+8.1 ~ +9.0%]``; ``-`` without one."""
    if s.reference_delta_pct is None:
        return "-"
    return f"{s.reference_delta_pct:+.1f}% [{interval_text(s.reference_ci_pct)}]"


REFERENCE_COLUMN = "in-process ref [95% CI]"


def _shape_table(o: OpReport) -> list[str]:
    """One line per shape in declared order; an id too long for the column is shortened there and given whole
    in a note under the table.  With an in-process reference, its delta stands beside the cells' interval."""
    labels, notes = _shape_labels(o)
    width = max([len("shape")] + [len(label) for label in labels])
    ref = has_reference(o)
    lines = [f"   {'shape':<{width}} {'A ms':>10} {'B ms':>10} {'delta med [min ~ max]':>26} "
             f"{'95% CI':>18}" + (f" {REFERENCE_COLUMN:>26}" if ref else "")
             + f" {'faster':>7} {'noise A/B':>11} {'rounds A/B':>11} {'flip':>4} {'margin':>7}  verdict"
             + (f"  {'A/A 95% CI':>18}" if o.control else "")]
    for s, label in zip(o.shapes, labels):
        rng = f"{s.delta_pct:+.1f}% [{s.delta_min_pct:+.1f} ~ {s.delta_max_pct:+.1f}]"
        noise = "/".join("-" if v is None else f"{v:.1f}%" for v in (s.noise_within_a_pct, s.noise_within_b_pct))
        # Spread of each side's medians across rounds: how much the machine moved between processes.
        across = "/".join("-" if v is None else f"{v:.1f}%" for v in (s.noise_across_a_pct, s.noise_across_b_pct))
        faster = f"{s.faster_rounds}/{s.rounds}"  # rounds in which B was faster: "faster in x of N rounds"
        line = (f"   {label:<{width}} {s.a_ms:>10.4g} {s.b_ms:>10.4g} {rng:>26} {interval_text(s.ci_pct):>18} "
                + (f"{reference_text(s):>26} " if ref else "")
                + f"{faster:>7} {noise:>11} {across:>11} {'yes' if s.sign_flip else 'no':>4} "
                f"{f'+-{s.margin_pct:g}%':>7}  "
                f"{verdict_text(s):<22}" + (f"  {interval_text(s.aa_ci_pct):>18}" if o.control else ""))
        notes_of_shape = [n for n in (s.note, s.reference_note) if n]
        lines.append(line.rstrip() + (f"  ({'; '.join(notes_of_shape)})" if notes_of_shape else ""))
    return lines + notes


INCOMPLETE_TEXT = "INCOMPLETE: the session stopped before every planned cell ran; ops missing rounds get no verdict"


def lead_lines(report: Report) -> list[str]:
    """What the report says before its ops: incomplete, caliber findings, problems, the IR triage's count."""
    lines = [INCOMPLETE_TEXT] if not report.complete else []
    lines += report.caliber_lines
    lines += [f"problem: {p}" for p in report.problems]
    triage = [o for o in report.ops if o.state == "ir_only"]
    if triage:
        changed = [o.op for o in triage if o.gate and o.gate["state"] == "diff"]
        lines.append(f"IR triage: the switch changes the generated code of {len(changed)} of {len(triage)} ops"
                     + (f": {', '.join(changed)} (worth GPU time)" if changed else ""))
    return lines


def op_heading(o: OpReport, rounds_planned: int) -> str:
    """The op's state in one line: ``rounds 2/2, markers clean, caliber ok, IR gate diff``; ``rounds_planned``
    is the report's (with auto rounds, the cap)."""
    marker_text = " ".join(f"{k}={v}" for k, v in o.markers.items() if v) or "markers clean"
    return (f"{_rounds_text(o, rounds_planned)}, {marker_text}, caliber {_caliber_text(o)}, "
            f"IR gate {_gate_text(o)}")


VERDICT_ORDER = ("slower", "faster", "same", "inconclusive")


def op_outcome(o: OpReport) -> str:
    """The op's answer in a few words: its verdict counts (``slower 2, same 1``), the IR triage's decision, that the
    switch changed no code, or why it has no verdict (the reason's first clause)."""
    if o.state == "verdict":
        known = [v for v in VERDICT_ORDER if o.verdicts.get(v)] + sorted(set(o.verdicts) - set(VERDICT_ORDER))
        return ", ".join(f"{v} {o.verdicts[v]}" for v in known)
    if o.state == "ir_only":
        return f"IR {o.gate['state']}" if o.gate else "IR not decided"
    if o.state == "no_ir_diff":
        return "no code change (" + ("later rounds" if o.rounds_completed else "every round") + " skipped)"
    why = "caliber mismatch" if o.caliber_mismatch else o.reason.removeprefix("no verdict: ").split(":")[0]
    return f"no verdict: {why.split(' (')[0]}"


def op_flags(o: OpReport) -> str:
    """The op's flags, sign flips and markers in one phrase (``drift 1, sign flips 2``), or ``-``."""
    parts = [f"{name} {n}" for name, n in o.flags.items()]
    parts += [f"sign flips {o.sign_flips}"] if o.sign_flips else []
    parts += [f"{marker} {n}" for marker, n in o.markers.items() if n]
    return ", ".join(parts) or "-"


def op_geomean(o: OpReport) -> tuple[str, str]:
    """The op's geomean delta and its interval as text; ``-`` where it has none."""
    if o.state != "verdict" or o.geomean_pct is None:
        return "-", "-"
    return _fmt(o.geomean_pct), interval_text(o.geomean_ci_pct)


def worth_a_look(s: ShapeReport) -> bool:
    """A shape a short report names: slower, or carrying a flag."""
    return s.verdict == "slower" or bool(s.flags)


def op_title(o: OpReport, report: Report) -> str:
    """The op's name; under --ab-regime both, with the regime its block reports (each op appears twice)."""
    return f"{o.op} ({o.regime})" if report.setup.get("regime") == regimes.BOTH and o.regime else o.op


def gpu_state_said_in_header(report: Report) -> bool:
    """The header already said "GPU state: not recorded": an op does not say it again."""
    timed = [o for o in report.ops if o.state == "verdict"]
    return bool(timed) and not gpustate.recorded_anywhere(timed)


def _unreadable_lines(o: OpReport) -> list[str]:
    """Each results record of the op's cells that could not be read: file, line and why."""
    return [f"unreadable result in {cell}, that shape's round left out: {record}"
            for cell, records in sorted(o.unreadable.items()) for record in records]


def _failed_lines(o: OpReport) -> list[str]:
    """Each shape that failed in a cell: where, and its error once."""
    return [f"failed shape {line}" for line in o.failed_shapes]


def _shapes_left_out(o: OpReport) -> list[str]:
    return [f"no verdict for {m} (timer differs between sides or shape missing)" for m in o.mixed_timer_shapes]


def op_notes(o: OpReport, header_said: bool = False) -> list[str]:
    """The op's lines between its heading and its shape table: the IR lines, the pinned autotune keys, then why it
    has no verdict, or its
    geomean, the regimes' comparison, GPU state, % of peak, A/A control, findings, flags, sign flips and shapes
    without a verdict; ``header_said``: the header said that no GPU state was recorded."""
    lines = [f"IR: {g}" for g in o.gate_lines]
    if o.autotune:
        lines.append(o.autotune)
    if o.state != "verdict":
        return (lines + [o.reason] + _unreadable_lines(o) + _failed_lines(o) + _shapes_left_out(o)
                + ([o.reference] if o.reference else []) + kernelsplit.report_lines(o.kernel_splits))
    counts = ", ".join(f"{k} {v}" for k, v in sorted(o.verdicts.items()))
    lines.append(f"geomean delta {_fmt(o.geomean_pct)} [{interval_text(o.geomean_ci_pct)}]; verdicts: {counts}")
    if o.reference:
        lines.append(o.reference)
    if o.regimes_note:
        lines.append(o.regimes_note)
    lines += [line.removeprefix("   ") for line in gpustate.op_lines(o, header_said)]
    lines += [line.removeprefix("   ") for line in peak.lines(o)]
    if o.control:
        biased = sum(1 for s in o.shapes if s.aa_bias_pct is not None)
        lines.append(f"A/A control (a diagnostic, never the margin): geomean interval "
                     f"[{interval_text(o.aa_geomean_ci_pct)}]; " + (
                         f"{biased} shape(s) show a bias between processes (A/A t-test at 5% after "
                         "Benjamini-Hochberg across the op's shapes): directions no larger than it are withheld"
                         if biased else "no shape shows a bias"))
    lines += o.findings
    lines += kernelsplit.report_lines(o.kernel_splits)
    lines += _unreadable_lines(o)
    lines += _failed_lines(o)
    withheld = [name for name in WITHHOLDING if o.flags.get(name)]  # the GPU's flags are on the GPU line
    if withheld:
        lines.append("flagged (no plain verdict where the condition could have made it): "
                     + ", ".join(f"{name} on {o.flags[name]} of {len(o.shapes)} shapes" for name in withheld))
    if o.sign_flips:
        lines.append(f"{o.sign_flips} of {len(o.shapes)} shapes changed sign between rounds: a direction needs "
                     "more than half of the rounds on its side as well as the t-test")
    lines += _shapes_left_out(o)
    return lines


def gate_line(report: Report) -> str:
    """What tripped --ab-fail-if-slower; empty when nothing did."""
    return f"REGRESSION GATE: slower beyond the threshold: {', '.join(report.slower_ops)}" if report.slower_ops else ""


def tail_lines(report: Report) -> list[str]:
    """What the report says after its ops: the regression gate, the shapes it held, where the time went."""
    lines = [gate_line(report)] if report.slower_ops else []
    if report.gate_held:
        lines.append("regression gate: beyond the threshold but not counted (no plain 'slower'): "
                     + ", ".join(report.gate_held))
    spent = cost.describe(report.time_spent, kernels_cached=report.setup.get("backend") != "interpreter")
    if spent:
        lines.append(spent)
    return lines


def render_text(report: Report) -> str:
    """The report as lines: header, caliber findings and problems, then one block per op."""
    lines: list[str] = header_lines(report) + lead_lines(report)
    header_said = gpu_state_said_in_header(report)
    for o in report.ops:
        lines.append(f"== {op_title(o, report)}: {op_heading(o, report.rounds_planned)}")
        lines += [f"   {line}" for line in op_notes(o, header_said)]
        if o.state == "verdict":
            lines += _shape_table(o)
    lines += tail_lines(report)
    return "\n".join(lines)
