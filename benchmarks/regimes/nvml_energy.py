"""How often NVML's energy counter moves, by how much, and from what window length energy over time gives the
power; beside it NVML's averaged power figure (and the instantaneous one, where this pynvml and driver give it).

The report's energy per call and its power figure come from ``nvmlDeviceGetTotalEnergyConsumption`` (mJ) read at
the edges of timed windows.  A read returns the value of the driver's last update, so a window's energy is off by
up to one update's energy: ``ENERGY_COUNTER_UPDATE_S`` in ``pytest_abbench/core/results.py`` is that update period,
and the figure this script prints is what to set it to.

One process polls the counter in a tight loop (and the two power figures every ``--power-every-ms``) through three
phases: the GPU idle, a bf16 4096^3 matmul replayed as a CUDA graph back to back, and a small elementwise kernel
(1M floats) the same way.  Per phase it prints

- the time between counter changes (min / median / p90), and how often the loop polled;
- the counter's steps in mJ (min / median / p90, and the smallest non-zero step);
- per window length from 1 ms to 2 s, how far energy / window time strays from the phase's long-window power (the
  5th and 95th percentile of windows), and the smallest length at which 90% of windows are within 5%;
- per window length from 10 ms to 1 s: the median counter power, NVML's averaged power read at the window's end,
  and the instantaneous field's mean inside the window;

then how NVML's averaged figure follows the load's start (the lag the report's old power figure showed), and a
summary block.

    PYTHONPATH=. python benchmarks/regimes/nvml_energy.py                 # about 75 s
    PYTHONPATH=. python benchmarks/regimes/nvml_energy.py --seconds 30    # quicker, fewer windows per length

Needs torch with CUDA and nvidia-ml-py.  It reads NVML only: no clock, power limit or other setting is changed.
Exit 2 with one line where there is no GPU or no NVML.
"""

from __future__ import annotations

import argparse
import bisect
import math
import statistics
import sys
import threading
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

NO_DEVICE = 2
AGREE_PCT = 5.0  # "agrees with the long-window figure": within this many percent
AGREE_SHARE = 0.9  # ... for this share of the windows (the 5th to the 95th percentile)
WINDOWS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)  # the agreement sweep
POWER_WINDOWS_MS = (10, 20, 50, 100, 200, 500, 1000)  # counter power against NVML's averaged figure
SETTLE_SHARE = 0.25  # of a busy phase: the load's start, left out of the long-window figures (clocks, power cap)
VALUE_TYPES = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # nvmlValueType_t order


@dataclass
class Trace:
    """One phase's polls: each counter change (when the loop first saw it, the poll before it, the new value) and
    the power figures read every few ms."""

    name: str
    start: float
    end: float = 0.0
    polls: int = 0
    first_mj: float = 0.0
    seen_at: array = field(default_factory=lambda: array("d"))  # the first poll that saw a new value
    last_old_at: array = field(default_factory=lambda: array("d"))  # the poll before it (still the old value)
    value_mj: array = field(default_factory=lambda: array("d"))
    power_at: array = field(default_factory=lambda: array("d"))
    avg_w: array = field(default_factory=lambda: array("d"))  # nvmlDeviceGetPowerUsage
    instant_w: array = field(default_factory=lambda: array("d"))  # NVML_FI_DEV_POWER_INSTANT; nan where not given

    def read_at(self, t: float) -> float:
        """The counter as a read at ``t`` returned it: the last value the loop had seen by then."""
        seen = bisect.bisect_right(self.seen_at, t)
        return self.value_mj[seen - 1] if seen else self.first_mj

    def power_after(self, t: float, within_s: float = 0.05) -> int | None:
        """The index of the first power read at or after ``t`` (within ``within_s``), or None."""
        index = bisect.bisect_left(self.power_at, t)
        return index if index < len(self.power_at) and self.power_at[index] < t + within_s else None


def quantiles(values: Sequence[float]) -> tuple[float, float, float]:
    """min, median, p90."""
    ordered = sorted(values)
    return ordered[0], statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))]


def update_periods_ms(trace: Trace) -> list[float]:
    """Time between successive counter changes, in ms (each change timed at the first poll that saw it)."""
    return [(b - a) * 1e3 for a, b in zip(trace.seen_at, trace.seen_at[1:])]


def steps_mj(trace: Trace) -> list[float]:
    """The counter's increase at each change."""
    values = [trace.first_mj, *trace.value_mj]
    return [b - a for a, b in zip(values, values[1:])]


def long_power_w(trace: Trace, start: float, end: float) -> float | None:
    """Energy over time from ``start`` to ``end``, each end timed where the counter changed (so neither end lags)."""
    inside = [i for i, t in enumerate(trace.seen_at) if start <= t <= end]
    if len(inside) < 2:
        return None
    first, last = inside[0], inside[-1]
    span = trace.seen_at[last] - trace.seen_at[first]
    return (trace.value_mj[last] - trace.value_mj[first]) / span / 1e3 if span > 0 else None


