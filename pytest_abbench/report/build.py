"""A root's cells read into a Report: which cells exist, caliber first, then each shape's round deltas.

Results are read one round at a time and reduced as they are read, so
memory stays flat in the number of rounds.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, TypeAlias

from pytest_abbench import caliber, irgate
from pytest_abbench.campaign import SIDES
from pytest_abbench.fileio import CorruptFileError, iter_jsonl
from pytest_abbench.markers import MARKERS, count_markers
from pytest_abbench.options import DEFAULT_MARGIN_PCT
from pytest_abbench.report.model import SCHEMA_VERSION, OpReport, Report, ShapeReport
from pytest_abbench.report.stats import (cv_pct, floor_margin, interval, median_or_none, pct, robust_cv, stdev,
                                         verdict)
from pytest_abbench.status import StatusFormatError, read_status

IR_ONLY = "IR_ONLY"  # status word of an --ab-ir-only cell: compiled for the target, timed nothing
_CELL_DIR = re.compile(r"^r(\d+)_(A|B|A2)$")
CONTROL = "A2"


@dataclass
class _Cell:
    round: int
    op: str
    side: str
    folder: Path
    status: str | None  # from status.tsv / the session; None when no row exists
    markers: dict[str, int] | None = None  # the row's marker counts; None: count them in run.log


def _discover(root: Path, expected: Iterable[dict[str, Any]] | None, problems: list[str]) -> list[_Cell]:
    """The cells to report on: those the session ran, or every row/folder of an offline root."""
    cells: dict[tuple[int, str, str], _Cell] = {}
    if expected is not None:
        for rec in expected:
            key = (int(rec["round"]), rec["op"], rec["side"])
            cells[key] = _Cell(key[0], key[1], key[2], Path(rec["cell_dir"]), rec["status"], rec.get("markers"))
        return sorted(cells.values(), key=lambda c: (c.op, c.round, c.side))
    try:
        rows = read_status(root)
    except StatusFormatError as exc:
        problems.append(str(exc))
        rows = []
    for row in rows:
        cells[(row.round, row.op, row.side)] = _Cell(row.round, row.op, row.side,
                                                     root / f"r{row.round}_{row.side}" / row.op, row.status,
                                                     {m: getattr(row, m) for m in MARKERS})
    for sub in sorted(root.iterdir()) if root.is_dir() else []:
        m = _CELL_DIR.match(sub.name)
        if not m or not sub.is_dir():
            continue
        for op_dir in sorted(p for p in sub.iterdir() if p.is_dir()):
            key = (int(m.group(1)), op_dir.name, m.group(2))
            if key not in cells:
                problems.append(f"{op_dir}: cell folder without a status.tsv row (crashed or still running)")
                cells[key] = _Cell(key[0], key[1], key[2], op_dir, None)
    return sorted(cells.values(), key=lambda c: (c.op, c.round, c.side))


def read_results(folder: Path) -> dict[str, dict[str, Any]]:
    """shape -> {median_ms, timer, cv}; samples are reduced here so memory stays flat in rounds."""
    out: dict[str, dict[str, Any]] = {}
    for rec in iter_jsonl(folder / "results.jsonl"):
        if rec.get("status") != "ok" or not rec.get("median_ms"):
            continue
        out[rec["shape"]] = {"median_ms": float(rec["median_ms"]), "timer": rec.get("timer"),
                             "cv": robust_cv([float(x) for x in rec.get("samples_ms") or []])}
    return out


_CellsByRound: TypeAlias = dict[int, dict[str, _Cell]]  # round -> side -> cell


@dataclass
class _ShapeRounds:
    """One shape's values, one entry per round it was comparable in, in round order."""

    a_ms: list[float] = field(default_factory=list)  # side A's median
    b_ms: list[float] = field(default_factory=list)  # side B's median
    log_ratios: list[float] = field(default_factory=list)  # ln(B/A)
    noise_a: list[float | None] = field(default_factory=list)  # side A's within-cell robust CV (None: < 3 samples)
    noise_b: list[float | None] = field(default_factory=list)
    aa_log_ratios: list[float] = field(default_factory=list)  # ln(A2/A), only rounds where A2 used A's timer


