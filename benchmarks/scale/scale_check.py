"""The same campaign serially and on several GPUs (``-n N``): speed-up, balance, GPU isolation, same verdicts.

    python benchmarks/scale/scale_check.py ROOT_SERIAL ROOT_PARALLEL [--wall-serial S] [--wall-parallel S]

Prints the wall times and the speed-up (walls measured around pytest by the
caller; without them the parallel root's ``workers.json`` wall and the serial
root's summed cell times), each worker's busy time (``workers.json``), per op
the GPU UUID(s) in its cells' ``run_identity.json`` (an op must use one GPU,
and no two workers may share one), and whether every shape's verdict in
``report.json`` is the same in both roots.  A CPU root has no GPU UUID: the
GPU checks then say so and are skipped.  Exit 1 when a GPU check fails (or a
root cannot be read), else 0: verdicts may differ by noise, they are reported.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pytest_abbench.core.cellfiles import read_workers  # noqa: E402
from pytest_abbench.core.fileio import CorruptFileError, read_json  # noqa: E402
from pytest_abbench.core.identity import read_identity  # noqa: E402
from pytest_abbench.core.layout import RootLayout, identity_file  # noqa: E402
from pytest_abbench.report.model import Report, report_from_json  # noqa: E402
from pytest_abbench.core.status import read_status  # noqa: E402


def cell_seconds(layout: RootLayout) -> float:
    """The serial root's busy time: its cells' child time, from status.tsv (resumed-from rows included)."""
    return sum(row.elapsed_s for row in read_status(layout.root))


def workers(layout: RootLayout) -> dict[str, Any] | None:
    return read_workers(layout.workers) if layout.workers.exists() else None


def gpus_by_op(layout: RootLayout) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per op: the GPU UUIDs its cells' identities name, and their CUDA_VISIBLE_DEVICES (absent ones left out)."""
    uuids: dict[str, set[str]] = {}
    visible: dict[str, set[str]] = {}
    for key, folder in layout.cell_folders():
        path = identity_file(folder)
        if not path.exists():
            continue  # a gated cell (SWITCH_NO_IR_DIFF) never started a child
        identity = read_identity(path)
        uuids.setdefault(key.op, set())
        visible.setdefault(key.op, set())
        if identity.get("gpu_uuid"):
            uuids[key.op].add(str(identity["gpu_uuid"]))
        if identity.get("cuda_visible_devices") is not None:
            visible[key.op].add(str(identity["cuda_visible_devices"]))
    return uuids, visible


def report(layout: RootLayout) -> Report:
    return report_from_json(read_json(layout.report_json))


def check_walls(serial: RootLayout, parallel: RootLayout, wall_serial: float | None,
                wall_parallel: float | None) -> None:
    shown = workers(parallel)
    if wall_serial is None:
        wall_serial, how_s = cell_seconds(serial), "its cells' summed time: no --wall-serial given"
    else:
        how_s = "measured around pytest"
    if wall_parallel is None and shown is not None:
        wall_parallel, how_p = float(shown["wall_s"]), f"session wall from {parallel.workers.name}"
    else:
        how_p = "measured around pytest"
    print(f"serial   {serial.root}: {wall_serial:.1f} s ({how_s})")
    if wall_parallel is None:
        print(f"parallel {parallel.root}: no wall time (no --wall-parallel, no {parallel.workers.name})")
        return
    print(f"parallel {parallel.root}: {wall_parallel:.1f} s ({how_p})")
    print(f"speed-up {wall_serial / wall_parallel:.2f}x")


def check_workers(parallel: RootLayout) -> None:
    shown = workers(parallel)
    if shown is None:
        print(f"workers: no {parallel.workers} (not an xdist session, or written before it was kept)")
        return
    wall = float(shown["wall_s"])
    for name, w in shown["workers"].items():
        gpu = f" (GPU {w['gpu']})" if w.get("gpu") is not None else " (no GPU pinned)"
        print(f"  {name}{gpu}: busy {w['busy_s']:.1f} s of {wall:.1f} s wall ({100 * w['busy_s'] / wall:.0f}%), "
              f"{w['cells']} cells, ops {', '.join(w['ops'])}")


