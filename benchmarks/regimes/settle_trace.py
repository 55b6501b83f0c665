"""What holds a steady settling back: each judgement of ``child/regime.py`` ``settle`` over time, per kernel.

Per kernel (torch's layer_norm 16384x1024 and 8192x4096, a bf16 mm 4096^3), ``--repeats`` times with a second's
idle between: the product's steady settling with the graph timer, and at each judgement (every 50 ms once
``STEADY_MIN_S`` has passed) the elapsed time, whether the power cap was judged held, the clock, the counter's
power, the temperature and what had not settled yet.  Consecutive judgements with the same reasons are folded
into one line.  Then per kernel the settling times and how often each reason held a judgement back.

    PYTHONPATH=. python benchmarks/regimes/settle_trace.py              # about 60 s on the H200
    PYTHONPATH=. python benchmarks/regimes/settle_trace.py --record $OUT/settle.jsonl --hold 8

``--record FILE`` keeps every reading and counter poll of each settling (JSON lines, ``settle_replay.Trace``) and
runs each settling on to ``--hold`` seconds past its start (at most the rule's bound) whatever the rule said, so
``benchmarks/regimes/settle_replay.py`` can try other constants on the card's own readings without a GPU.

Needs torch with CUDA and nvidia-ml-py.  Reads NVML only: no clock, power limit or other setting is changed.
Exit 2 with one line where there is no GPU or no NVML.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import settle_replay
from gpu_sampler import cuda_sampler
from pytest_abbench.child import regime
from pytest_abbench.child.timers import GraphWindows
from pytest_abbench.core import regimes
from pytest_abbench.core.cellconfig import DEFAULT_DIRECT_REP_MS


def kernels() -> dict[str, Callable[[], Any]]:
    import torch

    out: dict[str, Callable[[], Any]] = {}
    def layer_norm(rows: int, cols: int) -> Callable[[], Any]:
        x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
        return lambda: torch.nn.functional.layer_norm(x, (cols,))

    for rows, cols in ((16384, 1024), (8192, 4096)):
        out[f"layer_norm {rows}x{cols}"] = layer_norm(rows, cols)
    s = torch.randn(32768, 1024, device="cuda", dtype=torch.bfloat16)
    out["softmax 32768x1024"] = lambda: torch.softmax(s, dim=-1)  # ATen's held at the cap (1875-1905 MHz)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    out["mm 4096^3"] = lambda: a @ b
    return out


def record(path: Path, kernel: str, repeat: int, start: float, judged_with: tuple[Any, ...] | None) -> None:
    """One settling's readings, times and counter polls, as ``judge`` last saw them, appended to ``path``."""
    if judged_with is None:
        return
    readings, max_clock, times, limit, counter = judged_with  # settle's positional arguments to judge
    trace = settle_replay.Trace(kernel, repeat, max_clock, limit, start, list(times), list(readings),
                                [tuple(point) for point in counter or []])
    with path.open("a") as out:
        out.write(json.dumps(trace.to_json()) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--record", type=Path, help="keep every reading of each settling here (JSON lines)")
    parser.add_argument("--hold", type=float, default=8.0,
                        help="with --record: run each settling this long whatever the rule says (default 8 s)")
    args = parser.parse_args()
    if args.record is not None:
        args.record.unlink(missing_ok=True)
        if args.hold > regimes.STEADY_MAX_S:
            print(f"# --hold {args.hold:g} s: each settling ends at the rule's bound, {regimes.STEADY_MAX_S:g} s")
    sampler = cuda_sampler("settle_trace")
    if isinstance(sampler, str):
        print(sampler)
        return 2
    import torch
    judged: list[tuple[float, regime.Judgement]] = []
    original = regime.judge
    began = [0.0]
    seen_by_settle: list[tuple[Any, ...]] = []  # the last arguments settle passed to judge: every reading so far

    def traced(*a: Any, **k: Any) -> regime.Judgement:
        seen = original(*a, **k)
        elapsed = time.monotonic() - began[0]
        seen_by_settle[:] = [a]
        judged.append((elapsed, seen))
        if args.record is not None and elapsed < args.hold and seen.settled:
            return regime.Judgement(False, unsettled=["recording"])  # read on: the replay needs what follows
        return seen

    regime.judge = traced
    print(f"# {torch.cuda.get_device_name()}, power limit {sampler.settings().get('power_limit_w')} W")
    for name, fn in kernels().items():
        timer = GraphWindows(fn, DEFAULT_DIRECT_REP_MS)  # a steady cell's window, as --ab-direct-rep defaults
        held: Counter[str] = Counter()
        took = []
        for repeat in range(1, args.repeats + 1):
            judged.clear()
            seen_by_settle.clear()
            began[0] = time.monotonic()
            settling = regime.settle(timer, sampler, cpu=False, pace=regime.Pace())
            timer.drain()
            torch.cuda.synchronize()
            if args.record is not None:
                record(args.record, name, repeat, began[0], seen_by_settle[0] if seen_by_settle else None)
                first = next((i for i, (_, j) in enumerate(judged) if j.settled), None)
                if first is not None:  # what the rule said, not the recording's run past it
                    settling = regime.Settling(regimes.MET, judged[first][0], "(recorded on past the rule's answer)")
                    del judged[first + 1:]
            took.append(settling.waited_s)
            print(f"== {name} #{repeat}: {settling.condition} after {settling.waited_s:.2f} s: {settling.detail}")
            last = None
            for elapsed, seen in judged:
                kinds = [re.sub(r"[-\d.>]+", "", u).strip() for u in seen.unsettled]
                held.update(kinds)
                key = (tuple(kinds), seen.at_cap)
                if key != last:
                    power = "-" if seen.counter_power_w is None else f"{seen.counter_power_w:.0f}"
                    print(f"   {elapsed:6.2f} s  cap {'yes' if seen.at_cap else 'no ':3}  {seen.clock_mhz or 0:5.0f} MHz "
                          f"{power:>4} W  {seen.temperature_c or 0:3.0f} C  {'; '.join(seen.unsettled) or 'settled'}")
                last = key
            time.sleep(1.0)
        print(f"-- {name}: settled in {', '.join(f'{t:.2f}' for t in took)} s; judgements held back by: "
              + (", ".join(f"{k} {n}" for k, n in held.most_common()) or "nothing"))
    print(f"(a judgement every {regimes.STEADY_CHUNK_MS} ms from {regimes.STEADY_MIN_S:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