def _sum_markers(cells: list[_Cell]) -> dict[str, int]:
    """Each marker's count over the op's cells."""
    totals: dict[str, int] = {}
    for c in cells:
        # The status row counted them when the cell finished; re-reading a 200 MB log is for rowless folders.
        counts = c.markers if c.markers is not None else count_markers(c.folder / "run.log")
        for marker, n in counts.items():
            totals[marker] = totals.get(marker, 0) + n
    return totals


def _check_caliber(op: str, cells: list[_Cell], by_round: _CellsByRound, control: bool) -> caliber.CaliberResult:
    """Every round's identities against their partners', before a single latency is parsed."""
    found = caliber.CaliberResult()
    ran = {(c.round, c.side): c.folder for c in cells if c.status != irgate.NO_IR_DIFF}
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
    return found


def _cells_skipped_by_gate(gate: irgate.GateDecision | None, cells: list[_Cell], by_round: _CellsByRound) -> int:
    """Cells the IR gate skipped because round 1 finished and changed no code; 0: the rounds are to be read."""
    round1 = by_round.get(1, {})
    round1_ok = all(round1[s].status == "ok" for s in SIDES if s in round1)
    skipped = sum(1 for c in cells if c.status == irgate.NO_IR_DIFF)
    return skipped if gate is not None and gate.state == "no_diff" and round1_ok else 0


def _incomplete_cells(by_round: _CellsByRound, rounds: int, roles: tuple[str, ...]) -> list[str]:
    """Each expected cell that is missing or did not finish ok, as ``r<k>-<side> <why>``."""
    bad = []
    for rnd in range(1, rounds + 1):
        sides = by_round.get(rnd, {})
        for s in roles:
            if s not in sides:
                bad.append(f"r{rnd}-{s} missing")
            elif sides[s].status != "ok":
                bad.append(f"r{rnd}-{s} {sides[s].status or 'has no status row'}")
    return bad


def _add_round(per_shape: dict[str, _ShapeRounds], results_a: dict[str, dict[str, Any]],
               results_b: dict[str, dict[str, Any]], results_control: dict[str, dict[str, Any]],
               mixed: set[str]) -> None:
    """One round's results into each shape's lists; shapes in ``mixed`` (timer differs) are left out."""
    for shape in results_a.keys() & results_b.keys():
        if shape in mixed:
            continue
        a, b = results_a[shape], results_b[shape]
        acc = per_shape.setdefault(shape, _ShapeRounds())
        a2 = results_control.get(shape)
        if a2 is not None and a2.get("timer") == a.get("timer"):
            acc.aa_log_ratios.append(math.log(a2["median_ms"] / a["median_ms"]))
        acc.a_ms.append(a["median_ms"])
        acc.b_ms.append(b["median_ms"])
        acc.log_ratios.append(math.log(b["median_ms"] / a["median_ms"]))
        acc.noise_a.append(a["cv"])
        acc.noise_b.append(b["cv"])


def _read_rounds(rep: OpReport, by_round: _CellsByRound) -> dict[str, _ShapeRounds] | None:
    """Every shape's per-round values, one round's results in memory at a time.

    Shapes timed differently on the two sides go to ``rep.mixed_timer_shapes``;
    None (and ``rep.reason``) when a results file cannot be read.
    """
    per_shape: dict[str, _ShapeRounds] = {}
    for rnd in range(1, rep.rounds_expected + 1):
        try:
            results_a = read_results(by_round[rnd]["A"].folder)
            results_b = read_results(by_round[rnd]["B"].folder)
            results_control = read_results(by_round[rnd][CONTROL].folder) if rep.control else {}
        except (CorruptFileError, OSError) as exc:
            rep.reason = f"no verdict: {exc}"
            return None
        mixed = caliber.compare_shape_timers(rep.op, results_a, results_b)
        rep.mixed_timer_shapes += [f"r{rnd}: {m.text()}" for m in mixed]
        _add_round(per_shape, results_a, results_b, results_control, {m.shape for m in mixed})
    return per_shape


