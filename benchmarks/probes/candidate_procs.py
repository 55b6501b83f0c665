"""A precompile share's autotuned kernel compiled by one process against several side by side, on this machine.

Runs the real compile-only child (compile-all, as the precompile runs it; for the IR target, so no GPU is
needed) for one op's share of the shapes, with ``--candidate-procs 1`` and ``N`` in turn, each run with an
empty Triton cache, and prints each run's wall time, the medians and their ratio.

    python3 benchmarks/probes/candidate_procs.py campaigns/liger.py swiglu_mlp --procs 2 --runs 3 [--shard 0/2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pytest_abbench.core.cellconfig import CHILD_MODULE, CellConfig  # noqa: E402


def one_run(campaign: Path, op: str, level: str, target: str, shard: str, procs: int) -> tuple[float, str]:
    """One compile-only child with an empty Triton cache: its wall time and its last abbench log lines."""
    with tempfile.TemporaryDirectory(prefix="candidate-procs-") as folder:
        config = CellConfig(campaign=campaign.resolve(), op=op, round_no=1, side="A", role="A",
                            out=Path(folder) / "cell", backend="cuda", timer="cudagraph", level=level,
                            ir_target=target, ir_only=True, autotune_mode="compile-all", shard=shard,
                            candidate_procs=procs)
        env = {**os.environ, "TRITON_CACHE_DIR": str(Path(folder) / "triton-cache"), "ABBENCH_PASS_DUMP": "0"}
        env.pop("TRITON_INTERPRET", None)
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", CHILD_MODULE, *config.to_argv()], env=env,
                              capture_output=True, text=True)
        wall = time.monotonic() - started
        if done.returncode != 0:
            raise SystemExit(f"--candidate-procs {procs}: rc {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("[abbench]")]
        return wall, "\n".join(lines[-2:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("campaign", type=Path)
    parser.add_argument("op")
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--level", default="core")
    parser.add_argument("--target", default="cuda:90")
    parser.add_argument("--shard", default="0/2", help="I/N: the share of the op's shapes (a precompile share's)")
    args = parser.parse_args()
    walls: dict[int, list[float]] = {1: [], args.procs: []}
    for run in range(args.runs):
        for procs in (args.procs, 1):  # in turn, so a drift of the machine's speed falls on both
            wall, lines = one_run(args.campaign, args.op, args.level, args.target, args.shard, procs)
            walls[procs].append(wall)
            print(f"run {run + 1} --candidate-procs {procs}: {wall:.1f} s\n{lines}", flush=True)
    one, many = statistics.median(walls[1]), statistics.median(walls[args.procs])
    print(f"median wall: 1 process {one:.1f} s, {args.procs} processes {many:.1f} s; ratio {many / one:.2f} "
          f"({os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
