"""A root's cells read into a Report: which cells exist, caliber first, then each shape's round deltas.

Results are read one round at a time and reduced as they are read, so
memory stays flat in the number of rounds.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, TypeAlias

from pytest_abbench.checks import caliber, irgate
from pytest_abbench.core import autotunerecord
from pytest_abbench.core.fileio import CorruptFileError
from pytest_abbench.core.kernelcache import KEPT_TUNING_PREFIX
from pytest_abbench.core.layout import (CONTROL, IDENTITY_FILE, SIDES, CellKey, RootLayout, identity_file,
                                   markers_log, results_file)
from pytest_abbench.core.markers import count_markers
from pytest_abbench.core.settings import DEFAULT_MARGIN_PCT, GATE_GEOMEAN, GATE_SHAPES
from pytest_abbench.report import cost, peak, reference
from pytest_abbench.report import gpustate
from pytest_abbench.report.model import SCHEMA_VERSION, OpReport, Report, ShapeReport
from pytest_abbench.report import flags, kernelsplit
from pytest_abbench.report import sequential
from pytest_abbench.report.flags import Finding, ShapeSeries
from pytest_abbench.report.stats import (ALPHA, aa_bias, bh_adjust, bh_adjust_beyond, cv_pct, interval, judge,
                                         median_or_none, median_se, pct, robust_cv, sign_flip, spread_floor, stdev,
                                         t_test_above_p, t_test_p)
from pytest_abbench.core.outcome import (ALL_FAILED, FAILED_SHAPES, IR_ONLY, NO_IR_DIFF, NO_ROW, OK, OVER_BUDGET, SETTLED,
                                        CellOutcome)
from pytest_abbench.core.exitcodes import NO_ROW_SUFFIX, UNREADABLE_SUFFIX
from pytest_abbench.core.plan import CampaignPlan, read_plan
from pytest_abbench.core.regimes import BOTH, BURST, REGIMES, STEADY
from pytest_abbench.core.results import SKIPPED, shape_energy
from pytest_abbench.core.results import read_results as shape_results
from pytest_abbench.core.status import read_status
from pytest_abbench.core.wording import count


def discover(layout: RootLayout, problems: list[str]) -> list[CellOutcome]:
    """Every cell of an offline root: its status rows (the last row of a cell wins), then rowless folders."""
    cells: dict[CellKey, CellOutcome] = {}
    rows = read_status(layout.root, on_bad_line=lambda exc: problems.append(f"{exc} (line skipped)"))
    if not layout.status.exists() and any(layout.cell_folders()):
        problems.append(f"{layout.status} is missing: every cell is read from its folder alone, without its row")
    for row in rows:
        outcome = CellOutcome.from_row(row, layout.cell(CellKey(row.round, row.op, row.side)))
        cells[outcome.key] = outcome
    for key, folder in layout.cell_folders():
        if key not in cells:
            problems.append(f"{folder}: cell folder without a status.tsv row (crashed or still running)")
            # No row counted its markers: read them from its markers.log (the only case they are re-read).
            cells[key] = CellOutcome(key, folder, NO_ROW, markers=count_markers(markers_log(folder)))
    return list(cells.values())


def failed_cell_names(cells: Iterable[CellOutcome]) -> list[str]:
    """``Report.failed_cells`` as the cells' rows give it: each cell that neither finished nor was skipped as not
    needed, ``op[r2-B]`` (a folder without a row marked so)."""
    return sorted(str(c.key) + (NO_ROW_SUFFIX if c.status == NO_ROW else "") for c in cells
                  if not (c.finished or c.not_needed))


def disagreements(rep: Report, root: Path) -> list[str]:
    """Where ``rep`` (a report.json as read) claims a clean run and the root's status.tsv holds a failed row it does
    not list (from which its exit code follows).  A report edited by hand, or written by anything but a session or
    ``abbench summary``, shows here; ``abbench gate`` and ``comment`` refuse it."""
    layout = RootLayout(root)
    problems: list[str] = []
    # A report that already says the run is not clean (stopped, a cell failed) stands: an interrupted or resumed
    # session's report covers its own cells, and the root may hold more failed rows than it names.
    if rep.offline_exit() != 0:
        return []
    cells = [c for c in discover(layout, problems) if c.status != NO_ROW]  # a folder without a row: a cell cut off
    found = []
    hidden = [name for name in failed_cell_names(cells) if name not in rep.failed_cells]
    if hidden:
        found.append(f"status.tsv has failed cell(s) that report.json's failed_cells lacks: {', '.join(hidden)}")
    return found


def plan_of(layout: RootLayout, outcomes: list[CellOutcome], problems: list[str]) -> CampaignPlan:
    """The plan in the root's campaign.json; for a root written before plans were kept, the cells present."""
    try:
        plan = read_plan(layout)
    except CorruptFileError as exc:
        problems.append(f"{exc}: rounds judged from the cells present")
        plan = None
    if plan is not None:
        return plan
    if layout.manifest.exists():
        problems.append(f"{layout.manifest} holds no plan: rounds judged from the cells present")
    rounds = max((o.key.round for o in outcomes), default=1)
    return CampaignPlan(rounds, control=any(o.key.role == CONTROL for o in outcomes))


