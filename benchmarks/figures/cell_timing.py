"""Where each cell's wall time went, cell by cell: the parts of the report's ``time:`` line.

    python benchmarks/figures/cell_timing.py ROOT

For every status.tsv row, the cell's elapsed time (the parent's clock: spawn
and bookkeeping included) split as the report splits it
(``pytest_abbench.report.cost.cell_parts``), the autotuner's benchmark calls
and the IR variants captured; then the totals per part.  Cells that never ran
(0 s: skipped by the IR gate decided before them, or rounds an auto-rounds op
no longer needed) are counted by status in one line instead of a row each.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from pytest_abbench.core.layout import TIMING_FILE, CellKey, RootLayout
from pytest_abbench.report.cost import PARTS, cell_parts, read_timing
from pytest_abbench.core.status import read_status


def main(root: Path) -> None:
    layout = RootLayout(root)
    print(f"{'cell':<28} {'elapsed':>8}", *(f"{words:>9}" for _, _, words in PARTS), f"{'bench':>6} {'ir':>4}")
    totals = dict.fromkeys((key for key, _, _ in PARTS), 0.0)
    elapsed = 0.0
    never_ran: Counter[str] = Counter()
    for row in sorted(read_status(root), key=lambda r: (r.op, r.round, r.side)):
        name = f"{row.op}[r{row.round}-{row.side}]"
        timing = read_timing(layout.cell(CellKey(row.round, row.op, row.side)))
        if not timing and row.elapsed_s == 0:
            never_ran[row.status] += 1
            continue
        parts = cell_parts(timing, row.elapsed_s, row.status)
        if parts is None:
            print(f"{name:<28} {row.elapsed_s:8.2f}   ({row.status}: no {TIMING_FILE})")
            continue
        print(f"{name:<28} {row.elapsed_s:8.2f}", *(f"{parts[key]:9.2f}" for key, _, _ in PARTS),
              f"{int(timing.get('autotune_bench_calls', 0)):6d} {int(timing.get('ir_variants', 0)):4d}")
        elapsed += sum(parts.values())
        for key, value in parts.items():
            totals[key] += value
    if never_ran:
        statuses = ", ".join(f"{status} {n}" for status, n in sorted(never_ran.items()))
        print(f"never ran (0 s, no {TIMING_FILE}): {sum(never_ran.values())} cells: {statuses}")
    if elapsed:
        shares = ", ".join(f"{words} {100 * totals[key] / elapsed:.0f}%" for key, _, words in PARTS)
        print(f"\nall cells with a timing file: {elapsed:.1f} s; {shares}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
