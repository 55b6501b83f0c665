"""A root's cells read into a Report: which cells exist, caliber first, then each shape's round deltas.

Results are read one round at a time and reduced as they are read, so
memory stays flat in the number of rounds.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

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


def build_op(op: str, cells: list[_Cell], root: Path, margin_pct: float | None, result: caliber.CaliberResult,
             allow_caliber_mismatch: bool = False) -> OpReport:
    """One op's verdicts; ``margin_pct`` None means: the A/A floor where measured, else the default."""
    by_round: dict[int, dict[str, _Cell]] = {}
    for c in cells:
        by_round.setdefault(c.round, {})[c.side] = c
    rounds_expected = max(by_round)
    rep = OpReport(op, "", 0, rounds_expected, "no_verdict")
    for c in cells:
        # The status row counted them when the cell finished; re-reading a 200 MB log is for rowless folders.
        counts = c.markers if c.markers is not None else count_markers(c.folder / "run.log")
        for marker, n in counts.items():
            rep.markers[marker] = rep.markers.get(marker, 0) + n
    gate = irgate.load_decision(root, op)
    if gate is not None:
        rep.gate = {"state": gate.state, "reason": gate.reason}
        rep.gate_lines = gate.headline()

    if cells and all(c.status == IR_ONLY for c in cells):
        rep.state = "ir_only"
        rep.reason = (f"IR triage only (nothing timed): {gate.reason}" if gate is not None
                      else "IR triage only: no gate decision (a side failed to compile)")
        return rep

    # Caliber first: every round's identities, before a single latency is parsed.
    op_result = caliber.CaliberResult()
    control = any(c.side == CONTROL for c in cells)
    rep.control = control
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
                op_result.extend(caliber.compare_identities(op, dir_a, dir_b, load))
    rep.caliber = [f.line() for f in op_result.findings]
    rep.caliber_mismatch = bool(op_result.mismatches)
    result.extend(op_result)
    if rep.caliber_mismatch and not allow_caliber_mismatch:
        rep.reason = ("no verdict: caliber mismatch (the !!! [caliber] lines above); the two sides' numbers mean "
                      "different things. --allow-caliber-mismatch reports them anyway")
        return rep

    round1 = by_round.get(1, {})
    round1_bad = [f"r1-{s} {round1[s].status}" for s in SIDES if s in round1 and round1[s].status != "ok"]
    skipped = sum(1 for c in cells if c.status == irgate.NO_IR_DIFF)
    if gate is not None and gate.state == "no_diff" and not round1_bad and skipped:
        rep.state = "no_ir_diff"
        rep.rounds_completed = 1
        rep.reason = f"switch changed no generated code; {rounds_expected - 1} rounds skipped ({skipped} cells)"
        return rep

    roles = (*SIDES, CONTROL) if control else SIDES
    bad = []
    for rnd in range(1, rounds_expected + 1):
        sides = by_round.get(rnd, {})
        for s in roles:
            if s not in sides:
                bad.append(f"r{rnd}-{s} missing")
            elif sides[s].status != "ok":
                bad.append(f"r{rnd}-{s} {sides[s].status or 'has no status row'}")
    if bad:
        rep.reason = "no verdict: a report missing rounds reads exactly like a complete one (" + ", ".join(bad) + ")"
        return rep

    per_shape: dict[str, dict[str, list[Any]]] = {}
    for rnd in range(1, rounds_expected + 1):
        try:
            ra = read_results(by_round[rnd]["A"].folder)
            rb = read_results(by_round[rnd]["B"].folder)
            ra2 = read_results(by_round[rnd][CONTROL].folder) if control else {}
        except (CorruptFileError, OSError) as exc:
            rep.reason = f"no verdict: {exc}"
            return rep
        mixed = caliber.compare_shape_timers(op, ra, rb)
        rep.mixed_timer_shapes += [f"r{rnd}: {m.text()}" for m in mixed]
        mixed_ids = {m.shape for m in mixed}
        for shape in ra.keys() & rb.keys():
            if shape in mixed_ids:
                continue
            d = per_shape.setdefault(shape, {"a": [], "b": [], "lr": [], "cva": [], "cvb": [], "aa": []})
            if shape in ra2 and ra2[shape].get("timer") == ra[shape].get("timer"):
                d["aa"].append(math.log(ra2[shape]["median_ms"] / ra[shape]["median_ms"]))
            d["a"].append(ra[shape]["median_ms"])
            d["b"].append(rb[shape]["median_ms"])
            d["lr"].append(math.log(rb[shape]["median_ms"] / ra[shape]["median_ms"]))
            d["cva"].append(ra[shape]["cv"])
            d["cvb"].append(rb[shape]["cv"])
    rep.rounds_completed = rounds_expected
    rep.state = "verdict"
    per_round_geo: list[list[float]] = [[] for _ in range(rounds_expected)]
    for shape in sorted(per_shape):
        d = per_shape[shape]
        if len(d["lr"]) != rounds_expected:
            rep.mixed_timer_shapes.append(f"{shape}: measured in {len(d['lr'])} of {rounds_expected} rounds")
            continue
        deltas = [pct(x) for x in d["lr"]]
        ci = interval(d["lr"])
        aa_ci = interval(d["aa"]) if len(d["aa"]) == rounds_expected else None
        aa_ci_pct = (pct(aa_ci[0]), pct(aa_ci[1])) if aa_ci else None
        shape_margin = margin_pct if margin_pct is not None else (floor_margin(aa_ci_pct) or DEFAULT_MARGIN_PCT)
        sr = ShapeReport(
            shape=shape, rounds=len(deltas), a_ms=statistics.median(d["a"]), b_ms=statistics.median(d["b"]),
            delta_pct=statistics.median(deltas), delta_min_pct=min(deltas), delta_max_pct=max(deltas),
            ci_pct=(pct(ci[0]), pct(ci[1])) if ci else None,
            delta_spread_pct=stdev(deltas) if len(deltas) > 1 else 0.0,
            noise_within_a_pct=median_or_none(d["cva"]), noise_within_b_pct=median_or_none(d["cvb"]),
            noise_across_a_pct=cv_pct(d["a"]), noise_across_b_pct=cv_pct(d["b"]),
            sign_flip=not (all(x > 0 for x in deltas) or all(x < 0 for x in deltas)),
            verdict=verdict(ci, deltas, shape_margin), per_round_pct=deltas, margin_pct=shape_margin,
            aa_delta_pct=statistics.median(pct(x) for x in d["aa"]) if d["aa"] else None,
            aa_ci_pct=aa_ci_pct, aa_per_round_pct=[pct(x) for x in d["aa"]],
        )
        rep.shapes.append(sr)
        for i, lr in enumerate(d["lr"]):
            per_round_geo[i].append(lr)
    if rep.shapes:
        geo_rounds = [statistics.fmean(r) for r in per_round_geo if r]
        rep.geomean_pct = pct(statistics.fmean(geo_rounds))
        ci = interval(geo_rounds)
        rep.geomean_ci_pct = (pct(ci[0]), pct(ci[1])) if ci else None
        if control and all(len(per_shape[sr.shape]["aa"]) == rounds_expected for sr in rep.shapes):
            aa_rounds = [statistics.fmean(per_shape[sr.shape]["aa"][i] for sr in rep.shapes)
                         for i in range(rounds_expected)]
            aa_ci = interval(aa_rounds)
            rep.aa_geomean_ci_pct = (pct(aa_ci[0]), pct(aa_ci[1])) if aa_ci else None
    for shape_rep in rep.shapes:
        rep.verdicts[shape_rep.verdict] = rep.verdicts.get(shape_rep.verdict, 0) + 1
    rep.sign_flips = sum(1 for shape_rep in rep.shapes if shape_rep.sign_flip)
    return rep


def build_report(root: Path, settings: Any = None, expected: Iterable[dict[str, Any]] | None = None,
                 margin_pct: float | None = None, fail_if_slower_pct: float | None = None,
                 allow_caliber_mismatch: bool = False) -> Report:
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
