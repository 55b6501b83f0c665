"""Time-to-verdict figures of finished roots, side by side: start-up per cell, where the time went, round 1.

    python benchmarks/figures/startup_figures.py NAME=ROOT [NAME=ROOT ...]

Per root: cells run, the median and max cell start-up (``cell_timing.json``
``startup_s``: process creation, or fork, to the first shape's build; torch,
Triton and the campaign imported, CUDA initialised), the share of the cells'
time spent timing (``report.json`` ``time_spent``), round 1's wall time (the
sum of its cells' ``elapsed_s``: cells of one op run one after another), the
whole campaign's wall time, and the verdict counts.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pytest_abbench.core.cellfiles import read_timing  # noqa: E402
from pytest_abbench.core.layout import TIMING_FILE, RootLayout  # noqa: E402
from pytest_abbench.core.status import read_status  # noqa: E402


def figures(root: Path) -> dict[str, object]:
    layout = RootLayout(root)
    rows = read_status(root)
    startups = []
    # Mean seconds per cell: what the child accounts for, what it does not (inputs, IR, pads), and after it.
    parts = {"build": 0.0, "child_unaccounted": 0.0, "exit_and_parent": 0.0}
    timed = 0
    for row in rows:
        path = root / f"r{row.round}_{row.side}" / row.op / TIMING_FILE
        if path.exists():
            t = read_timing(path)
            startups.append(float(t["startup_s"]))
            known = sum(float(t.get(k) or 0.0) for k in ("startup_s", "build_s", "first_call_s", "timing_s",
                                                           "check_s"))
            parts["build"] += float(t.get("build_s") or 0.0)
            parts["child_unaccounted"] += float(t["total_s"]) - known
            parts["exit_and_parent"] += row.elapsed_s - float(t["total_s"]) - float(t.get("precompile_s") or 0.0)
            timed += 1
    report = json.loads(layout.report_json.read_text())
    spent = report["time_spent"]
    verdicts: dict[str, int] = {}
    for op in report["ops"]:
        for shape in op["shapes"]:
            verdicts[shape["verdict"]] = verdicts.get(shape["verdict"], 0) + 1
    return {
        "cells": len(rows),
        "startup_median_s": round(statistics.median(startups), 3) if startups else None,
        "startup_max_s": round(max(startups), 3) if startups else None,
        "timing_share": round(spent["timing_s"] / spent["cells_s"], 3) if spent.get("cells_s") else None,
        "startup_share": round(spent["startup_s"] / spent["cells_s"], 3) if spent.get("cells_s") else None,
        "compile_share": round(spent["compile_s"] / spent["cells_s"], 3) if spent.get("cells_s") else None,
        "round1_s": round(sum(r.elapsed_s for r in rows if r.round == 1), 1),
        "cells_s": spent.get("cells_s"),
        "wall_s": spent.get("wall_s"),
        "verdicts": verdicts,
        **{f"{k}_per_cell_s": round(v / timed, 3) if timed else None for k, v in parts.items()},
    }


def main(args: list[str]) -> None:
    out = {}
    for arg in args:
        name, _, path = arg.partition("=")
        out[name] = figures(Path(path))
    names = list(out)
    keys = list(next(iter(out.values())))
    print(f"{'':<20}" + "".join(f"{n:>22}" for n in names))
    for key in keys:
        print(f"{key:<20}" + "".join(f"{str(out[n][key]):>22}" for n in names))
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