def read_results(folder: Path, regime: str = "", unreadable: list[str] | None = None,
                 failed: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """shape -> {median_ms, timer, cv, ...} of the records timed under ``regime`` ("": every record, a root from
    before regimes); samples are reduced here so memory stays flat in rounds.  A record that cannot be read raises
    naming file, line and field, or, with ``unreadable``, is named there and left out (its shape has no result).
    ``failed``, where given, gets each failed shape's status and error."""
    out: dict[str, dict[str, Any]] = {}
    on_bad = None if unreadable is None else (lambda exc: unreadable.append(str(exc)))
    for rec in shape_results(results_file(folder), on_bad):
        if regime and rec.regime is not None and rec.regime != regime:
            continue
        if not rec.ok and failed is not None:
            failed[rec.shape] = f"{rec.status}: {rec.error}" if rec.error else rec.status
        if not rec.ok or not rec.median_ms or (regime and rec.regime != regime):
            continue
        out[rec.shape] = {"median_ms": rec.median_ms, "timer": rec.timer, "cv": robust_cv(rec.samples_ms),
                          "samples": len(rec.samples_ms)}
        out[rec.shape]["windows"] = gpustate.record_windows(rec)  # NVML around its timed windows
        out[rec.shape]["energy"] = shape_energy(rec)  # its steady span, else the cell's windows taken together
        out[rec.shape]["work"] = rec.work
    return out


_CellsByRound: TypeAlias = dict[int, dict[str, CellOutcome]]  # round -> role -> cell


@dataclass
class _ShapeRounds:
    """One shape's values, one entry per round it was comparable in, in round order."""

    a_ms: list[float] = field(default_factory=list)  # side A's median
    b_ms: list[float] = field(default_factory=list)  # side B's median
    log_ratios: list[float] = field(default_factory=list)  # ln(B/A)
    noise_a: list[float | None] = field(default_factory=list)  # side A's within-cell robust CV (None: < 3 samples)
    noise_b: list[float | None] = field(default_factory=list)
    samples_a: list[int] = field(default_factory=list)  # samples behind side A's median
    samples_b: list[int] = field(default_factory=list)
    aa_log_ratios: list[float] = field(default_factory=list)  # ln(A2/A), only rounds where A2 used A's timer
    gpu: gpustate.ShapeGpu = field(default_factory=gpustate.ShapeGpu)  # each round's windows and energy, A and B
    work: dict[str, Any] = field(default_factory=dict)  # what a call does, as the campaign declared it
    noise_control: list[float | None] = field(default_factory=list)  # A2's within-cell robust CV, in those rounds
    samples_control: list[int] = field(default_factory=list)

    def median_se(self, side: str) -> float:
        """The standard error of one of ``side``'s medians (log units), from its cells' typical noise."""
        noise, samples = {"A": (self.noise_a, self.samples_a), "B": (self.noise_b, self.samples_b),
                          CONTROL: (self.noise_control, self.samples_control)}[side]
        return median_se(median_or_none(noise), int(statistics.median(samples)) if samples else 0)

    def series(self) -> ShapeSeries:
        return ShapeSeries([math.log(v) for v in self.a_ms], [math.log(v) for v in self.b_ms],
                           self.median_se("A"), self.median_se("B"))


def _sum_markers(cells: list[CellOutcome]) -> dict[str, int]:
    """Each marker's count over the op's cells."""
    totals: dict[str, int] = {}
    for c in cells:
        for marker, n in c.markers.items():
            totals[marker] = totals.get(marker, 0) + n
    return totals


def _check_caliber(op: str, cells: list[CellOutcome], by_round: _CellsByRound,
                   control: bool) -> caliber.CaliberResult:
    """Every round's identities against their partners', before a single latency is parsed."""
    found = caliber.CaliberResult()
    ran = {(c.key.round, c.key.role): c.cell_dir for c in cells if c.measured}
    identities: dict[Path, tuple[dict[str, Any] | None, str]] = {}

    def load(folder: Path) -> tuple[dict[str, Any] | None, str]:
        # Each cell is compared with up to three others: read its identity once.
        if folder not in identities:
            identities[folder] = caliber.load_identity(folder)
        return identities[folder]

    for rnd in sorted(by_round):
        for dir_a, dir_b in caliber.cell_pairs(rnd, lambda r, s: ran.get((r, s), Path()), control=control):
            if dir_a != Path() and dir_b != Path():
                found.extend(caliber.compare_identities(op, dir_a, dir_b, load))
        for first, later in caliber.side_pairs(rnd, lambda r, s: ran.get((r, s), Path())):
            if first != Path() and later != Path():
                found.extend(caliber.compare_side_rounds(op, first, later, load))
    return found


def _cells_skipped_by_gate(gate: irgate.GateDecision | None, cells: list[CellOutcome],
                           by_round: _CellsByRound) -> int:
    """Cells the IR gate skipped because round 1 finished and changed no code, or because the precompile's IR
    showed no changed code before round 1 (``--ab-precompile``: round 1 skipped too); 0: the rounds are to be
    read."""
    round1 = by_round.get(1, {})
    round1_ok = all(round1[s].status == OK for s in SIDES if s in round1)
    gated_first = bool(round1) and all(round1[s].status == NO_IR_DIFF for s in SIDES if s in round1)
    skipped = sum(1 for c in cells if c.status == NO_IR_DIFF)
    return skipped if gate is not None and gate.state == "no_diff" and (round1_ok or gated_first) else 0


def _incomplete_cells(by_round: _CellsByRound, rounds: int, roles: tuple[str, ...]) -> list[str]:
    """Each expected cell that is missing or did not finish ok, as ``r<k>-<side> <why>``."""
    bad = []
    for rnd in range(1, rounds + 1):
        sides = by_round.get(rnd, {})
        for s in roles:
            if s not in sides:
                bad.append(f"r{rnd}-{s} missing")
            elif sides[s].status not in (OK, FAILED_SHAPES):  # a failed shape costs itself, not the op's others
                bad.append(f"r{rnd}-{s} {'has no status row' if sides[s].status == NO_ROW else sides[s].status}")
            elif not identity_file(sides[s].cell_dir).exists():
                bad.append(f"r{rnd}-{s} has no {IDENTITY_FILE}: nothing says what its numbers mean")
    return bad


def _rounds_run(by_round: _CellsByRound, rounds: int, roles: tuple[str, ...]) -> int:
    """How many rounds, from round 1 on, have every role's cell: where a stopped campaign stopped."""
    for rnd in range(1, rounds + 1):
        if not all(role in by_round.get(rnd, {}) for role in roles):
            return rnd - 1
    return rounds


def _add_round(per_shape: dict[str, _ShapeRounds], results_a: dict[str, dict[str, Any]],
               results_b: dict[str, dict[str, Any]], results_control: dict[str, dict[str, Any]],
               mixed: set[str]) -> None:
    """One round's results into each shape's lists; shapes in ``mixed`` (timer differs) are left out.

    Shapes are taken in side A's file order, which is the campaign's declared order.
    """
    for shape in results_a:
        if shape in mixed or shape not in results_b:
            continue
        a, b = results_a[shape], results_b[shape]
        acc = per_shape.setdefault(shape, _ShapeRounds())
        a2 = results_control.get(shape)
        if a2 is not None and a2.get("timer") == a.get("timer"):
            acc.aa_log_ratios.append(math.log(a2["median_ms"] / a["median_ms"]))
            acc.noise_control.append(a2["cv"])
            acc.samples_control.append(a2["samples"])
        acc.a_ms.append(a["median_ms"])
        acc.b_ms.append(b["median_ms"])
        acc.log_ratios.append(math.log(b["median_ms"] / a["median_ms"]))
        acc.noise_a.append(a["cv"])
        acc.noise_b.append(b["cv"])
        acc.samples_a.append(a["samples"])
        acc.samples_b.append(b["samples"])
        acc.gpu.windows.append((a["windows"], b["windows"]))
        acc.gpu.energy.append((a["energy"], b["energy"]))
        acc.work = a["work"] or b["work"]


NO_COMMON_SHAPE = "no verdict: no shape has a result on both sides in every round"


def _read_rounds(rep: OpReport, by_round: _CellsByRound) -> dict[str, _ShapeRounds] | None:
    """Every shape's per-round values, one round's results in memory at a time.

    Shapes timed differently on the two sides go to ``rep.mixed_timer_shapes``;
    None (and ``rep.reason``) when a results file cannot be read.
    """
    per_shape: dict[str, _ShapeRounds] = {}
    failures: dict[str, dict[str, str]] = {}  # shape -> cell (r1-A) -> its status and error
    for rnd in range(1, rep.rounds_expected + 1):
        results: dict[str, dict[str, dict[str, Any]]] = {}
        for role in ("A", "B", CONTROL) if rep.control else ("A", "B"):
            cell = by_round[rnd][role]
            unreadable: list[str] = []
            failed: dict[str, str] = {}
            try:
                results[role] = read_results(cell.cell_dir, rep.regime, unreadable, failed)
            except OSError as exc:
                rep.reason = f"no verdict: {exc}"
                return None
            if unreadable:  # a damaged record costs its shape this round, not the op's other shapes
                rep.unreadable.setdefault(str(cell.key), []).extend(unreadable)
            for shape, error in failed.items():
                failures.setdefault(shape, {})[f"r{rnd}-{role}"] = error
        results_a, results_b, results_control = results["A"], results["B"], results.get(CONTROL, {})
        mixed = caliber.compare_shape_timers(rep.op, results_a, results_b)
        rep.mixed_timer_shapes += [f"r{rnd}: {m.text()}" for m in mixed]
        _add_round(per_shape, results_a, results_b, results_control, {m.shape for m in mixed})
    rep.failed_shapes = [failed_line(shape, cells) for shape, cells in failures.items()]
    return per_shape


def failed_line(shape: str, cells: dict[str, str]) -> str:
    """A failed shape in one line: which cells it failed in, and each distinct error once; the cells that left it
    out (``--skip-shapes``) are said apart."""
    skipped = [cell for cell, error in cells.items() if error.startswith(f"{SKIPPED}:")]
    failed = {cell: error for cell, error in cells.items() if cell not in skipped}
    errors = list(dict.fromkeys(failed.values()))
    if set(failed) == {"r1-A", "r1-B"} and len(errors) == 1:
        return f"{shape}: failed alike on both sides in round 1, so later rounds did not run it: {errors[0]}"
    said = [f"failed in {', '.join(failed)}: " + "; ".join(errors)] if failed else []
    if skipped:  # round 1 ran it again since (a resume) and it did not fail there: say why it has no verdict
        said.append(f"not run in {', '.join(skipped)}, where round 1 had failed it alike on both sides (start a new "
                    "root to time it in every round)")
    return f"{shape}: " + "; ".join(said)


def _pct_pair(ci: tuple[float, float] | None) -> tuple[float, float] | None:
    return (pct(ci[0]), pct(ci[1])) if ci else None


def _aa_rounds(values: _ShapeRounds, rounds: int) -> tuple[list[float], float] | None:
    """The shape's A/A log ratios and their spread floor, when every round has one; else None."""
    if len(values.aa_log_ratios) != rounds:
        return None
    return values.aa_log_ratios, spread_floor(values.median_se("A"), values.median_se(CONTROL))


def _shape_report(shape: str, values: _ShapeRounds, rounds: int, margin_pct: float, p_adjusted: float | None,
                  findings: list[Finding], aa_p_adjusted: float | None, alpha: float = ALPHA) -> ShapeReport:
    """A shape measured in every round: its deltas, intervals, noise, A/A interval, verdict and flags.

    ``aa_p_adjusted``: the A/A t-test's p after Benjamini-Hochberg across the op's shapes; a bias between
    processes is shown (and withholds directions no larger) only where it is below 5%.
    """
    deltas = [pct(x) for x in values.log_ratios]
    floor = spread_floor(values.median_se("A"), values.median_se("B"))
    aa = values.aa_log_ratios
    aa_full = _aa_rounds(values, rounds)
    aa_ci_pct = _pct_pair(interval(aa_full[0], floor=aa_full[1]) if aa_full else None)
    bias = aa_bias(aa_ci_pct) if aa_p_adjusted is not None and aa_p_adjusted < ALPHA else None
    judgement, flag_names = flags.apply(judge(values.log_ratios, p_adjusted, margin_pct, bias, floor, alpha),
                                        values.log_ratios, findings, margin_pct)
    return ShapeReport(
        shape=shape, rounds=len(deltas), a_ms=statistics.median(values.a_ms), b_ms=statistics.median(values.b_ms),
        delta_pct=statistics.median(deltas), delta_min_pct=min(deltas), delta_max_pct=max(deltas),
        ci_pct=_pct_pair(interval(values.log_ratios, floor=floor)),
        delta_spread_pct=stdev(deltas) if len(deltas) > 1 else 0.0,
        noise_within_a_pct=median_or_none(values.noise_a), noise_within_b_pct=median_or_none(values.noise_b),
        noise_across_a_pct=cv_pct(values.a_ms), noise_across_b_pct=cv_pct(values.b_ms),
        sign_flip=sign_flip(values.log_ratios), verdict=judgement.verdict, per_round_pct=deltas,
        margin_pct=margin_pct, ci90_pct=_pct_pair(interval(values.log_ratios, 1.0 - 2.0 * alpha, floor)),
        p_value=t_test_p(values.log_ratios, floor), p_adjusted=p_adjusted, within_margin=judgement.within_margin,
        note=judgement.note,
        aa_delta_pct=statistics.median(pct(x) for x in aa) if aa else None,
        aa_ci_pct=aa_ci_pct, aa_per_round_pct=[pct(x) for x in aa], aa_bias_pct=bias, aa_p_adjusted=aa_p_adjusted,
        flags=flag_names, spread_floor_pct=pct(floor), faster_rounds=sum(1 for x in values.log_ratios if x < 0),
        work=values.work,
    )


def _judge_shapes(rep: OpReport, per_shape: dict[str, _ShapeRounds], margin_pct: float) -> None:
    """A ShapeReport for each shape measured in every round, in declared order; the others are named in
    ``mixed_timer_shapes``.  The t-tests of the op's shapes are corrected together (Benjamini-Hochberg)."""
    judged = {}
    for shape, values in per_shape.items():
        measured = len(values.log_ratios)
        if measured != rep.rounds_expected:
            rep.mixed_timer_shapes.append(f"{shape}: measured in {measured} of {rep.rounds_expected} rounds")
            continue
        judged[shape] = values
    adjusted = bh_adjust([t_test_p(v.log_ratios, spread_floor(v.median_se("A"), v.median_se("B")))
                          for v in judged.values()])
    series = [values.series() for values in judged.values()]
    of_op = flags.op_findings(series, margin_pct)
    rep.findings = [f"{f.flag}: {f.text}" for f in of_op]
    aa_tests = [_aa_rounds(values, rep.rounds_expected) for values in judged.values()]
    aa_adjusted = bh_adjust([t_test_p(aa[0], aa[1]) if aa else None for aa in aa_tests])
    own_findings = flags.shape_findings(series, margin_pct)
    for (shape, values), p_adjusted, own, aa_p in zip(judged.items(), adjusted, own_findings, aa_adjusted):
        rep.shapes.append(_shape_report(shape, values, rep.rounds_expected, margin_pct, p_adjusted, of_op + own, aa_p,
                                        rep.alpha))
    rep.unsettled = [_margin_unsettled(s, margin_pct) for s in rep.shapes
                     if not sequential.shape_settled(s.verdict, s.ci90_pct, margin_pct)]
    for name in flags.FLAGS:
        carrying = sum(1 for s in rep.shapes if name in s.flags)
        if carrying:
            rep.flags[name] = carrying


def _op_geomean(rep: OpReport, per_shape: dict[str, _ShapeRounds]) -> None:
    """The op's geomean delta: per round the mean log ratio over its shapes, then the interval across rounds."""
    if not rep.shapes:
        return
    rounds = range(rep.rounds_expected)
    geo_rounds = [statistics.fmean(per_shape[s.shape].log_ratios[i] for s in rep.shapes) for i in rounds]
    rep.geomean_pct = pct(statistics.fmean(geo_rounds))
    rep.geomean_ci_pct = _pct_pair(interval(geo_rounds))
    # No op A/A interval unless every judged shape has an A/A ratio in every round: the rounds must line up.
    if rep.control and all(len(per_shape[s.shape].aa_log_ratios) == rep.rounds_expected for s in rep.shapes):
        aa_rounds = [statistics.fmean(per_shape[s.shape].aa_log_ratios[i] for s in rep.shapes) for i in rounds]
        rep.aa_geomean_ci_pct = _pct_pair(interval(aa_rounds))


# the status of a skipped round -> OpReport.stopped
_STOPPED_BY = {SETTLED: "settled", OVER_BUDGET: "budget", ALL_FAILED: "failed"}


def _auto_rounds(cells: list[CellOutcome], plan: CampaignPlan) -> tuple[int, str]:
    """The rounds an op ran, and why they ended (``OpReport.stopped``): before its first round skipped as not
    needed (settled or over the budget of an auto plan; every shape failed alike in round 1, any plan); else the
    cap of an auto plan, or ``(plan.rounds, "")`` for a fixed plan."""
    skipped = sorted((c.key.round, c.status) for c in cells if c.not_needed)
    if not skipped:
        return plan.rounds, "cap" if plan.auto else ""
    first, status = skipped[0]
    return max(1, first - 1), _STOPPED_BY[status]


def build_op(op: str, cells: list[CellOutcome], gate: irgate.GateDecision | None, plan: CampaignPlan,
             margin_pct: float, result: caliber.CaliberResult, allow_caliber_mismatch: bool = False,
             look: int | None = None, regime: str = "") -> OpReport:
    """One op's verdicts against its plan, ``margin_pct`` the equivalence margin of ``same``; ``gate`` is the
    op's IR-gate decision (None: none was made); from the records timed under ``regime`` ("": every record).

    ``look``: judge the op's first ``look`` rounds as a look of an auto plan (``settled_after``).
    """
    rep = _judged_op(op, cells, gate, plan, margin_pct, result, allow_caliber_mismatch, look, regime)
    if look is None:  # which kernel moved (ABBENCH_KERNEL_SPLIT): for the report, with or without a verdict
        rep.kernel_splits, notes = kernelsplit.op_splits(
            [c.cell_dir for c in cells if c.key.role == SIDES[0]], [c.cell_dir for c in cells if c.key.role == SIDES[1]],
            {s.shape: (s.a_ms, s.b_ms) for s in rep.shapes})
        rep.findings += notes
    return rep


def _judged_op(op: str, cells: list[CellOutcome], gate: irgate.GateDecision | None, plan: CampaignPlan,
               margin_pct: float, result: caliber.CaliberResult, allow_caliber_mismatch: bool,
               look: int | None, regime: str) -> OpReport:
    """``build_op``'s verdicts."""
    by_round: _CellsByRound = {}
    for c in cells:
        if look is None or c.key.round <= look:
            by_round.setdefault(c.key.round, {})[c.key.role] = c
    cells = [c for c in cells if look is None or c.key.round <= look]
    rounds_expected, stopped = (look, "") if look is not None else _auto_rounds(cells, plan)
    rep = OpReport(op, plan.ops.get(op, ""), 0, rounds_expected, "no_verdict",
                   alpha=sequential.look_alpha(rounds_expected, plan.auto_min, plan.rounds), regime=regime)
    rep.markers = _sum_markers(cells)
    if gate is not None:
        rep.gate = {"state": gate.state, "reason": gate.reason, "basis": gate.basis}
        rep.gate_lines = gate.headline()

    if cells and all(c.status == IR_ONLY for c in cells):
        rep.state = "ir_only"
        rep.reason = (f"IR triage only (nothing timed): {gate.reason}" if gate is not None
                      else "IR triage only: no gate decision (a side failed to compile)")
        return rep

    rep.control = plan.control
    op_result = _check_caliber(op, cells, by_round, rep.control)
    rep.caliber = [f.line() for f in op_result.findings]
    rep.caliber_mismatch = bool(op_result.mismatches)
    result.extend(op_result)
    if rep.caliber_mismatch and not allow_caliber_mismatch:
        rep.reason = ("no verdict: caliber mismatch (the !!! [caliber] lines above); the two sides' numbers mean "
                      "different things. --allow-caliber-mismatch reports them anyway")
        return rep

    skipped = _cells_skipped_by_gate(gate, cells, by_round)
    if skipped:
        rep.state = "no_ir_diff"
        timed = 0 if all(c.status == NO_IR_DIFF for c in by_round.get(1, {}).values()) else 1
        rep.rounds_completed = timed
        rep.reason = (f"switch changed no generated code; {count(rounds_expected - timed, 'round')} skipped "
                      f"({count(skipped, 'cell')})")
        return rep

    roles = plan.roles(1) if not rep.control else (*SIDES, CONTROL)
    bad = _incomplete_cells(by_round, rounds_expected, roles)
    rep.rounds_completed = _rounds_run(by_round, rounds_expected, roles)
    if rep.rounds_completed < rounds_expected:
        # Interrupted (Ctrl-C, -x, --maxfail, a crash): the rounds that ran must not read like a complete campaign.
        rep.reason = (f"stopped after round {rep.rounds_completed} of {rounds_expected}: no verdict "
                      f"({', '.join(bad)})")
        return rep
    if bad:
        planned = rounds_expected * len(roles)
        rep.reason = (f"no verdict: {len(bad)} of {planned} planned cells {'has' if len(bad) == 1 else 'have'} no "
                      f"result to compare: {', '.join(bad)}")
        return rep

    per_shape = _read_rounds(rep, by_round)
    if per_shape is None:
        return rep
    rep.rounds_completed = rounds_expected
    rep.state = "verdict"
    rep.stopped = stopped
    _judge_shapes(rep, per_shape, margin_pct)
    if not rep.shapes:  # every round ran, yet no shape has a result on both sides in every round
        rep.state = "no_verdict"
        rep.reason = (NO_COMMON_SHAPE
                      + (" (the sides' shape sets differ: the caliber lines above)" if rep.caliber_mismatch else
                         " (the lines below say why)" if rep.mixed_timer_shapes or rep.unreadable else ""))
        return rep
    _op_geomean(rep, per_shape)
    gpustate.summarise(rep, {shape: values.gpu for shape, values in per_shape.items()})
    rep.unsettled += _energy_unsettled(rep, plan.energy_target_pct)
    for name in flags.FLAGS:  # every flag, the GPU's included (gpustate.summarise adds those)
        carrying = sum(1 for s in rep.shapes if name in s.flags)
        if carrying:
            rep.flags[name] = carrying
    for shape_rep in rep.shapes:
        rep.verdicts[shape_rep.verdict] = rep.verdicts.get(shape_rep.verdict, 0) + 1
    rep.sign_flips = sum(1 for shape_rep in rep.shapes if shape_rep.sign_flip)
    return rep


def _margin_unsettled(s: ShapeReport, margin_pct: float) -> str:
    """An unsettled shape and the rule that holds it (``sequential.shape_settled``): ``shape (inconclusive, 90%
    interval 2.6 points wide > margin 2)``."""
    if s.ci90_pct is None:
        return f"{s.shape} ({s.verdict}, no interval)"
    width = s.ci90_pct[1] - s.ci90_pct[0]
    return f"{s.shape} ({s.verdict}, 90% interval {width:.1f} points wide > margin {margin_pct:g})"


def _energy_unsettled(rep: OpReport, target_pct: float | None) -> list[str]:
    """The shapes with a settled verdict whose energy per call interval is wider than ``target_pct``
    (``shape (energy per call +-9.9%)``): under --ab-rounds auto they add rounds too."""
    return [f"{s.shape} (energy per call +-{sequential.half_width(s.energy_ci_pct):.1f}% > +-{target_pct:g}%)"
            for s in rep.shapes if sequential.shape_settled(s.verdict, s.ci90_pct, s.margin_pct)
            and s.energy_ci_pct is not None and not sequential.energy_settled(s.energy_ci_pct, target_pct)]


def carried_source(path: str) -> str:
    """Where round 1 side A's carried configs came from, in the report's words."""
    if Path(path).name.startswith(KEPT_TUNING_PREFIX):
        return "side A's kernel cache, chosen by an earlier round 1 on its key, not tuned; --ab-retune tunes them"
    return f"{path}, not tuned"  # --ab-autotune-from's root


def autotune_pins_line(layout: RootLayout, op: str) -> str:
    """Which autotune keys the op's cells pinned from which side, e.g. ``autotune: 3 keys pinned from A, 1 key only
    side B has, pinned from r1-B``; "" when no key was pinned."""
    parts = []
    main = autotunerecord.read_record_or_none(layout.autotune_record(op))
    if main is not None and main.entries:
        parts.append(f"{count(len(main.entries), 'key')} pinned from A" + (
            f" ({main.carried} carried from {carried_source(main.carried_from)})" if main.carried else ""))
    for side in SIDES:
        path = layout.autotune_side_record(op, side)
        if not path.exists():
            continue
        try:
            record = autotunerecord.read_record(path)
        except (OSError, ValueError) as exc:
            parts.append(f"side {side}'s record unreadable ({exc})")
            continue
        if record.entries:
            parts.append(f"{count(len(record.entries), 'key')} only side {side} has, pinned from "
                         f"{record.recorded_by or 'side ' + side}")
    return f"autotune: {', '.join(parts)}" if parts else ""


@dataclass(frozen=True)
class Look:
    """One look of ``--ab-rounds auto`` at an op: its report under each regime it is timed under."""

    reports: list[OpReport]

    @property
    def judged(self) -> bool:
        """Every regime's report has verdicts."""
        return all(r.state == "verdict" for r in self.reports)

    @property
    def unsettled(self) -> list[str]:
        """The shapes not settled (``OpReport.unsettled``), ``regime: shape`` where the op is timed under more
        than one regime."""
        several = len(self.reports) > 1
        return [f"{r.regime}: {shape}" if several else shape for r in self.reports for shape in r.unsettled]

    @property
    def settled(self) -> bool:
        """The op needs no more rounds: settled under every regime it runs, or with no shape that every round has
        on both sides under one of them (a later round cannot add a shape to the rounds that lack it)."""
        return self.judged and not self.unsettled or any(r.reason.startswith(NO_COMMON_SHAPE) for r in self.reports)

    @property
    def reason(self) -> str:
        """Why a regime has no verdict ("" when every one has)."""
        return next((r.reason for r in self.reports if r.state != "verdict"), "")


def settled_after(root: Path, op: str, cells: Iterable[CellOutcome], plan: CampaignPlan, margin_pct: float | None,
                  rounds: int) -> Look:
    """``op`` judged on its first ``rounds`` rounds as a look of the auto ``plan``, under each regime its cells
    time (``report_regimes``: burst and steady apart under ``--ab-regime both``, as the report judges them): it is
    settled when it is settled under every one, its energy per call within ``plan.energy_target_pct`` included.  What
    the session asks before an op's next round, and the simulator.
    """
    mine = [c for c in cells if c.key.op == op and c.key.round <= rounds]
    gate = irgate.load_decision(root, op)
    margin = DEFAULT_MARGIN_PCT if margin_pct is None else margin_pct
    return Look([build_op(op, mine, gate, plan, margin, caliber.CaliberResult(), look=rounds, regime=regime)
                 for regime in report_regimes(_setup_facts(mine)["regime"])])


def _auto_summary(ops: list[OpReport], plan: CampaignPlan) -> dict[str, int]:
    """Report.auto_rounds: the looks' range, how many ops stopped how, and the rounds they ran."""
    if plan.auto_min is None:
        return {}
    judged = [o for o in ops if o.state == "verdict"]
    summary = {"first": plan.auto_min, "last": plan.rounds, "rounds_run": sum(o.rounds_completed for o in judged)}
    for why in ("settled", "cap", "budget"):
        summary[why] = sum(1 for o in judged if o.stopped == why)
    return summary


# What the report header names, read from identities: the text header the first five, report.html all of them.
SETUP_FIELDS = ("switch", "backend", "timer", "device", "regime", "bench_level", "triton", "torch", "driver")


def _setup_facts(cells: list[CellOutcome]) -> dict[str, str]:
    """``SETUP_FIELDS`` as the cells' identities record them; several values joined by ' | '."""
    seen: dict[str, list[str]] = {name: [] for name in SETUP_FIELDS}
    firsts: dict[tuple[str, str], Path] = {}
    for c in sorted(cells, key=lambda c: c.key.round):
        if c.measured:
            firsts.setdefault((c.key.op, c.key.role), c.cell_dir)  # one identity per op and side is enough
    for folder in firsts.values():
        identity, _ = caliber.load_identity(folder)
        for name in SETUP_FIELDS:
            value = str((identity or {}).get(name) or "")
            if value and value not in seen[name]:
                seen[name].append(value)
    return {name: " | ".join(values) or "unknown" for name, values in seen.items()}


def report_regimes(named: str) -> tuple[str, ...]:
    """The regimes an op is reported under, from the identities' ``regime``: both of them for ``both``, the one
    named, or "" (every record as one) for cells from before regimes or with regimes that differ (a caliber
    mismatch already)."""
    if named == BOTH:
        return REGIMES
    return (named,) if named in REGIMES else ("",)


def compare_regimes(ops: list[OpReport], margin_pct: float) -> None:
    """For each op reported under both regimes, say on both reports whether the regimes agree: the per-round
    difference of the two deltas (steady minus burst, over the shapes both judged), its mean and t-interval; they
    disagree where that mean is beyond the margin and its interval excludes zero, per op (geomean) and per shape,
    and agree where the op's interval lies inside the margin; otherwise the rounds cannot tell."""
    pairs: dict[str, dict[str, OpReport]] = {}
    for o in ops:
        if o.regime and o.state == "verdict":
            pairs.setdefault(o.op, {})[o.regime] = o
    margin = math.log1p(margin_pct / 100.0)
    for op, by_regime in pairs.items():
        if set(by_regime) != set(REGIMES):
            continue
        burst, steady = by_regime[BURST], by_regime[STEADY]
        steady_shapes = {s.shape: s for s in steady.shapes}
        common = [(b, steady_shapes[b.shape]) for b in burst.shapes if b.shape in steady_shapes]
        if not common:
            continue

        def differ(diffs: list[float]) -> tuple[bool, tuple[float, float] | None]:
            ci = interval(diffs)
            beyond = abs(statistics.fmean(diffs)) > margin and ci is not None and (ci[0] > 0 or ci[1] < 0)
            return beyond, ci

        def steady_minus_burst(bs: ShapeReport, ss: ShapeReport) -> list[float]:
            return [s - b for b, s in zip(bs.round_log_ratios(), ss.round_log_ratios())]

        per_round = [statistics.fmean(values) for values in zip(*[steady_minus_burst(bs, ss) for bs, ss in common])]
        beyond, ci = differ(per_round)
        shapes = [bs.shape for bs, ss in common if differ(steady_minus_burst(bs, ss))[0]]
        inside = ci is not None and -margin < ci[0] and ci[1] < margin
        head = (f"regimes disagree beyond the +-{margin_pct:g}% margin" if beyond or shapes
                else f"regimes agree within the +-{margin_pct:g}% margin" if inside
                else f"regimes: too few rounds to tell whether they differ by more than the +-{margin_pct:g}% margin")
        text = (f"{head}: geomean burst {burst.geomean_pct:+.1f}%, steady {steady.geomean_pct:+.1f}%; steady - burst "
                f"{pct(statistics.fmean(per_round)):+.1f} points"
                + (f" [{pct(ci[0]):+.1f} ~ {pct(ci[1]):+.1f}]" if ci else "")
                + (f"; shapes beyond it: {', '.join(shapes)}" if shapes else ""))
        burst.regimes_note = steady.regimes_note = text


def _gpu_timed(setup: dict[str, str]) -> bool:
    """Every cell timed on a GPU: no interpreter backend and no wall-clock timer (they say nothing about GPU speed)."""
    return setup["backend"] == "cuda" and "wall" not in setup["timer"].split(" | ") and setup["timer"] != "unknown"


def _gate(ops: list[OpReport], threshold_pct: float, scope: str) -> tuple[list[str], list[str]]:
    """What --ab-fail-if-slower trips on, as ``op`` (geomean scope) or ``op[geomean, shape, ...]``, and the shapes
    beyond the threshold it does not count (no plain ``slower``: a flag or the rounds withheld it).

    An op trips on its geomean when the op has a ``slower`` shape and the geomean's 95% interval lies above the
    threshold.  With the shapes scope a shape trips when it is ``slower`` and the one-sided t-test of its rounds
    above the threshold (at 2.5%: the lower end of its 95% interval) holds after Benjamini-Hochberg across the
    op's shapes whose delta lies beyond the threshold (``bh_adjust_beyond``: the shapes short of it cannot trip
    it falsely), the verdicts' own multiplicity control (docs/verdicts.md weighs it against one across the report).
    """
    judged = [o for o in ops if o.state == "verdict"]
    over_geomean = {o.op for o in judged
                    if o.geomean_ci_pct and o.geomean_ci_pct[0] > threshold_pct and o.verdicts.get("slower")}
    if scope == GATE_GEOMEAN:
        return [o.op for o in judged if o.op in over_geomean], []
    bound = math.log1p(threshold_pct / 100.0)
    slower, held = [], []
    for o in judged:
        adjusted = bh_adjust_beyond([t_test_above_p(s.round_log_ratios(), bound, s.spread_floor_log())
                                     for s in o.shapes])
        over = [s for s, p in zip(o.shapes, adjusted) if p is not None and p < ALPHA / 2.0]
        names = (["geomean"] if o.op in over_geomean else []) + [s.shape for s in over if s.verdict == "slower"]
        if names:
            slower.append(f"{o.op}[{', '.join(names)}]")
        held += [f"{o.op}[{s.shape}] ({s.verdict}{' [' + ', '.join(s.flags) + ']' if s.flags else ''})"
                 for s in over if s.verdict != "slower"]
    return slower, held


def build_report(root: Path, outcomes: Iterable[CellOutcome] | None = None, plan: CampaignPlan | None = None,
                 margin_pct: float | None = None, fail_if_slower_pct: float | None = None,
                 allow_caliber_mismatch: bool = False, wall_s: float | None = None, workers: int = 1,
                 gate: str = GATE_SHAPES,
                 gate_of: Callable[[str], irgate.GateDecision | None] | None = None) -> Report:
    """The report of ``root`` judged against ``plan``: of ``outcomes`` (a session's cells), else of every row and
    folder on disk; without a plan, the one in the root's campaign.json.

    ``fail_if_slower_pct`` names what trips the gate in ``slower_ops`` (``_gate``; ``gate`` is --ab-gate's
    scope).  ``wall_s`` (a live session's wall time over ``workers`` workers) adds idle time to ``time_spent``.
    ``gate_of`` gives an op's IR-gate decision; by default the one saved in ``root``.
    """
    problems: list[str] = []
    layout = RootLayout(root)
    cells = list(outcomes) if outcomes is not None else discover(layout, problems)
    if plan is None:
        plan = plan_of(layout, cells, problems)
    by_op: dict[str, list[CellOutcome]] = {op: [] for op in plan.ops}
    for c in sorted(cells, key=lambda c: (c.key.op, c.key.round, c.key.role)):
        by_op.setdefault(c.key.op, []).append(c)
    result = caliber.CaliberResult()
    if gate_of is None:
        gate_of = functools.partial(irgate.load_decision, root)
    setup = _setup_facts(cells)
    margin = DEFAULT_MARGIN_PCT if margin_pct is None else margin_pct
    ops = []
    for op, op_cells in sorted(by_op.items()):
        for index, regime in enumerate(report_regimes(setup["regime"])):
            # The caliber findings are the cells', the same under every regime: counted once.
            ops.append(build_op(op, op_cells, gate_of(op), plan, margin,
                                result if index == 0 else caliber.CaliberResult(), allow_caliber_mismatch,
                                regime=regime))
            ops[-1].autotune = autotune_pins_line(RootLayout(root), op)
    compare_regimes(ops, margin)
    reference.apply(ops, root, problems)  # --ab-reference: beside the verdicts, never changing one
    peak.apply(ops, setup["device"])
    for o in ops:
        o.switch = " | ".join(dict.fromkeys(c.switch for c in by_op[o.op] if c.switch))
    gpu_timed = _gpu_timed(setup)
    slower: list[str] = []
    held: list[str] = []
    if fail_if_slower_pct is not None and gpu_timed:
        slower, held = _gate(ops, fail_if_slower_pct, gate)
    source = "--ab-margin" if margin_pct is not None else "default"
    planned = {key for op in by_op for key in plan.cells(op)}
    ran = {c.key for c in cells}
    failed = failed_cell_names(cells)
    # A cell whose results cannot all be read finished, but some of what it measured is lost: not a clean run.
    failed += sorted({cell + UNREADABLE_SUFFIX for o in ops for cell in o.unreadable if cell not in failed})
    return Report(SCHEMA_VERSION, str(root), margin, source, ops, [f.line() for f in result.findings],
                  bool(result.mismatches), slower, problems, complete=planned <= ran, failed_cells=failed,
                  rounds_planned=plan.rounds, setup=setup, gpu_timed=gpu_timed,
                  time_spent=cost.time_spent(cells, wall_s, workers), gate_scope=gate, gate_held=held,
                  auto_rounds=_auto_summary(ops, plan), allow_caliber_mismatch=allow_caliber_mismatch,
                  fail_if_slower_pct=fail_if_slower_pct if gpu_timed else None)