def window_powers_w(trace: Trace, start: float, end: float, length_s: float, count: int = 400) -> list[float]:
    """Energy over time of ``count`` windows of ``length_s`` spread over [start, end - length], each read as a
    cell reads one: the counter at each edge."""
    room = end - length_s - start
    if room <= 0:
        return []
    starts = [start + room * (i + 0.5) / count for i in range(count)]
    return [(trace.read_at(t + length_s) - trace.read_at(t)) / length_s / 1e3 for t in starts]


def agreement(trace: Trace, start: float, end: float, reference_w: float) -> list[tuple[int, float, float, bool]]:
    """Per window length: the 5th and 95th percentile of the windows' error against ``reference_w`` (percent),
    and whether 90% of them are within ``AGREE_PCT``."""
    rows = []
    for ms in WINDOWS_MS:
        powers = window_powers_w(trace, start, end, ms / 1e3)
        if not powers:
            continue
        errors = [100.0 * (p / reference_w - 1.0) for p in powers]
        low, high = percentile(errors, (1 - AGREE_SHARE) / 2), percentile(errors, 1 - (1 - AGREE_SHARE) / 2)
        rows.append((ms, low, high, max(abs(low), abs(high)) <= AGREE_PCT))
    return rows


def smallest_agreeing_ms(rows: Sequence[tuple[int, float, float, bool]]) -> int | None:
    """The shortest window length from which every longer one agrees too."""
    found = None
    for ms, _, _, agrees in reversed(rows):
        if not agrees:
            break
        found = ms
    return found


def power_against_counter(trace: Trace, start: float, end: float) -> list[tuple[int, float, float, float]]:
    """Per window length: the median over windows of the counter's power, of NVML's averaged power read at the
    window's end, and of the instantaneous field's mean inside it (nan where not given)."""
    rows = []
    for ms in POWER_WINDOWS_MS:
        length = ms / 1e3
        room = end - length - start
        if room <= 0:
            continue
        counter, averaged, instant = [], [], []
        for i in range(200):
            t0 = start + room * (i + 0.5) / 200
            t1 = t0 + length
            counter.append((trace.read_at(t1) - trace.read_at(t0)) / length / 1e3)
            at_end = trace.power_after(t1)
            if at_end is not None:
                averaged.append(trace.avg_w[at_end])
            first, last = bisect.bisect_left(trace.power_at, t0), bisect.bisect_right(trace.power_at, t1)
            inside = [w for w in trace.instant_w[first:last] if not math.isnan(w)]
            if inside:
                instant.append(statistics.fmean(inside))
        rows.append((ms, statistics.median(counter), statistics.median(averaged) if averaged else math.nan,
                     statistics.median(instant) if instant else math.nan))
    return rows


def load_start(trace: Trace, bin_ms: float = 100.0, until_s: float = 3.0) -> list[tuple[float, float, float, float]]:
    """After the load starts, per ``bin_ms`` bin: the counter's power over the bin, NVML's averaged power and the
    instantaneous field at the bin's end (nan where not given)."""
    rows = []
    t = trace.start
    while t + bin_ms / 1e3 <= min(trace.end, trace.start + until_s):
        t1 = t + bin_ms / 1e3
        counter = (trace.read_at(t1) - trace.read_at(t)) / (bin_ms / 1e3) / 1e3
        near = trace.power_after(t1)
        avg = trace.avg_w[near] if near is not None else math.nan
        instant = trace.instant_w[near] if near is not None else math.nan
        rows.append((t1 - trace.start, counter, avg, instant))
        t = t1
    return rows


