"""Where a cell's time on each shape goes: per op and shape of a root, the median over its cells of each part of
``spent_s`` (inputs, first call, check, the timer's capture, the settling or burst gaps, the windows, the energy
counter's wait, the profiling pass), then the parts summed over every shape of every cell and their shares.
Several roots print one after another (two trees' runs of one campaign, side by side by eye).  A record from a tree
before ``spent_s`` gets what its windows tell: the settling (the first steady window's wait, or the burst gaps)
and the windows (calls times the median), the other parts blank.

    python benchmarks/figures/shape_cost.py ROOT [ROOT ...]
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from pytest_abbench.core import regimes
from pytest_abbench.core.results import SPENT_PARTS, ShapeResult, read_results


def shape_costs(root: Path) -> dict[tuple[str, str, str], list[dict[str, float]]]:
    """(op, shape, regime) -> each cell's ``spent_s`` for it, with the shape's shared parts folded into the record
    that holds them."""
    out: dict[tuple[str, str, str], list[dict[str, float]]] = defaultdict(list)
    for results in sorted(root.glob("r*_*/*/results.jsonl")):
        op = results.parts[-2]
        for rec in read_results(results):
            spent = rec.spent_s or from_windows(rec)
            if spent:
                out[(op, rec.shape, rec.regime or "-")].append(spent)
    return out


def from_windows(rec: ShapeResult) -> dict[str, float]:
    """What an older record's windows say of its time: the waits before them and the calls they timed."""
    if not rec.ok or not rec.windows or rec.median_ms is None:
        return {}
    waited = rec.windows[0].waited_s if rec.regime == regimes.STEADY else sum(w.waited_s for w in rec.windows)
    return {"settle": waited, "windows": sum(w.calls for w in rec.windows) * rec.median_ms / 1e3}


def table(root: Path) -> list[str]:
    costs = shape_costs(root)
    if not costs:
        return [f"{root}: no timed record"]
    head = ["op", "shape", "regime", "cells"] + list(SPENT_PARTS) + ["total"]
    rows = [head]
    totals: dict[str, float] = defaultdict(float)
    records = 0
    for (op, shape, regime), spent in sorted(costs.items()):
        records += len(spent)
        for one in spent:
            for part, seconds in one.items():
                totals[part] += seconds
        medians = [statistics.median(one.get(part, 0.0) for one in spent) for part in SPENT_PARTS]
        rows.append([op, shape, regime, str(len(spent))] + [f"{m:.3f}" for m in medians] + [f"{sum(medians):.3f}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [f"== {root}: median seconds per cell, by shape"]
    lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows]
    whole = sum(totals.values())
    lines.append(f"-- summed over {records} shape records: {whole:.1f} s, {whole / records:.3f} s a record")
    lines += [f"{part:>12}: {totals[part]:8.1f} s  {100 * totals[part] / whole:5.1f}%" for part in SPENT_PARTS
              if whole > 0]
    return lines


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    for arg in sys.argv[1:]:
        print("\n".join(table(Path(arg))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