def _pct_pair(ci: tuple[float, float] | None) -> tuple[float, float] | None:
    return (pct(ci[0]), pct(ci[1])) if ci else None


def _shape_report(shape: str, values: _ShapeRounds, rounds: int, margin_pct: float | None) -> ShapeReport:
    """A shape measured in every round: its deltas, interval, noise, A/A floor and verdict."""
    deltas = [pct(x) for x in values.log_ratios]
    ci = interval(values.log_ratios)
    aa = values.aa_log_ratios
    aa_ci_pct = _pct_pair(interval(aa) if len(aa) == rounds else None)
    shape_margin = margin_pct if margin_pct is not None else (floor_margin(aa_ci_pct) or DEFAULT_MARGIN_PCT)
    return ShapeReport(
        shape=shape, rounds=len(deltas), a_ms=statistics.median(values.a_ms), b_ms=statistics.median(values.b_ms),
        delta_pct=statistics.median(deltas), delta_min_pct=min(deltas), delta_max_pct=max(deltas),
        ci_pct=_pct_pair(ci),
        delta_spread_pct=stdev(deltas) if len(deltas) > 1 else 0.0,
        noise_within_a_pct=median_or_none(values.noise_a), noise_within_b_pct=median_or_none(values.noise_b),
        noise_across_a_pct=cv_pct(values.a_ms), noise_across_b_pct=cv_pct(values.b_ms),
        sign_flip=not (all(x > 0 for x in deltas) or all(x < 0 for x in deltas)),
        verdict=verdict(ci, deltas, shape_margin), per_round_pct=deltas, margin_pct=shape_margin,
        aa_delta_pct=statistics.median(pct(x) for x in aa) if aa else None,
        aa_ci_pct=aa_ci_pct, aa_per_round_pct=[pct(x) for x in aa],
    )


def _judge_shapes(rep: OpReport, per_shape: dict[str, _ShapeRounds], margin_pct: float | None) -> None:
    """A ShapeReport for each shape measured in every round; the others are named in ``mixed_timer_shapes``."""
    for shape in sorted(per_shape):
        measured = len(per_shape[shape].log_ratios)
        if measured != rep.rounds_expected:
            rep.mixed_timer_shapes.append(f"{shape}: measured in {measured} of {rep.rounds_expected} rounds")
            continue
        rep.shapes.append(_shape_report(shape, per_shape[shape], rep.rounds_expected, margin_pct))


def _op_geomean(rep: OpReport, per_shape: dict[str, _ShapeRounds]) -> None:
    """The op's geomean delta: per round the mean log ratio over its shapes, then the interval across rounds."""
    if not rep.shapes:
        return
    rounds = range(rep.rounds_expected)
    geo_rounds = [statistics.fmean(per_shape[s.shape].log_ratios[i] for s in rep.shapes) for i in rounds]
    rep.geomean_pct = pct(statistics.fmean(geo_rounds))
    rep.geomean_ci_pct = _pct_pair(interval(geo_rounds))
    # No op floor unless every judged shape has an A/A ratio in every round: the rounds must line up.
    if rep.control and all(len(per_shape[s.shape].aa_log_ratios) == rep.rounds_expected for s in rep.shapes):
        aa_rounds = [statistics.fmean(per_shape[s.shape].aa_log_ratios[i] for s in rep.shapes) for i in rounds]
        rep.aa_geomean_ci_pct = _pct_pair(interval(aa_rounds))


