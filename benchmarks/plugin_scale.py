"""Plugin scale figures, measured side by side in one run.

    python benchmarks/plugin_scale.py

1. Collecting a campaign of 200 ops x 12 rounds x 2 sides (4,800 cells), against the same
   pytest start-up collecting 1 op x 1 round.
2. Plugin overhead per cell: a real session of 20 cells; session wall time minus pytest start-up
   minus the children's own time (each status row's elapsed_s), per cell.
3. 10,000 status rows appended by 8 concurrent processes: time, rows lost, rows torn.
4. Reading a root of 10,000 cells (200 ops x 25 rounds x 2 sides, 5 shapes each) into the report.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_abbench.layout import STATUS_FILE  # noqa: E402
from pytest_abbench.report import build_report, write_report  # noqa: E402
from pytest_abbench.status import COLUMNS, StatusRow, append_status_row, read_status  # noqa: E402

CAMPAIGN = textwrap.dedent('''
    from pytest_abbench import Case, Op, Switch

    def build(shape, device):
        import torch
        x = torch.arange(shape["n"], dtype=torch.float32)
        return Case(run=lambda: x + 1, expected=lambda: x + 1)

    OPS = [Op(f"op{i:03d}", build=build, shapes={"smoke": [{"n": 8}]}) for i in range(N_OPS)]
    SWITCH = Switch(env_b={"ABBENCH_BENCH_SWITCH": "1"})
''')


def pytest_wall(folder: Path, *args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=folder,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"pytest {' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return wall


def campaign_folder(tmp: Path, name: str, ops: int) -> Path:
    folder = tmp / name
    folder.mkdir()
    (folder / "tox.ini").write_text("[pytest]\n")
    (folder / "c.py").write_text(CAMPAIGN.replace("N_OPS", str(ops)))
    return folder


def collection(tmp: Path) -> None:
    small, big = campaign_folder(tmp, "small", 1), campaign_folder(tmp, "big", 200)
    base = min(pytest_wall(small, "c.py", "--collect-only", "--ab-rounds", "1") for _ in range(3))
    full = min(pytest_wall(big, "c.py", "--collect-only", "--ab-rounds", "12") for _ in range(3))
    print(f"collect 4,800 cells (200 ops x 12 rounds x 2 sides): {full:.2f} s wall; 2 cells: {base:.2f} s wall; "
          f"collection itself {full - base:.2f} s")


def overhead(tmp: Path) -> None:
    folder = campaign_folder(tmp, "run", 10)
    root = tmp / "run-root"
    startup = min(pytest_wall(folder, "c.py", "--collect-only", "--ab-rounds", "1") for _ in range(3))
    junit = tmp / "junit.xml"
    wall = pytest_wall(folder, "c.py", "--ab-rounds", "1", "--ab-root", str(root), "--ab-ir-target", "none",
                       "-p", "no:xdist", f"--junitxml={junit}")
    own = [float(p.get("value", "nan")) for p in ET.parse(junit).iter("property")
           if p.get("name") == "abbench_overhead_ms"]
    rows = read_status(root)
    children = sum(r.elapsed_s for r in rows)
    start = time.perf_counter()
    write_report(root, build_report(root))  # what the session did once at its end
    report_s = time.perf_counter() - start
    per_cell = (wall - startup - children - report_s) / len(rows)
    print(f"{len(rows)} real cells ({len(rows) // 2} ops): session {wall:.2f} s = pytest start-up + collection "
          f"{startup:.2f} s + children {children:.2f} s + end-of-session report {report_s:.2f} s "
          f"(plots included) + the rest {per_cell * 1000:.1f} ms per cell (pytest's per-test machinery and the "
          f"plugin); the plugin's own code per cell, timed inside run_cell without its child: "
          f"mean {statistics.fmean(own):.1f} ms, max {max(own):.1f} ms over {len(own)} cells")


def _writer(root: str, worker: int, count: int) -> None:
    for i in range(count):
        append_status_row(Path(root), StatusRow(i, f"op{worker}", "A", "X=1", 0, "ok", 1.5, 3, 0))


def concurrent_rows(tmp: Path) -> None:
    root = tmp / "rows"
    root.mkdir()
    start = time.perf_counter()
    procs = [multiprocessing.Process(target=_writer, args=(str(root), w, 1250)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - start
    lines = (root / STATUS_FILE).read_text().split("\n")[:-1]
    torn = sum(1 for line in lines if len(line.split("\t")) != len(COLUMNS))
    got = {(r.op, r.round) for r in read_status(root)}
    lost = 8 * 1250 - len(got)
    print(f"10,000 status rows from 8 concurrent writers: {elapsed:.2f} s, {lost} lost, {torn} torn, "
          f"{len(lines) - 1} data lines")


def big_root(tmp: Path) -> None:
    root = tmp / "big-root"
    rows = ["\t".join(COLUMNS)]
    identity = {"backend": "cuda", "device": "H200", "timer": "cudagraph", "bench_level": "core", "shape_mode": "h",
                "tuner_cache": "per-cell", "direct_repeat": "r"}
    for rnd in range(1, 26):
        for side in "AB":
            for o in range(200):
                cell = root / f"r{rnd}_{side}" / f"op{o:03d}"
                cell.mkdir(parents=True)
                mode = "record" if (rnd, side) == (1, "A") else "replay"
                (cell / "run_identity.json").write_text(json.dumps({**identity, "autotune_mode": mode,
                                                                    "autotune_record": f"/{o}"}))
                ms = 1.0 if side == "A" else 1.02
                (cell / "results.jsonl").write_text("".join(
                    json.dumps({"shape": f"n={s}", "status": "ok", "timer": "cudagraph", "median_ms": ms * (1 + s),
                                "samples_ms": [ms * (1 + s)] * 10}) + "\n" for s in range(5)))
                rows.append("\t".join(map(str, (rnd, f"op{o:03d}", side, "X=1", 0, "ok", 1.0, 5, 0, 0, 0, 0))))
    (root / STATUS_FILE).write_text("\n".join(rows) + "\n")
    build_report(root)  # warm the page cache: the report is timed, not the disk
    start = time.perf_counter()
    report = build_report(root)
    elapsed = time.perf_counter() - start
    assert len(report.ops) == 200 and all(o.state == "verdict" for o in report.ops)
    print(f"report from a 10,000-row status.tsv and its 10,000 cell folders: {elapsed:.2f} s")


def main() -> None:
    os.environ.pop("PYTEST_ADDOPTS", None)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        collection(tmp)
        overhead(tmp)
        concurrent_rows(tmp)
        big_root(tmp)


if __name__ == "__main__":
    main()
