"""How long the report takes on a large root, and whether memory grows with the rounds read.

    python benchmarks/scale/report_scale.py            # 100 ops x 50 shapes x {6, 12} rounds x 2 sides

Writes synthetic roots exactly as cells write them (results.jsonl with 10
samples per shape, run_identity.json, status.tsv), then times
``build_report`` and records its peak Python allocation with tracemalloc.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pytest_abbench.report import build_report  # noqa: E402
from pytest_abbench.core.status import COLUMNS, StatusRow  # noqa: E402

IDENTITY = {"backend": "cuda", "device": "H200", "timer": "cudagraph", "bench_level": "core", "shape_mode": "h",
            "tuner_cache": "per-cell", "direct_repeat": "rep=100ms,warmup=25ms"}


def write_root(root: Path, ops: int, shapes: int, rounds: int) -> None:
    rng = random.Random(0)
    rows = ["\t".join(COLUMNS) + "\n"]
    for rnd in range(1, rounds + 1):
        for side in "AB":
            for o in range(ops):
                cell = root / f"r{rnd}_{side}" / f"op{o:03d}"
                cell.mkdir(parents=True)
                mode = "record" if (rnd, side) == (1, "A") else "replay"
                (cell / "run_identity.json").write_text(json.dumps(
                    {**IDENTITY, "side": side, "autotune_mode": mode, "autotune_record": f"/r/{o}.json",
                     "autotune_record_hash": "x"}))
                lines = []
                for s in range(shapes):
                    base = 0.01 * (1 + s) * (1.05 if side == "B" else 1.0)
                    samples = [base * (1 + rng.gauss(0, 0.01)) for _ in range(10)]
                    lines.append(json.dumps({"shape": f"n={s}", "status": "ok", "timer": "cudagraph",
                                             "samples_ms": samples, "median_ms": sorted(samples)[5], "n": 10}))
                (cell / "results.jsonl").write_text("\n".join(lines) + "\n")
                rows.append(StatusRow(round=rnd, op=f"op{o:03d}", side=side, switch="X=1", rc=0, status="ok",
                                      elapsed_s=1.0, success=shapes, failed=0).to_line())
    (root / "status.tsv").write_text("".join(rows))


def measure(root: Path) -> tuple[float, float]:
    """(seconds of one build_report, peak MiB traced in a second one: tracemalloc slows it, so not timed)."""
    start = time.perf_counter()
    report = build_report(root)
    elapsed = time.perf_counter() - start
    assert len(report.ops) == 100 and all(o.state == "verdict" for o in report.ops)
    tracemalloc.start()
    build_report(root)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return elapsed, peak


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for rounds in (6, 12):
            root = Path(tmp) / f"r{rounds}"
            write_root(root, 100, 50, rounds)
            build_report(root)  # warm the page cache: we time the report, not the disk
            results[rounds] = measure(root)
        for rounds, (elapsed, peak) in results.items():
            print(f"100 ops x 50 shapes x {rounds:2d} rounds x 2 sides ({200 * rounds} cells, "
                  f"{10_000 * rounds} shape results): build_report {elapsed:.2f} s, peak traced memory {peak:.1f} MiB")
        ratio_t = results[12][0] / results[6][0]
        ratio_m = results[12][1] / results[6][1]
        print(f"12 rounds / 6 rounds: time x{ratio_t:.2f} (reads double), peak memory x{ratio_m:.2f}")


if __name__ == "__main__":
    main()
