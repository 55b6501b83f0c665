"""Per op, shape and side of a root: how many steady windows met their condition, each cell's first window's
detail (how its settling ended), its median time and the clock and temperature its first and last windows closed
at (what a spread between rounds goes with), and its energy span (power, length, edge error) where it has one;
then how long
the settling took per shape (each cell's first steady window waited that long).

    python benchmarks/figures/steady_windows.py ROOT
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from pytest_abbench.core import regimes
from pytest_abbench.core.results import read_results


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    root = Path(sys.argv[1])
    met: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    settling: dict[tuple[str, str], list[float]] = defaultdict(list)
    lines = []
    for results in sorted(root.glob("r*_*/*/results.jsonl")):
        cell, op = results.parts[-3], results.parts[-2]
        side = cell.split("_", 1)[1]
        for rec in read_results(results):
            if not rec.ok or rec.regime != regimes.STEADY or not rec.windows:
                continue
            met_here = sum(w.condition == regimes.MET for w in rec.windows)
            count = met[(op, rec.shape, side)]
            count[0] += met_here
            count[1] += len(rec.windows)
            settling[(op, rec.shape)].append(rec.windows[0].waited_s)
            span = rec.energy_span
            spans = "no span" if span is None else (
                f"span {span.energy_mj / 1e3 / span.seconds:.0f} W over {span.seconds:.3f} s, edges "
                f"{span.edge_error_s * 1e3:.1f} ms")
            closed = [w.gpu_state.after for w in (rec.windows[0], rec.windows[-1]) if w.gpu_state is not None]
            state = "/".join(f"{r.sm_clock_mhz:.0f}" if r and r.sm_clock_mhz else "-" for r in closed) + " MHz, " + \
                "/".join(f"{r.temperature_c:.0f}" if r and r.temperature_c is not None else "-" for r in closed) + " C"
            lines.append(f"{cell} {op} {rec.shape}: {met_here}/{len(rec.windows)} met | {rec.windows[0].detail} | "
                         f"median {rec.median_ms or 0.0:.5g} ms, first/last window closed at {state} | {spans}")
    print("\n".join(lines))
    print("--- windows met per op, shape and side")
    total = [0, 0]
    for (op, shape, side), (ok, all_) in sorted(met.items()):
        total[0] += ok
        total[1] += all_
        print(f"{op} {shape} {side}: {ok}/{all_}")
    print(f"all: {total[0]}/{total[1]} windows met")
    print("--- settling per shape-cell (s): mean, min-max, count")
    every = [s for waits in settling.values() for s in waits]
    for (op, shape), waits in sorted(settling.items()):
        print(f"{op} {shape}: {sum(waits) / len(waits):.2f} ({min(waits):.2f}-{max(waits):.2f}), {len(waits)}")
    if every:
        print(f"all: {len(every)} shape-cells, mean {sum(every) / len(every):.2f} s, total {sum(every):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