class Nvml:
    """The three reads this script makes, on one device handle; the instantaneous field only where it answers."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml, self.handle = nvml, handle
        self.instant_field = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        self.instant_why = "" if self.instant_field is not None else "this pynvml has no NVML_FI_DEV_POWER_INSTANT"
        if self.instant_field is not None and math.isnan(self.instant_w()):
            self.instant_field = None

    def energy_mj(self) -> float:
        return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    def avg_w(self) -> float:
        return float(self.nvml.nvmlDeviceGetPowerUsage(self.handle)) / 1e3

    def instant_w(self) -> float:
        if self.instant_field is None:
            return math.nan
        try:
            [value] = self.nvml.nvmlDeviceGetFieldValues(self.handle, [self.instant_field])
        except Exception as exc:  # NVMLError_NotSupported, a driver without field values
            self.instant_why = f"{type(exc).__name__}: {exc}"
            return math.nan
        if value.nvmlReturn != 0:
            self.instant_why = f"NVML returned {value.nvmlReturn} for NVML_FI_DEV_POWER_INSTANT"
            return math.nan
        return float(getattr(value.value, VALUE_TYPES[value.valueType])) / 1e3  # milliwatts


def poll(reader: Nvml, name: str, seconds: float, power_every_s: float) -> Trace:
    """Poll the counter as fast as the loop goes for ``seconds``, and the power figures every ``power_every_s``."""
    now = time.perf_counter
    trace = Trace(name, now())
    last = trace.first_mj = reader.energy_mj()
    previous_poll = trace.start
    next_power = trace.start
    end = trace.start + seconds
    while True:
        value = reader.energy_mj()
        t = now()
        trace.polls += 1
        if value != last:
            trace.seen_at.append(t)
            trace.last_old_at.append(previous_poll)
            trace.value_mj.append(value)
            last = value
        previous_poll = t
        if t >= next_power:
            avg, instant = reader.avg_w(), reader.instant_w()
            trace.power_at.append(now())
            trace.avg_w.append(avg)
            trace.instant_w.append(instant)
            next_power = t + power_every_s
        if t >= end:
            trace.end = t
            return trace


class Load:
    """A CUDA graph of ``per_graph`` calls replayed back to back by a thread, at most a few replays queued, so the
    polling loop keeps the CPU; ``stop`` waits for the GPU to finish."""

    def __init__(self, fn: Callable[[], Any], per_graph: int) -> None:
        import torch

        self.torch = torch
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            for _ in range(per_graph):
                fn()
        torch.cuda.synchronize()
        self.running = False
        self.thread: threading.Thread | None = None

    def _run(self) -> None:
        queued: list[Any] = []
        while self.running:
            self.graph.replay()
            event = self.torch.cuda.Event()
            event.record()
            queued.append(event)
            if len(queued) > 3:
                queued.pop(0).synchronize()
        self.torch.cuda.synchronize()

    def start(self) -> None:
        self.running = True
        self.thread = threading.Thread(target=self._run, name="nvml-energy-load", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.running = False
        if self.thread is not None:
            self.thread.join()


def loads() -> dict[str, Load]:
    """A compute-bound and a small memory-bound kernel, each as a graph of about 10-50 ms of work."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(4096, 4096, generator=g, device="cuda").to(torch.bfloat16)
    b = torch.randn(4096, 4096, generator=g, device="cuda").to(torch.bfloat16)
    c = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1 << 20, generator=g, device="cuda")
    y = torch.empty_like(x)
    return {"bf16 mm 4096^3": Load(lambda: torch.mm(a, b, out=c), 50),
            "elementwise mul 1M floats": Load(lambda: torch.mul(x, 1.0001, out=y), 2000)}


def open_device() -> tuple[Nvml, str] | str:
    """NVML's reader of the CUDA device this process sees, with its name; or why there is none."""
    try:
        import pynvml
    except ImportError as exc:
        return f"nvidia-ml-py is not installed ({exc})"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return f"NVML did not start ({type(exc).__name__}: {exc})"
    try:
        import torch
    except ImportError as exc:
        return f"torch is not installed ({exc})"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    from pytest_abbench.child.gpustate import open_sampler

    sampler = open_sampler("cuda", nvml=pynvml)
    if sampler.not_recorded is not None:
        return sampler.not_recorded
    try:
        pynvml.nvmlDeviceGetTotalEnergyConsumption(sampler.handle)
    except Exception as exc:
        return f"the device has no energy counter ({type(exc).__name__}: {exc})"
    name = pynvml.nvmlDeviceGetName(sampler.handle)
    driver = pynvml.nvmlSystemGetDriverVersion()
    text = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731 (older pynvml gives bytes)
    return Nvml(pynvml, sampler.handle), f"{text(name)}, driver {text(driver)}"


def _fmt(value: float, spec: str = ".0f") -> str:
    return "-" if math.isnan(value) else format(value, spec)