def build_op(op: str, cells: list[_Cell], root: Path, margin_pct: float | None, result: caliber.CaliberResult,
             allow_caliber_mismatch: bool = False) -> OpReport:
    """One op's verdicts; ``margin_pct`` None means: the A/A floor where measured, else the default."""
    by_round: _CellsByRound = {}
    for c in cells:
        by_round.setdefault(c.round, {})[c.side] = c
    rounds_expected = max(by_round)
    rep = OpReport(op, "", 0, rounds_expected, "no_verdict")
    rep.markers = _sum_markers(cells)
    gate = irgate.load_decision(root, op)
    if gate is not None:
        rep.gate = {"state": gate.state, "reason": gate.reason}
        rep.gate_lines = gate.headline()

    if cells and all(c.status == IR_ONLY for c in cells):
        rep.state = "ir_only"
        rep.reason = (f"IR triage only (nothing timed): {gate.reason}" if gate is not None
                      else "IR triage only: no gate decision (a side failed to compile)")
        return rep

    rep.control = any(c.side == CONTROL for c in cells)
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
        rep.rounds_completed = 1
        rep.reason = f"switch changed no generated code; {rounds_expected - 1} rounds skipped ({skipped} cells)"
        return rep

    bad = _incomplete_cells(by_round, rounds_expected, (*SIDES, CONTROL) if rep.control else SIDES)
    if bad:
        rep.reason = "no verdict: a report missing rounds reads exactly like a complete one (" + ", ".join(bad) + ")"
        return rep

    per_shape = _read_rounds(rep, by_round)
    if per_shape is None:
        return rep
    rep.rounds_completed = rounds_expected
    rep.state = "verdict"
    _judge_shapes(rep, per_shape, margin_pct)
    _op_geomean(rep, per_shape)
    for shape_rep in rep.shapes:
        rep.verdicts[shape_rep.verdict] = rep.verdicts.get(shape_rep.verdict, 0) + 1
    rep.sign_flips = sum(1 for shape_rep in rep.shapes if shape_rep.sign_flip)
    return rep


def build_report(root: Path, settings: Any = None, expected: Iterable[dict[str, Any]] | None = None,
                 margin_pct: float | None = None, fail_if_slower_pct: float | None = None,
                 allow_caliber_mismatch: bool = False) -> Report:
    """The report of ``root``: of the cells in ``expected`` (the session's records), else of every row and folder.

    Explicit arguments win over ``settings``; ``fail_if_slower_pct`` names the ops in ``slower_ops``.
    """
    if settings is not None:
        allow_caliber_mismatch = allow_caliber_mismatch or settings.allow_caliber_mismatch
        margin_pct = settings.margin_pct if margin_pct is None else margin_pct
        fail_if_slower_pct = settings.fail_if_slower_pct if fail_if_slower_pct is None else fail_if_slower_pct
    problems: list[str] = []
    cells = _discover(root, expected, problems)
    by_op: dict[str, list[_Cell]] = {}
    for c in cells:
        by_op.setdefault(c.op, []).append(c)
    result = caliber.CaliberResult()
    ops = [build_op(op, op_cells, root, margin_pct, result, allow_caliber_mismatch) for op, op_cells in sorted(by_op.items())]
    slower = []
    if fail_if_slower_pct is not None:
        for o in ops:
            if o.state == "verdict" and o.geomean_ci_pct and o.geomean_ci_pct[0] > fail_if_slower_pct \
                    and o.verdicts.get("slower"):
                slower.append(o.op)
    if margin_pct is not None:
        source = "--ab-margin"
    elif any(o.control for o in ops):
        source = "A/A floor per shape (ops without a control: default)"
    else:
        source = "default (no A/A control measured)"
    margin = DEFAULT_MARGIN_PCT if margin_pct is None else margin_pct
    return Report(SCHEMA_VERSION, str(root), margin, source, ops, [f.line() for f in result.findings],
                  bool(result.mismatches), slower, problems)
