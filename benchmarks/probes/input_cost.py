"""What a campaign's inputs cost in a fresh process, per op and shape: where a cell's ``inputs`` share goes.

Each op runs in a process of its own, as a cell does (torch and Triton imported first, no CUDA context yet):

- ``cuda``: the CUDA context and a first tensor (a cell pays it in its first shape's build);
- ``build``: the op's build of each shape, first time (it may import the op's library) and again;
- ``expected``: the reference output, the correctness check's eager computation;
- ``first``: the first call (compilation) with ``--first-call``, and a warm call after it;
- ``standin``: with ``--stand-in`` (CPU only), the build again as a compile-only process makes it: large draws
  tiled from a small one (``pytest_abbench.child.standin_draws``); the last line gives build / standin.

    python benchmarks/probes/input_cost.py campaigns/liger.py --level core [--first-call] [--json OUT.json]
    python benchmarks/probes/input_cost.py campaigns/liger.py --level core --device cpu --stand-in

Prints a table in seconds; with ``--json`` the same rows as JSON.  Needs the op's library and, for
``--device cuda``, a GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _clock(fn: Any, device: str) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    _sync(device)
    return time.perf_counter() - started, value


def measure_op(campaign: Path, op_name: str, level: str, device: str, first_call: bool,
               stand_in: bool) -> list[dict[str, Any]]:
    """One op's rows, in this process."""
    started = time.perf_counter()
    import torch
    import triton  # noqa: F401  (a cell's fork server has both before the cell starts)

    from pytest_abbench.campaign.loader import load_campaign
    from pytest_abbench.campaign.model import Case
    from pytest_abbench.child.standin_draws import stood_in

    imports_s = time.perf_counter() - started
    op = load_campaign(campaign).op(op_name)
    rows: list[dict[str, Any]] = []
    cuda_s = 0.0
    if device == "cuda":
        cuda_s, _ = _clock(lambda: torch.empty(1, device="cuda"), device)
    for index, shape in enumerate(op.shapes_for(level)):
        build_s, built = _clock(lambda: op.build(shape, device), device)
        case = built if isinstance(built, Case) else Case(run=built)
        again_s, again = _clock(lambda: op.build(shape, device), device)
        del again
        expected_s = _clock(case.expected, device)[0] if case.expected is not None else 0.0
        row: dict[str, Any] = {"op": op_name, "shape": shape.id, "imports_s": imports_s if index == 0 else 0.0,
                               "cuda_s": cuda_s if index == 0 else 0.0, "build_s": build_s,
                               "build_again_s": again_s, "expected_s": expected_s}
        if stand_in:  # after the exact builds above, so neither gets a first build's imports
            with stood_in():
                row["standin_s"], tiled = _clock(lambda: op.build(shape, device), device)
            del tiled
        if first_call:
            row["first_call_s"] = _clock(case.run, device)[0]
            row["warm_call_s"] = _clock(case.run, device)[0]
        if device == "cuda":
            row["allocated_gb"] = torch.cuda.memory_allocated() / 1e9
        rows.append(row)
        del case, built
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("campaign", type=Path)
    parser.add_argument("--level", default="core")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--first-call", action="store_true", help="also time the first call (compiles) and a warm one")
    parser.add_argument("--stand-in", action="store_true",
                        help="also build as a compile-only process does (CPU): large draws tiled from a small one")
    parser.add_argument("--op", action="append", default=None, help="only these ops (repeatable)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per op's process")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # the per-op process
    args = parser.parse_args()
    if args.stand_in and args.device != "cpu":
        parser.error("--stand-in: compile-only processes build on the CPU; give --device cpu")
    if args.one:
        print(json.dumps(measure_op(args.campaign, args.one, args.level, args.device, args.first_call,
                                    args.stand_in)))
        return 0
    from pytest_abbench.campaign.loader import load_campaign

    names = args.op or [op.name for op in load_campaign(args.campaign).ops]
    rows: list[dict[str, Any]] = []
    for name in names:
        command = [sys.executable, __file__, str(args.campaign), "--level", args.level, "--device", args.device,
                   "--one", name] + (["--first-call"] if args.first_call else []) + \
                  (["--stand-in"] if args.stand_in else [])
        started = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"{name}: no answer within {args.timeout:g} s", file=sys.stderr)
            continue
        if done.returncode != 0:
            print(f"{name}: exit {done.returncode}\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        op_rows = json.loads(done.stdout.strip().splitlines()[-1])
        for row in op_rows:
            row["process_s"] = time.perf_counter() - started if row is op_rows[0] else 0.0
        rows.extend(op_rows)
    keys = ["imports_s", "cuda_s", "build_s", "build_again_s", "standin_s", "expected_s", "first_call_s",
            "warm_call_s", "allocated_gb", "process_s"]
    keys = [k for k in keys if any(k in row for row in rows)]
    print(f"{'op[shape]':<58}" + "".join(f"{k[:-2] if k.endswith('_s') else k:>13}" for k in keys))
    for row in rows:
        print(f"{row['op'] + '[' + row['shape'] + ']':<58}" + "".join(f"{row.get(k, 0.0):>13.3f}" for k in keys))
    totals = {k: sum(row.get(k, 0.0) for row in rows) for k in keys}
    print(f"{'total':<58}" + "".join(f"{totals[k]:>13.3f}" for k in keys))
    if totals.get("standin_s"):
        print(f"build / standin: {totals['build_again_s'] / totals['standin_s']:.1f}x "
              f"({totals['build_again_s']:.2f} s drawn, {totals['standin_s']:.2f} s tiled; second builds both)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