def report_phase(trace: Trace, busy: bool) -> dict[str, Any]:
    """Print one phase's figures; return those the summary needs."""
    span = trace.end - trace.start
    print(f"\n== {trace.name}: {span:.1f} s, {trace.polls} polls (one every {1e3 * span / max(trace.polls, 1):.3f} "
          f"ms), {len(trace.seen_at)} counter changes")
    out: dict[str, Any] = {"name": trace.name}
    periods = update_periods_ms(trace)
    if len(periods) < 2:
        print("   the counter hardly moved: no update period")
        return out
    lo, med, p90 = quantiles(periods)
    out["period_ms"] = (lo, med, p90)
    print(f"   time between counter changes: min {lo:.2f} ms, median {med:.2f} ms, p90 {p90:.2f} ms")
    steps = steps_mj(trace)
    slo, smed, sp90 = quantiles(steps)
    out["step_mj"] = (min(s for s in steps if s > 0), smed)
    print(f"   counter steps: min {slo:g} mJ, median {smed:g} mJ, p90 {sp90:g} mJ "
          f"(smallest non-zero {out['step_mj'][0]:g} mJ)")
    start = trace.start + (SETTLE_SHARE * span if busy else 0.0)
    reference = long_power_w(trace, start, trace.end)
    if reference is None or reference <= 0:
        print("   no long-window power")
        return out
    out["long_w"] = reference
    print(f"   long-window power (counter, {trace.end - start:.1f} s): {reference:.1f} W")
    rows = agreement(trace, start, trace.end, reference)
    print(f"   window length -> energy/time against it, p5 ~ p95 of {400} windows (within {AGREE_PCT:g}%?)")
    for ms, low, high, agrees in rows:
        print(f"     {ms:>5} ms  {low:+8.1f}% ~ {high:+8.1f}%  {'yes' if agrees else 'no'}")
    out["agree_ms"] = smallest_agreeing_ms(rows)
    print("   window length -> median counter W, NVML averaged W at the window's end, instantaneous W inside")
    out["power_rows"] = power_against_counter(trace, start, trace.end)
    for ms, counter, averaged, instant in out["power_rows"]:
        print(f"     {ms:>5} ms  counter {counter:7.1f} W  averaged {_fmt(averaged, '7.1f')} W  "
              f"instant {_fmt(instant, '7.1f')} W")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="polling time in all (a fifth idle, the rest split between the two loads); default 60")
    parser.add_argument("--power-every-ms", type=float, default=5.0,
                        help="how often the loop also reads the two power figures; default 5")
    args = parser.parse_args(argv)
    if not 5.0 <= args.seconds <= 600.0:
        parser.error(f"--seconds must be from 5 to 600, got {args.seconds:g}")
    if args.power_every_ms <= 0:
        parser.error(f"--power-every-ms must be above 0, got {args.power_every_ms:g}")
    opened = open_device()
    if isinstance(opened, str):
        print(f"nvml_energy: no GPU to measure: {opened}")
        return NO_DEVICE
    reader, device = opened
    instant = ("NVML_FI_DEV_POWER_INSTANT" if reader.instant_field is not None
               else f"not given ({reader.instant_why})")
    print(f"# {device}; polling {args.seconds:g} s in all; power figures every {args.power_every_ms:g} ms; "
          f"instantaneous power: {instant}")
    # The load thread wakes briefly between replays; a short switch interval keeps it from holding the polling
    # loop off the interpreter for the default 5 ms.
    sys.setswitchinterval(0.0002)
    every = args.power_every_ms / 1e3
    kernels = loads()
    phases = [report_phase(poll(reader, "idle", args.seconds / 5, every), busy=False)]
    busy_s = args.seconds * 2 / 5
    starts = []
    for name, load in kernels.items():
        time.sleep(1.0)  # let the previous load's power fall off before the next one starts
        load.start()
        try:
            trace = poll(reader, name, busy_s, every)
        finally:
            load.stop()
        starts.append(trace)
        phases.append(report_phase(trace, busy=True))
    for trace in starts:
        print(f"\n== {trace.name}, the load's start, 100 ms bins: counter W over the bin, NVML averaged W and "
              "instantaneous W at its end")
        for at, counter, averaged, instant in load_start(trace):
            print(f"     {at:4.1f} s  counter {counter:7.1f}  averaged {_fmt(averaged, '7.1f')}  "
                  f"instant {_fmt(instant, '7.1f')}")
    print(f"\n== summary ({device})")
    periods = [p["period_ms"][1] for p in phases if "period_ms" in p]
    for p in phases:
        if "period_ms" not in p:
            print(f"   {p['name']}: the counter hardly moved")
            continue
        lo, med, p90 = p["period_ms"]
        agree = p.get("agree_ms")
        print(f"   {p['name']}: update every {med:.1f} ms (min {lo:.1f}, p90 {p90:.1f}); steps from "
              f"{p['step_mj'][0]:g} mJ, median {p['step_mj'][1]:g} mJ; within {AGREE_PCT:g}% of the long-window "
              f"{p.get('long_w', math.nan):.0f} W from " + (f"{agree} ms windows" if agree else "no window tried"))
        for ms, counter, averaged, _ in p.get("power_rows", []):
            if ms in (10, 100, 1000) and not math.isnan(averaged):
                print(f"      {ms} ms windows: counter {counter:.0f} W, NVML averaged {averaged:.0f} W")
    if periods:
        print(f"   ENERGY_COUNTER_UPDATE_S (pytest_abbench/core/results.py): {max(periods) / 1e3:.3f} "
              "(the longest median update period above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
