"""Does reading NVML at each timed window's edges move the timing?  One process, the plugin's own graph timer
(``child/timers.py GraphWindows``) and sampler (``child/gpustate.py``): for each kernel, windows with the two
edge reads a cell makes (``sampler.start()`` before, ``sampler.finish()`` after) alternate with windows without
them, after the kernel ran until the card settled (the steady regime's state).  Per kernel: the median time per
call each way and the paired delta (with / without) with its 95% t-interval over pairs.

    PYTHONPATH=. python benchmarks/nvml_sampling_cost.py            # on a GPU, about a minute
    PYTHONPATH=. python benchmarks/nvml_sampling_cost.py --pairs 5   # quicker, wider intervals

A third arm, ``busy``, makes the same reads while an untimed replay keeps the GPU running, so the reads leave no
idle gap between windows: if ``with`` moves a kernel and ``busy`` does not, the gap is the cause, not the reads.

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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_abbench.report.stats import interval, pct

ORDERS = list(itertools.permutations(("without", "with", "busy")))


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
    parser.add_argument("--pairs", type=int, default=20, help="windows of each arm, per kernel")
    parser.add_argument("--window-ms", type=float, default=100.0, help="one window's length (the steady default)")
    parser.add_argument("--settle-s", type=float, default=3.0, help="untimed run before each kernel's pairs")
    args = parser.parse_args(argv)
    if args.pairs < 2:
        parser.error(f"--pairs must be at least 2, got {args.pairs}")

    from pytest_abbench.child.gpustate import open_sampler
    from pytest_abbench.child.timers import GraphWindows

    sampler = open_sampler("cuda")
    if sampler.not_recorded is not None:
        print(f"NVML unavailable: {sampler.not_recorded}; nothing to compare")
        return 2
    print(f"# NVML on {sampler.describe()}; {args.pairs} rounds of the three arms' {args.window_ms:g} ms windows per "
          f"kernel, the order cycling through all six, after {args.settle_s:g} s untimed")
    print(f"{'kernel':<18} {'arm':<5} {'ms/call':>10} {'delta vs without':>17} {'95% CI':>18}")
    worst = 0.0
    read_ms: list[float] = []
    for name, fn in kernels().items():
        timer = GraphWindows(fn, args.window_ms)
        timer.run_for(args.settle_s)
        times: dict[str, list[float]] = {"without": [], "with": [], "busy": []}

        def reads() -> None:
            started = time.perf_counter()
            sampler.finish(sampler.start())  # the two edges a window gets, back to back
            read_ms.append((time.perf_counter() - started) * 1e3)

        for index in range(args.pairs):
            # All six orders in turn: within a round each arm comes right after each other arm equally often, so
            # what a window follows (an idle gap after reads, the busy arm's extra replay) is balanced.
            for arm in ORDERS[index % len(ORDERS)]:
                if arm == "with":
                    edge = sampler.start()
                    samples, _ = timer.window()
                    sampler.finish(edge)
                    times[arm] += samples
                elif arm == "busy":
                    samples, _ = timer.window()
                    times[arm] += samples
                    import torch

                    with torch.cuda.stream(timer.stream):
                        timer.graph.replay()  # untimed: the GPU stays busy while NVML is read
                    reads()
                    torch.cuda.synchronize()
                else:
                    times[arm] += timer.window()[0]
        base = times["without"]
        print(f"{name:<18} {'without':<5} {statistics.median(base):>10.5f}")
        for arm in ("with", "busy"):
            ratios = [math.log(x / y) for x, y in zip(times[arm], base)]
            ci = interval(ratios)
            low, high = ci if ci is not None else (math.nan, math.nan)
            delta = pct(statistics.median(ratios))
            worst = max(worst, abs(delta)) if arm == "with" else worst
            print(f"{name:<18} {arm:<5} {statistics.median(times[arm]):>10.5f} {delta:>+16.3f}% "
                  f"{pct(low):>+8.3f} ~ {pct(high):+.3f}%")
    print(f"largest median delta with the reads: {worst:.3f}%; two edge reads took {statistics.median(read_ms):.2f} ms "
          f"(median of {len(read_ms)}, max {max(read_ms):.2f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
