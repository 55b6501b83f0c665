"""Plugin scale figures, measured side by side in one run.

    python benchmarks/scale/plugin_scale.py [collection overhead rows report shipped]   (default: all)

1. Collecting a campaign of 200 ops x 12 rounds x 2 sides (4,800 cells), against the same
   pytest start-up collecting 1 op x 1 round.
2. Plugin overhead per cell: a real session of 20 cells; session wall time minus pytest start-up
   minus the children's own time (each status row's elapsed_s), per cell.
3. 10,000 status rows appended by 8 concurrent processes: time, rows lost, rows torn.
4. Reading a root of 10,000 cells (200 ops x 25 rounds x 2 sides, 5 shapes each) into the report.
5. What the process that writes the root pays per cell, and the bytes a cell weighs on the wire, for one
   campaign of 8 cells (5 shapes each) run twice: serially (the cell measures into the root, landed in
   place) and with ``-n 2`` (each worker measures into its scratch root and ships the cell on its test
   report; the controller lands it).  A probe plugin loaded into every process (``PYTEST_PLUGINS``) times the
   hooks and functions involved and weighs each report as execnet encodes it.
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
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pytest_abbench.core.layout import STATUS_FILE  # noqa: E402
from pytest_abbench.report import build_report, write_report  # noqa: E402
from pytest_abbench.core.status import COLUMNS, StatusRow, append_status_row, read_status  # noqa: E402

CAMPAIGN = textwrap.dedent('''
    from pytest_abbench import Case, Op, Switch

    def build(shape, device):
        import torch
        x = torch.arange(shape["n"], dtype=torch.float32)
        return Case(run=lambda: x + 1, expected=lambda: x + 1)

    OPS = [Op(f"op{i:03d}", build=build, shapes={"smoke": [{"n": 8 * (s + 1)} for s in range(N_SHAPES)]})
           for i in range(N_OPS)]
    SWITCH = Switch(env_b={"ABBENCH_BENCH_SWITCH": "1"})
''')


def pytest_wall(folder: Path, *args: str, env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=folder,
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"pytest {' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return wall


def campaign_folder(tmp: Path, name: str, ops: int, shapes: int = 1) -> Path:
    folder = tmp / name
    folder.mkdir()
    (folder / "tox.ini").write_text("[pytest]\n")
    (folder / "c.py").write_text(CAMPAIGN.replace("N_OPS", str(ops)).replace("N_SHAPES", str(shapes)))
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
    rows = ["\t".join(COLUMNS) + "\n"]
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
                rows.append(StatusRow(round=rnd, op=f"op{o:03d}", side=side, switch="X=1", rc=0, status="ok",
                                      elapsed_s=1.0, success=5, failed=0).to_line())
    (root / STATUS_FILE).write_text("".join(rows))
    build_report(root)  # warm the page cache: the report is timed, not the disk
    start = time.perf_counter()
    report = build_report(root)
    elapsed = time.perf_counter() - start
    assert len(report.ops) == 200 and all(o.state == "verdict" for o in report.ops)
    print(f"report from a 10,000-row status.tsv and its 10,000 cell folders: {elapsed:.2f} s")


PROBE = textwrap.dedent('''
    """Loaded into every pytest process of a measured session: what the process that writes the root
    pays per cell (wall and CPU seconds by part and test), and each cell report's weight as execnet
    encodes it for the wire."""
    import contextlib, functools, json, os, time
    from collections import Counter, defaultdict

    import execnet
    import pytest

    from pytest_abbench.session import transport
    from pytest_abbench.session.reporting import ReportHooks
    from pytest_abbench.session.xdist_hooks import XdistHooks

    WALL, CPU = defaultdict(Counter), defaultdict(Counter)  # part -> test node id -> seconds
    BYTES, COUNTS = Counter(), Counter()
    ROLE, NODE = ["?"], [""]  # this process's worker id; the test whose report is being handled


    @contextlib.contextmanager
    def clock(what):
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            WALL[what][NODE[0]] += time.perf_counter() - wall
            CPU[what][NODE[0]] += time.thread_time() - cpu


    def timed(owner, name, what):
        original = getattr(owner, name)

        @functools.wraps(original)  # keeps the signature and the hookimpl marker pluggy reads
        def wrapper(*args, **kwargs):
            with clock(what):
                return original(*args, **kwargs)

        setattr(owner, name, wrapper)


    # Patched before pytest_configure registers the plugin's objects, so the bound hooks are these.
    timed(transport, "pack", "pack")  # the fixture and the session import these from the module when used
    timed(transport, "land", "land")
    timed(ReportHooks, "pytest_runtest_logreport", "abbench")
    timed(XdistHooks, "pytest_runtest_logreport", "abbench")


    def pytest_configure(config):
        workerinput = getattr(config, "workerinput", None)
        ROLE[0] = workerinput["workerid"] if workerinput else "main"


    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_report_from_serializable(config, data):
        NODE[0] = str(data.get("nodeid", ""))
        with clock("from_dict"):
            report = yield
        if data.get("$report_type") == "TestReport":
            blob = execnet.dumps(data)
            with clock("decode"):  # what execnet's receiving thread did with these bytes, done again
                execnet.loads(blob)
            BYTES["wire"] += len(blob)
            COUNTS["reports"] += 1
        return report


    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logreport(report):
        NODE[0] = report.nodeid
        with clock("all_hooks"):
            result = yield
        payload = getattr(report, transport.SHIPPED_ATTR, None)
        if payload is not None:
            COUNTS["cells"] += 1
            BYTES["payload"] += len(str(payload).encode())
        return result


    def pytest_unconfigure(config):
        out = os.path.join(os.environ["ABBENCH_PROBE_OUT"], f"{ROLE[0]}-{os.getpid()}.json")
        with open(out, "w") as f:
            json.dump({"role": ROLE[0], "wall": WALL, "cpu": CPU, "bytes": BYTES, "counts": COUNTS}, f)
''')


def probe_session(folder: Path, tmp: Path, label: str, *args: str) -> tuple[dict[str, Any], float]:
    """Run ``folder``'s campaign under the probe: what the root-writing process recorded, and the wall
    seconds every process (serial session or workers) spent packing its cells."""
    probe = tmp / "probe"
    probe.mkdir(exist_ok=True)
    (probe / "abbench_probe.py").write_text(PROBE)
    out = tmp / f"probe-{label}"
    out.mkdir()
    path = os.pathsep.join(p for p in (str(probe), str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "PYTEST_PLUGINS": "abbench_probe", "ABBENCH_PROBE_OUT": str(out)}
    pytest_wall(folder, "c.py", "--ab-rounds", "1", "--ab-root", str(tmp / f"{label}-root"),
                "--ab-ir-target", "none", *args, env=env)
    found = [json.loads(p.read_text()) for p in out.glob("*.json")]
    return (next(f for f in found if f["role"] == "main"),
            sum(sum(f["wall"].get("pack", {}).values()) for f in found))


def shipped_vs_local(tmp: Path) -> None:
    ops, shapes = 4, 5
    folder = campaign_folder(tmp, "ship", ops, shapes)
    runs = {"local": probe_session(folder, tmp, "local", "-p", "no:xdist"),
            "shipped": probe_session(folder, tmp, "shipped", "-n", "2")}
    for label, (main, pack_s) in runs.items():
        cells = main["counts"]["cells"]
        assert cells == 2 * ops, f"{label}: {cells} cells landed, expected {2 * ops}"
        nodes = sorted({n for part in main["wall"].values() for n in part if "[r" in n})
        assert len(nodes) == cells, f"{label}: {len(nodes)} cell tests for {cells} cells"

        def per_cell(kind: str, *parts: str) -> list[float]:
            return [sum(main[kind].get(p, {}).get(n, 0.0) for p in parts) * 1000 for n in nodes]

        def ms(*parts: str) -> str:
            """The median cell (wall, and CPU of the hook's thread): a first cell's one-off imports are not
            the steady cost of a long campaign; the mean is given for the total."""
            return (f"{statistics.median(per_cell('wall', *parts)):.1f} ms "
                    f"({statistics.median(per_cell('cpu', *parts)):.1f} CPU)")

        hooks = ("decode", "from_dict", "all_hooks")
        total = f"{ms(*hooks)}, mean {statistics.fmean(per_cell('wall', *hooks)):.1f} ms"
        payload = main["bytes"]["payload"] / cells / 1000
        packed = f"packing a cell {pack_s * 1000 / cells:.1f} ms"
        if label == "local":
            print(f"outcome written locally (serial, {cells} cells of {shapes} shapes): 0 kB on the wire (the "
                  f"{payload:.1f} kB payload is built and landed in place); the session per cell, median: "
                  f"{total} in the report hooks; abbench's part {ms('abbench')}, of it landing (origin.json, "
                  f"the row) {ms('land')}; {packed} (same process)")
        else:
            wire = main["bytes"]["wire"] / cells / 1000
            print(f"outcome shipped (-n 2, {cells} cells of {shapes} shapes): {wire:.1f} kB on the wire per cell "
                  f"({main['counts']['reports'] / cells:.0f} reports, the payload {payload:.1f} kB of it); the "
                  f"controller per cell, median: {total} = decode {ms('decode')} + report from dict "
                  f"{ms('from_dict')} + report hooks {ms('all_hooks')}; abbench's part {ms('abbench')}, of it "
                  f"landing (the cell's files, origin.json, the row) {ms('land')}; {packed} (on the workers)")


SECTIONS = {"collection": collection, "overhead": overhead, "rows": concurrent_rows, "report": big_root,
            "shipped": shipped_vs_local}


def main() -> None:
    chosen = sys.argv[1:] or list(SECTIONS)
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        raise SystemExit(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    os.environ.pop("PYTEST_ADDOPTS", None)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for name in chosen:
            SECTIONS[name](tmp)


if __name__ == "__main__":
    main()
