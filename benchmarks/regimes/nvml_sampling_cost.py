"""Does reading NVML at each timed window's edges move the timing?  One process, the plugin's own graph timer
(``child/timers.py GraphWindows``) and sampler (``child/gpustate.py``): for each kernel, after it ran until the
card settled (the steady regime's state), rounds of three arms in turn, each arm a block of windows back to back
as a steady cell times them:

- ``without``: ``GraphWindows.windows`` with no read at the edges;
- ``with``: the same with the cell's reads, made while the GPU runs the next replay (what a cell does);
- ``idle``: the edges read between windows with the GPU idle (``timers.windows_in_turn``, what the direct timer
  does), which leaves a gap of one read before each window.

Per kernel: the median time per call each way and the paired delta against ``without`` (per round, the block's
median) with its 95% t-interval over rounds.

    PYTHONPATH=. python benchmarks/regimes/nvml_sampling_cost.py            # on a GPU, about two minutes
    PYTHONPATH=. python benchmarks/regimes/nvml_sampling_cost.py --pairs 6   # quicker, wider intervals

Needs torch and nvidia-ml-py; nothing is set on the GPU.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pytest_abbench.report.stats import interval, pct

ARMS = ("without", "with", "idle")
ORDERS = list(itertools.permutations(ARMS))


def kernels() -> dict[str, Callable[[], Any]]:
    """Calls of the sizes the A/A campaign times: a tiny and a large copy, a small and a large bf16 mm."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    out: dict[str, Callable[[], Any]] = {}
    for n in (4096, 33554432):
        src = torch.randn(n, generator=g, device="cuda")
        dst = torch.empty_like(src)
        out[f"copy n={n}"] = lambda src=src, dst=dst: dst.copy_(src)
    for m in (512, 8192):
        a = torch.randn(m, m, generator=g, device="cuda").to(torch.bfloat16)
        b = torch.randn(m, m, generator=g, device="cuda").to(torch.bfloat16)
        out[f"mm {m}^3 bf16"] = lambda a=a, b=b: a @ b
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=12, help="rounds of the three arms, per kernel")
    parser.add_argument("--block", type=int, default=5, help="windows back to back in one arm's block")
    parser.add_argument("--window-ms", type=float, default=100.0, help="one window's length (the steady default)")
    parser.add_argument("--settle-s", type=float, default=3.0, help="untimed run before each kernel's pairs")
    args = parser.parse_args(argv)
    if args.pairs < 2:
        parser.error(f"--pairs must be at least 2, got {args.pairs}")

    from pytest_abbench.child.gpustate import open_sampler
    from pytest_abbench.child.timers import GraphWindows, windows_in_turn

    sampler = open_sampler("cuda")
    if sampler.not_recorded is not None:
        print(f"NVML unavailable: {sampler.not_recorded}; nothing to compare")
        return 2
    print(f"# {sampler.describe()}; per kernel {args.pairs} rounds of the three arms, each a block of {args.block} "
          f"{args.window_ms:g} ms windows, the order cycling through all six, after {args.settle_s:g} s untimed")
    print(f"{'kernel':<18} {'arm':<5} {'ms/call':>10} {'delta vs without':>17} {'95% CI':>18}")
    worst = 0.0
    read_ms: list[float] = []
    for name, fn in kernels().items():
        timer = GraphWindows(fn, args.window_ms)
        timer.run_for(args.settle_s)
        times: dict[str, list[float]] = {arm: [] for arm in ARMS}

        def read() -> None:
            started = time.perf_counter()
            sampler.start()
            read_ms.append((time.perf_counter() - started) * 1e3)

        for index in range(args.pairs):
            # All six orders in turn: within a round each arm comes right after each other arm equally often, so
            # what a block follows is balanced.
            for arm in ORDERS[index % len(ORDERS)]:
                if arm == "idle":
                    blocks = windows_in_turn(timer, args.block, read)
                else:
                    blocks = timer.windows(args.block, read if arm == "with" else (lambda: None))
                times[arm].append(statistics.median(ms for samples, _ in blocks for ms in samples))
        base = times["without"]
        print(f"{name:<18} {'without':<5} {statistics.median(base):>10.5f}")
        for arm in ("with", "idle"):
            ratios = [math.log(x / y) for x, y in zip(times[arm], base)]
            ci = interval(ratios)
            low, high = ci if ci is not None else (math.nan, math.nan)
            delta = pct(statistics.median(ratios))
            worst = max(worst, abs(delta)) if arm == "with" else worst
            print(f"{name:<18} {arm:<5} {statistics.median(times[arm]):>10.5f} {delta:>+16.3f}% "
                  f"{pct(low):>+8.3f} ~ {pct(high):+.3f}%")
    print(f"largest median delta with the cell's reads: {worst:.3f}%; one edge read took "
          f"{statistics.median(read_ms):.2f} ms (median of {len(read_ms)}, max {max(read_ms):.2f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
