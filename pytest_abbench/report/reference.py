"""The in-process reference (``--ab-reference``) beside each shape's verdict, read from reference.jsonl.

Per shape: the median over its pairs of B/A-1 and the t-interval of the
pairs' log ratios; the flag ``reference_differs`` where that median lies
outside the cells' 95% interval.  The flag keeps the verdict: the cells time
each side in processes of its own, the cost a user of either side pays; the
reference times both in one process, side by side on one card (at a power cap
each side's windows after its own side's settling, as in a cell), so a difference is
a bias between processes, worth a look and no reason to doubt the cells'
direction by itself (docs/verdicts.md, "The in-process reference").  Per op:
one line saying what the reference gave, that its process crashed or timed
out, or why the switch allows none.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from pytest_abbench.core.fileio import CorruptFileError
from pytest_abbench.core.layout import RootLayout
from pytest_abbench.core.reference import OpReference, ShapeReference, read_reference
from pytest_abbench.core.wording import count
from pytest_abbench.report import flags
from pytest_abbench.report.model import OpReport, ShapeReport
from pytest_abbench.report.stats import interval, pct

WHICH_TO_BELIEVE = ("the cells time each side in its own processes, each at the clock its own load settles to, the "
                    "cost a user of either side pays; the reference both in one process, side by side on one card "
                    "(at a power cap each side's windows after its own side's settling): a difference is worth a "
                    "look, and the clocks and times that follow say whether the cap explains it and which side's "
                    "time moved")


def apply(ops: list[OpReport], root: Path, problems: list[str]) -> None:
    """Put the root's reference records on its ops and shapes; an unreadable file is one problem line, and no
    verdict changes either way."""
    try:
        found = read_reference(RootLayout(root).reference)
    except (CorruptFileError, OSError) as exc:
        problems.append(f"{exc}: the in-process reference (--ab-reference) is left out of this report")
        return
    for o in ops:
        op_reference = found.get(o.op)
        if op_reference is not None:
            apply_op(o, op_reference)


def _shape_rows(o: OpReport, found: OpReference, shape: str) -> ShapeReference | None:
    """The shape's records under the op's regime (any regime for a report from before regimes)."""
    if o.regime:
        return found.shapes.get((shape, o.regime))
    return next((r for (name, _), r in found.shapes.items() if name == shape), None)


def apply_shape(s: ShapeReport, rows: ShapeReference | None) -> bool:
    """The shape's reference delta, interval and flag; True when it has a delta."""
    if rows is None:
        s.reference_note = "no reference row (its process ended first)"
        return False
    if rows.error is not None:
        s.reference_note = f"reference failed: {rows.error}"
        return False
    if len(set(rows.timers.values())) > 1:
        timers = ", ".join(f"{side} {timer}" for side, timer in sorted(rows.timers.items()))
        s.reference_note = f"reference timed the sides with different timers ({timers}): not compared"
        return False
    timed = rows.timed_pairs
    ratios = rows.log_ratios
    if not timed:
        s.reference_note = "reference has no pair"
        return False
    s.reference_per_pair_pct = [pct(x) for x in ratios]
    s.reference_clocks_mhz = dict(rows.clocks_mhz)
    s.reference_settled_alone = None if rows.settled_alone is None else list(rows.settled_alone)
    s.reference_ms = {"A": statistics.median(a for a, _ in timed), "B": statistics.median(b for _, b in timed)}
    s.reference_delta_pct = pct(statistics.median(ratios))
    ci = interval(ratios)
    s.reference_ci_pct = (pct(ci[0]), pct(ci[1])) if ci else None
    if s.ci_pct is not None and not s.ci_pct[0] <= s.reference_delta_pct <= s.ci_pct[1]:
        s.flags = flags.ordered({*s.flags, flags.REFERENCE_DIFFERS})
    return True


def differs_note(s: ShapeReport) -> str:
    """Where a differing shape's sides stood in the pairs and in the cells: each side's SM clock (a power cap's
    controller follows the load around it) and time per call, e.g. ``rows=8192,cols=4096: SM clock in the pairs
    A 1980 / B 1980 MHz, in the cells A 1980 / B 1980 MHz; time per call in the pairs A 0.0644 / B 0.0468 ms, in the
    cells A 0.0585 / B 0.0467 ms (A +10.1%, B +0.2% in the pairs)``.  The times name the side whose own cost moved
    between one process and the cells' processes; each part is left out where a side lacks its figure."""
    parts = []
    cells = {side: (s.gpu.get(side) or {}).get("sm_clock_mhz") for side in ("A", "B")}
    pairs = s.reference_clocks_mhz
    if all(cells[side] is not None and side in pairs for side in ("A", "B")):
        parts.append(f"SM clock in the pairs A {pairs['A']:.0f} / B {pairs['B']:.0f} MHz, in the cells "
                     f"A {cells['A']:.0f} / B {cells['B']:.0f} MHz")
    ref, cell_ms = s.reference_ms, {"A": s.a_ms, "B": s.b_ms}
    if all(side in ref and cell_ms[side] > 0 for side in ("A", "B")):
        moved = ", ".join(f"{side} {(ref[side] / cell_ms[side] - 1) * 100:+.1f}%" for side in ("A", "B"))
        parts.append(f"time per call in the pairs A {ref['A']:.4g} / B {ref['B']:.4g} ms, in the cells "
                     f"A {s.a_ms:.4g} / B {s.b_ms:.4g} ms ({moved} in the pairs)")
    return f"{s.shape}: {'; '.join(parts)}" if parts else ""


def apply_op(o: OpReport, found: OpReference) -> None:
    """One op's reference: its shapes' deltas and flags, and the line that sums them up."""
    if found.not_applicable is not None:
        o.reference = f"reference (--ab-reference): does not apply: {found.not_applicable}"
        return
    if o.state != "verdict":
        return
    timed = [s for s in o.shapes if apply_shape(s, _shape_rows(o, found, s.shape))]
    differs = sum(1 for s in o.shapes if flags.REFERENCE_DIFFERS in s.flags)
    if differs:
        o.flags[flags.REFERENCE_DIFFERS] = differs
    parts = [f"reference (one process, A/B interleaved in pairs): {len(timed)} of {count(len(o.shapes), 'shape')}"]
    if timed:
        geomean = statistics.fmean(math.log1p((s.reference_delta_pct or 0.0) / 100.0) for s in timed)
        parts[0] += f", geomean {pct(geomean):+.1f}%"
        alone = [s.reference_settled_alone for s in timed if s.reference_settled_alone is not None]
        if alone:
            parts.append(f"at the power cap each side's windows after its own side's settling, as in a cell, in "
                         f"{count(len(alone), 'shape')} ({sum(a[0] for a in alone)} of {sum(a[1] for a in alone)} "
                         f"settlings met)")
        parts.append(f"outside the cells' interval in {differs} ({flags.REFERENCE_DIFFERS}; {WHICH_TO_BELIEVE})"
                     if differs else "inside the cells' interval in every one")
        parts += [note for s in o.shapes if flags.REFERENCE_DIFFERS in s.flags for note in [differs_note(s)] if note]
    process = found.process
    if process is None:
        parts.append("its process left no end record (the session was stopped while it ran)")
    elif process["rc"] != 0:
        parts.append(f"its process ended rc {process['rc']} {process['status']} after {process['elapsed_s']:.1f} s "
                     f"(log {process['log']}): shapes without a row have no reference")
    parts.append("no verdict changes")
    o.reference = "; ".join(parts)

