"""Whether a steady shape's energy span (``child/regime.py`` ``energy_span``) gives the power the card drew over its
timed windows, and what the energy counter's polls cost.

Per kernel (a bf16 mm 4096^3 that runs at the power cap, a layer_norm 8192x4096 that does not), ``--repeats`` times:
a steady run as a cell does it (``run_regime`` with the graph timer and NVML, ten windows of ``--window-ms``), then
the kernel kept queued for ``--long-s`` more while the counter is polled: the long-run power over that stretch, from
its first to its last update.  Printed per repeat: the span's length, its edge error, its power, the long-run power
and the span's difference from it; NVML's averaged figure after the last window; the windows' own counter power
(their edges' reads, what the report used before spans).  Then a summary: the largest difference, and how long one
``energy_mj`` poll and one full ``read`` take.

    PYTHONPATH=. python benchmarks/regimes/energy_span.py                    # about 60 s on the H200
    PYTHONPATH=. python benchmarks/regimes/energy_span.py --repeats 3 --kernels mm

Needs torch with CUDA and nvidia-ml-py.  Reads NVML only: no clock, power limit or other setting is changed.
Exit 2 with one line where there is no GPU or no NVML.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

from gpu_sampler import cuda_sampler
from pytest_abbench.child.gpustate import GpuSampler
from pytest_abbench.child.regime import CounterPoint, Pace, counter_updates, poll_counter, run_regime
from pytest_abbench.child.timers import GraphWindows
from pytest_abbench.core import regimes
from pytest_abbench.core.cellconfig import DEFAULT_DIRECT_REP_MS
from pytest_abbench.core.results import pool_energy


def kernels(names: list[str]) -> dict[str, Callable[[], Any]]:
    import torch

    out: dict[str, Callable[[], Any]] = {}
    if "mm" in names:
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        out["mm 4096^3 bf16"] = lambda: a @ b
    if "layer_norm" in names:
        x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
        out["layer_norm 8192x4096 bf16"] = lambda: torch.nn.functional.layer_norm(x, (4096,))
    return out


def long_run_power(timer: GraphWindows, sampler: GpuSampler, seconds: float) -> float | None:
    """The counter's power over about ``seconds`` of the kernel kept queued: first update to last."""
    points: list[CounterPoint] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        poll_counter(timer, sampler, Pace(), points)
    updates = counter_updates(points)
    if len(updates) < 2:
        return None
    return (updates[-1].energy_mj - updates[0].energy_mj) / 1e3 / (updates[-1].at - updates[0].at)


def cost_ms(call: Callable[[], Any], times: int = 200) -> float:
    start = time.perf_counter()
    for _ in range(times):
        call()
    return (time.perf_counter() - start) / times * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--window-ms", type=float, default=DEFAULT_DIRECT_REP_MS,
                        help="each timed window (--ab-direct-rep's default, as a steady cell asks for)")
    parser.add_argument("--long-s", type=float, default=4.0)
    parser.add_argument("--kernels", default="mm,layer_norm")
    args = parser.parse_args()
    sampler = cuda_sampler("energy_span")
    if isinstance(sampler, str) or sampler.energy_mj() is None:
        print(sampler if isinstance(sampler, str) else f"energy_span: NVML gives no energy counter on {sampler.device}")
        return 2
    import torch
    print(f"# {torch.cuda.get_device_name()}, {sampler.describe()}, power limit "
          f"{sampler.settings().get('power_limit_w')} W; polls every {regimes.ENERGY_POLL_S * 1e3:g} ms")
    worst = 0.0
    for name, fn in kernels(args.kernels.split(",")).items():
        timer = GraphWindows(fn, args.window_ms)
        print(f"== {name}: {timer.calls} calls a replay, {timer.replay_ms:.1f} ms a replay")
        print("repeat  settled                   span s  edge ms  span W  long-run W  span vs long  NVML avg W  "
              "windows' own W")
        for repeat in range(1, args.repeats + 1):
            timing = run_regime(regimes.STEADY, timer, sampler, 10, cpu=False, pace=Pace())
            after = timing.windows[-1].gpu_state.after
            averaged = "-" if after is None or after.power_w is None else f"{after.power_w:.0f}"
            own = pool_energy([(w.gpu_state, w.calls) for w in timing.windows])
            own_w = "-" if own is None or not own.window_s else f"{own.energy_mj / 1e3 / own.window_s:.0f}"
            reference = long_run_power(timer, sampler, args.long_s)
            span = timing.energy_span
            condition = f"{timing.windows[0].condition} {timing.windows[0].waited_s:.2f}s"
            if span is None or reference is None:
                print(f"{repeat:>6}  {condition:<24}  no span (span {span}, long run {reference})")
                worst = float("inf")
                continue
            power = span.energy_mj / 1e3 / span.seconds
            off = power / reference - 1.0
            worst = max(worst, abs(off))
            print(f"{repeat:>6}  {condition:<24}  {span.seconds:6.3f}  {span.edge_error_s * 1e3:7.1f}  {power:6.0f}  "
                  f"{reference:10.0f}  {off:+11.2%}  {averaged:>10}  {own_w:>14}")
            torch.cuda.synchronize()
            time.sleep(1.0)  # the next repeat settles from a short idle, as the next cell's shape would
    print(f"summary: largest |span - long run| {worst:.2%} of the long-run power")
    print(f"summary: one energy_mj poll {cost_ms(sampler.energy_mj):.3f} ms, one full read "
          f"{cost_ms(sampler.read, 50):.3f} ms (median of loops; the GPU idle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