def check_gpus(parallel: RootLayout) -> bool:
    """Each op on one GPU, no GPU shared by two workers; True when both hold (or cannot be checked)."""
    uuids, visible = gpus_by_op(parallel)
    shown = workers(parallel)
    ok = True
    if not any(uuids.values()):
        print("GPU UUIDs: none in run_identity.json (a CPU run): the one-GPU-per-op and no-shared-GPU checks "
              "are skipped")
        for op in sorted(visible):
            print(f"  {op}: CUDA_VISIBLE_DEVICES {', '.join(sorted(visible[op])) or 'unset'}")
        return True
    for op in sorted(uuids):
        seen = sorted(uuids[op])
        verdict = "ok" if len(seen) == 1 else "FAIL: an op must run on exactly one GPU"
        ok &= len(seen) == 1
        print(f"  {op}: {', '.join(seen) or 'no GPU UUID'} {verdict}")
    if shown is None:
        print("  no workers.json: which worker ran which op is unknown, the no-shared-GPU check is skipped")
        return ok
    owner: dict[str, str] = {}
    for name, w in shown["workers"].items():
        for gpu in sorted(set().union(*(uuids.get(op, set()) for op in w["ops"]))):
            if owner.setdefault(gpu, name) != name:
                print(f"  FAIL: {gpu} used by both {owner[gpu]} and {name}")
                ok = False
    if ok:
        print(f"  every op on one GPU; {len(owner)} GPU(s), none shared between workers")
    return ok


def check_verdicts(serial: RootLayout, parallel: RootLayout) -> None:
    a, b = report(serial), report(parallel)
    ops_a, ops_b = {o.op: o for o in a.ops}, {o.op: o for o in b.ops}
    matched = total = 0
    for op in sorted(set(ops_a) | set(ops_b)):
        if op not in ops_a or op not in ops_b:
            print(f"  {op}: only in the {'serial' if op in ops_a else 'parallel'} root")
            continue
        oa, ob = ops_a[op], ops_b[op]
        if oa.state != ob.state:
            print(f"  {op}: state {oa.state} serially, {ob.state} in parallel")
        va, vb = {s.shape: s.verdict for s in oa.shapes}, {s.shape: s.verdict for s in ob.shapes}
        for shape in sorted(set(va) | set(vb)):
            total += 1
            if va.get(shape) == vb.get(shape):
                matched += 1
            else:
                print(f"  {op} {shape}: {va.get(shape, 'absent')} serially, {vb.get(shape, 'absent')} in parallel")
    print(f"  verdicts: {matched} of {total} shapes the same" + (" (all)" if matched == total else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("serial", type=Path)
    parser.add_argument("parallel", type=Path)
    parser.add_argument("--wall-serial", type=float, default=None, metavar="S")
    parser.add_argument("--wall-parallel", type=float, default=None, metavar="S")
    args = parser.parse_args(argv)
    serial, parallel = RootLayout(args.serial.resolve()), RootLayout(args.parallel.resolve())
    try:
        print("== wall time")
        check_walls(serial, parallel, args.wall_serial, args.wall_parallel)
        print("== workers (parallel root)")
        check_workers(parallel)
        print("== GPUs per op (parallel root)")
        gpus_ok = check_gpus(parallel)
        print("== verdicts, serial vs parallel")
        check_verdicts(serial, parallel)
    except (OSError, CorruptFileError, KeyError, ValueError) as exc:
        print(f"scale_check: cannot read the roots: {exc}", file=sys.stderr)
        return 1
    return 0 if gpus_ok else 1


if __name__ == "__main__":
    sys.exit(main())
