"""Where each cell's wall time went: start-up, first call (compile + autotune), timing, the rest.

    python benchmarks/cell_timing.py ROOT

Reads every ``<root>/r<k>_<side>/<op>/cell_timing.json`` written by the cell
child and the elapsed time of its status.tsv row (which includes the parent's
spawn and bookkeeping).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pytest_abbench.status import read_status


def main(root: Path) -> None:
    rows = {(r.round, r.op, r.side): r for r in read_status(root)}
    print(f"{'cell':<28} {'elapsed':>8} {'start-up':>9} {'1st call':>9} {'check':>7} {'timing':>8} {'other':>7} "
          f"{'bench':>6} {'ir':>4}")
    totals = {"elapsed": 0.0, "startup_s": 0.0, "first_call_s": 0.0, "timing_s": 0.0}
    for (rnd, op, side), row in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        path = root / f"r{rnd}_{side}" / op / "cell_timing.json"
        if not path.exists():
            print(f"{op}[r{rnd}-{side}]".ljust(28), f"{row.elapsed_s:8.2f}", f"  ({row.status}: no cell_timing.json)")
            continue
        t = json.loads(path.read_text())
        other = row.elapsed_s - t["startup_s"] - t["first_call_s"] - t["check_s"] - t["timing_s"]
        print(f"{op + f'[r{rnd}-{side}]':<28} {row.elapsed_s:8.2f} {t['startup_s']:9.2f} {t['first_call_s']:9.2f} "
              f"{t['check_s']:7.2f} {t['timing_s']:8.2f} {other:7.2f} {t['autotune_bench_calls']:6d} "
              f"{t.get('ir_variants', 0):4d}")
        totals["elapsed"] += row.elapsed_s
        for k in ("startup_s", "first_call_s", "timing_s"):
            totals[k] += t[k]
    if totals["elapsed"]:
        e = totals["elapsed"]
        print(f"\nall cells: {e:.1f}s; start-up {100 * totals['startup_s'] / e:.0f}%, first calls (compile+autotune) "
              f"{100 * totals['first_call_s'] / e:.0f}%, timed measurement {100 * totals['timing_s'] / e:.0f}%")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
