"""What drawing a cell's inputs costs: on the CPU then copied to the device, against drawn on the device.

    python benchmarks/probes/input_draws.py [--device cuda] [--repeats 5]

For a few operand sizes of the campaigns (router_gemm's 16384 x 7168, mm's
4096 x 4096, topk's rows), each way in turn in one process, ``repeats`` times:
the median seconds of each and their ratio.  The campaigns draw on the device
(``campaigns/_kernels/inputs.py``); the CPU way is what they did before.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable

SIZES = ((16384, 7168), (4096, 4096), (8192, 8192))


def seconds(draw: Callable[[], Any], sync: Callable[[], None]) -> float:
    started = time.perf_counter()
    draw()
    sync()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to compare", file=sys.stderr)
        return 2
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    torch.zeros(1, device=args.device)
    sync()  # the context exists before anything is timed

    def on_cpu(size: tuple[int, int]) -> Any:
        gen = torch.Generator().manual_seed(1)
        return torch.randn(*size, generator=gen).to(torch.bfloat16).to(args.device)

    def on_device(size: tuple[int, int]) -> Any:
        gen = torch.Generator(device=args.device).manual_seed(1)
        return torch.randn(*size, generator=gen, device=args.device).to(torch.bfloat16)

    print(f"{'size':<14} {'cpu + copy s':>13} {'on device s':>12} {'ratio':>8}   ({args.repeats} repeats each, medians)")
    for size in SIZES:
        cpu, dev = [], []
        for _ in range(args.repeats):  # alternating, so drift hits both ways alike
            cpu.append(seconds(lambda: on_cpu(size), sync))
            dev.append(seconds(lambda: on_device(size), sync))
        c, d = statistics.median(cpu), statistics.median(dev)
        print(f"{size[0]}x{size[1]:<9} {c:13.4f} {d:12.4f} {c / d if d else float('inf'):7.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
