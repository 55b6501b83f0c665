"""In-process reference for the timing regimes: campaigns/mm.py's two sides in ONE process, A and B interleaved,
each as a CUDA graph, under burst and under steady, NVML read after every window.  One line per regime, in the
terms of the plugin's report, so the report's interval, clocks and power can be held against it.

    PYTHONPATH=. python benchmarks/regimes/regime_reference.py                  # both regimes, about 1 to 2 minutes
    PYTHONPATH=. python benchmarks/regimes/regime_reference.py --pair cublas    # cuBLAS (A) vs the Triton kernel (B)
    PYTHONPATH=. python benchmarks/regimes/regime_reference.py --dry-run        # the plan only: no GPU touched

The sides, as the campaign defines them (``campaigns/mm.py``): the bf16 mm of ``campaigns/_kernels/gemm.py`` at
M=N=K=4096; side B compiled with ``DISABLE_MMA_V3=1`` (the campaign's ``SWITCH``), which Triton reads when it
compiles and keys its cache on.  Both variants are compiled in this process: two JIT functions of the one kernel
source, B's while the variable is set; the script checks that A's PTX holds wgmma and B's does not, and stops
otherwise.  Both sides run side A's autotuned config, as in the plugin, where round 1's A records the choice and
every other cell replays it (``--record ROOT/autotune/mm.json`` pins the one a root's cells ran, ``--config``
any other).
``--pair cublas`` times torch.mm (A) against the Triton kernel (B) instead: the comparison of the H200 figures in
MEASUREMENT.md ("Power regime": +2.5% burst, +9.7% steady).

``--op layer_norm``: campaigns/layer_norm.py's sides at 8192 x 4096 bf16: ATen's layer norm (A) against the
Triton kernel of ``campaigns/_kernels/layer_norm.py`` (B).

burst: before each window of about ``BURST_WINDOW_MS`` (4 ms), wait (20 ms to 2 s) until NVML names no power cap
or slowdown and the SM clock is at 97% of its maximum or more; the order within a pair alternates (AB, BA, ...).
steady: as the cells run it, one side alone in windows of ``--steady-window-ms`` (the plugin's default)
until its last 5 SM clocks lie within 1% (one 15 MHz step at least) and powers within 3%, or all show boost with no
holding reason (0.25 s to 10 s), then 10 windows of it back to back; then the other side the same way; the blocks
alternate until ``--pairs`` pairs.
Per regime: the median of the per-pair deltas ln(B/A) as a percent, the mean's 95% t-interval (over pairs under
burst; under steady over the blocks' mean deltas, since the windows of one block follow one settling and are not
independent), and per side the median SM clock, power and the share of windows under the power cap;
a window's NVML reading is taken right after it.  The parameters and the two conditions are the cells' own
(``core/regimes.py``, ``child/regime.py``), and so is the graph timer (``child/timers.py`` ``GraphWindows``); the
interleaving and the NVML reads are this script's.

Needs torch, triton and nvidia-ml-py; nothing is set on the GPU (no clock, no power limit).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "campaigns")]

from pytest_abbench.child.gpustate import decode_reasons  # noqa: E402  (NVML's reason bits, by name)
from pytest_abbench.child.regime import at_boost, settled  # noqa: E402  (the conditions the cells check)
from pytest_abbench.core import regimes  # noqa: E402  (the plugin's burst and steady parameters)
from pytest_abbench.core.cellconfig import DEFAULT_DIRECT_REP_MS  # noqa: E402  (a steady window's length)
from pytest_abbench.core.settings import CUDA_SAMPLES  # noqa: E402  (windows per shape on a GPU)
from pytest_abbench.child.timers import GraphWindows  # noqa: E402  (the cells' graph timer, the same windows)
from pytest_abbench.core.results import GpuReading as Reading  # noqa: E402  (clock, power, reasons)
from pytest_abbench.report.stats import interval, pct  # noqa: E402  (the report's t-interval)

SIDES = ("A", "B")
SHAPE = {"M": 4096, "N": 4096, "K": 4096}
LN_SHAPE = {"rows": 8192, "cols": 4096}
CAP = "sw_power_cap"
STEADY_BLOCK = CUDA_SAMPLES  # windows a steady cell times per shape after settling (the plugin's default)


# -- what one window saw ---------------------------------------------------------------------------
@dataclass
class Window:
    side: str
    ms_per_call: float
    after: Reading
    condition: str = regimes.MET  # burst: boost reached before it; steady: settled before the first pair


@dataclass
class RegimeRun:
    regime: str
    window_ms: float
    windows: list[Window] = field(default_factory=list)
    note: str = ""
    blocks: list[int] = field(default_factory=list)  # steady: each pair's block (empty: every pair stands alone)

    def log_ratios(self) -> list[float]:
        """ln(B/A) per pair: windows come in pairs, one per side, in the order they ran."""
        out = []
        for first, second in zip(self.windows[0::2], self.windows[1::2]):
            by_side = {first.side: first.ms_per_call, second.side: second.ms_per_call}
            out.append(math.log(by_side["B"] / by_side["A"]))
        return out


# -- statistics and the printed line (exercised on the CPU by tests/test_regime_reference.py) ----------------
@dataclass
class Summary:
    pairs: int
    median_pct: float
    mean_pct: float
    ci_pct: tuple[float, float] | None
    blocks: int = 0  # the interval's units when the pairs come in blocks (0: the pairs themselves)


def summarize(log_ratios: list[float], blocks: list[int] | None = None) -> Summary:
    """The median per-pair delta, and the mean's 95% t-interval (the report's interval), as percents.  With
    ``blocks`` (each pair's block) the interval is over the blocks' mean deltas, as the report's is over rounds."""
    units = log_ratios
    if blocks:
        by_block: dict[int, list[float]] = {}
        for block, ratio in zip(blocks, log_ratios):
            by_block.setdefault(block, []).append(ratio)
        units = [statistics.fmean(values) for values in by_block.values()]
    ci = interval(units) if len(units) >= 2 else None
    return Summary(len(log_ratios), pct(statistics.median(log_ratios)), pct(statistics.fmean(log_ratios)),
                   None if ci is None else (pct(ci[0]), pct(ci[1])), len(units) if blocks else 0)


def side_state(windows: list[Window], side: str) -> str:
    """One side as the plugin's side-by-side prints it: median SM clock, median power, share under the power cap."""
    mine = [w for w in windows if w.side == side]
    clocks = [w.after.sm_clock_mhz for w in mine if w.after.sm_clock_mhz is not None]
    powers = [w.after.power_w for w in mine if w.after.power_w is not None]
    capped = sum(CAP in w.after.reasons for w in mine) / len(mine) if mine else 0.0
    clock = f"{statistics.median(clocks):.0f}" if clocks else "-"
    power = f"{statistics.median(powers):.0f}" if powers else "-"
    return f"{clock} MHz {power} W cap {capped:.0%}"


def regime_line(label: str, run: RegimeRun) -> str:
    """One line per regime: the delta, its interval, each side's clocks and power, the windows and their condition."""
    ratios = run.log_ratios()
    if not ratios:
        return f"{label} {run.regime:<6}: no pairs timed {run.note}".rstrip()
    s = summarize(ratios, run.blocks)
    ci = "-" if s.ci_pct is None else f"[{s.ci_pct[0]:+.1f} ~ {s.ci_pct[1]:+.1f}]"
    met = sum(w.condition == regimes.MET for w in run.windows)
    a_ms = statistics.median(w.ms_per_call for w in run.windows if w.side == "A")
    return (f"{label} {run.regime:<6}: delta B vs A {s.median_pct:+.1f}% median, mean {s.mean_pct:+.1f}% {ci} "
            f"over {s.pairs} pairs" + (f" in {s.blocks} blocks (interval over their means)" if s.blocks else "")
            + f"; A {side_state(run.windows, 'A')}, B {side_state(run.windows, 'B')}; "
            f"A {a_ms:.4f} ms/call; {run.window_ms:g} ms windows, condition met {met}/{len(run.windows)}"
            + (f"; {run.note}" if run.note else ""))


# -- the regimes, on any two timers and any NVML reader (a test can stand in for both) ----------------------
@dataclass
class Rig:
    """What the regimes need: ``window(side)`` times one window (ms per call); ``read()`` reads NVML;
    ``max_clock`` the SM clock's maximum; ``sleep``/``clock`` wait and tell time."""

    window: Callable[[str], float]
    read: Callable[[], Reading]
    max_clock: float | None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic


def pair_order(index: int) -> tuple[str, str]:
    return SIDES if index % 2 == 0 else SIDES[::-1]


def run_burst(rig: Rig, pairs: int, window_ms: float, budget_s: float) -> RegimeRun:
    """Each window after a gap that lets the card leave the power cap; stops early when ``budget_s`` runs out."""
    out = RegimeRun(regimes.BURST, window_ms)
    start = rig.clock()
    for index in range(pairs):
        if rig.clock() - start > budget_s:
            out.note = f"stopped after {index} pairs: the {budget_s:g} s budget ran out"
            break
        for side in pair_order(index):
            waited, condition = 0.0, regimes.NOT_MET
            rig.sleep(regimes.BURST_MIN_GAP_S)
            while waited < regimes.BURST_MAX_WAIT_S:
                if at_boost(rig.read(), rig.max_clock):
                    condition = regimes.MET
                    break
                rig.sleep(regimes.BURST_POLL_S)
                waited += regimes.BURST_POLL_S
            ms = rig.window(side)
            out.windows.append(Window(side, ms, rig.read(), condition))
    return out


def settle_side(rig: Rig, side: str) -> tuple[str, float]:
    """Run ``side`` alone, window after window, until its clock and power settle (``STEADY_MIN_S`` to
    ``STEADY_MAX_S``): a cell's settling.  Its condition and the seconds it took."""
    seen: list[Reading | None] = []
    times: list[float] = []
    start = rig.clock()
    while rig.clock() - start < regimes.STEADY_MAX_S:
        rig.window(side)
        seen.append(rig.read())
        times.append(rig.clock())
        if rig.clock() - start >= regimes.STEADY_MIN_S and settled(list(seen), rig.max_clock, times):
            return regimes.MET, rig.clock() - start
    return regimes.NOT_MET, rig.clock() - start


def run_steady(rig: Rig, pairs: int, window_ms: float, block: int = STEADY_BLOCK) -> RegimeRun:
    """Each side as its cells run it: alone until its clock and power settle, then ``block`` windows back to back;
    the sides' blocks alternate (AB, BA, ...) until ``pairs`` pairs, the i-th window of one side's block paired
    with the i-th of the other's.  Interleaving A and B window by window would not be steady for either: where the
    two sides settle at different clocks (a kernel that spends more energy per operation runs slower at the power
    cap), the controller never settles on a mix of both."""
    out = RegimeRun(regimes.STEADY, window_ms)
    settles: list[tuple[str, float]] = []
    index = 0
    while len(out.windows) < 2 * pairs:
        size = min(block, pairs - len(out.windows) // 2)
        timed: dict[str, list[Window]] = {}
        for side in pair_order(index):
            condition, took = settle_side(rig, side)
            settles.append((condition, took))
            timed[side] = [Window(side, rig.window(side), rig.read(), condition) for _ in range(size)]
        for a, b in zip(timed["A"], timed["B"]):
            out.windows += [a, b]
            out.blocks.append(index)
        index += 1
    met = [took for condition, took in settles if condition == regimes.MET]
    out.note = f"{len(met)} of {len(settles)} side blocks of up to {block} windows settled" + (
        f" after {min(met):.1f} to {max(met):.1f} s" if met else "") + (
        f"; the others not after {regimes.STEADY_MAX_S:g} s (timed anyway)" if len(met) < len(settles) else "")
    return out


# -- the GPU ----------------------------------------------------------------------------------------------
def open_nvml() -> tuple[Callable[[], Reading], float | None, str]:
    """A reader of this process's CUDA device through NVML, its maximum SM clock, and its power limit as text."""
    import pynvml
    import torch

    pynvml.nvmlInit()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = str(getattr(props, "uuid", "") or "")
    handle = None
    if uuid:
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except pynvml.NVMLError:
            handle = None
    if handle is None:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) \
        or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def read() -> Reading:
        r = Reading()
        for name, call in (("sm_clock_mhz", lambda: float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))),
                           ("power_w", lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0),
                           ("reasons_mask", lambda: int(reasons(handle)))):
            try:
                setattr(r, name, call())
            except pynvml.NVMLError:
                pass  # left out: the line shows "-" for a figure NVML does not give
        r.reasons = decode_reasons(r.reasons_mask or 0)
        return r

    try:
        max_clock: float | None = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except pynvml.NVMLError:
        max_clock = None
    try:
        limit = f"{pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000:.0f} W"
    except pynvml.NVMLError as exc:
        limit = f"not read ({exc})"
    return read, max_clock, limit


def parse_config(text: str) -> dict[str, int]:
    """``BM=128,BN=256,BK=64,num_warps=8,num_stages=3`` as keyword arguments of the kernel's launch."""
    out = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit():
            raise SystemExit(f"--config: expected NAME=INTEGER items, got {item!r} in {text!r}")
        out[name.strip()] = int(value)
    return out


def config_from_record(path: Path) -> dict[str, int]:
    """The config a root's autotune record (``<root>/autotune/mm.json``) pinned for the 4096^3 mm, as launch
    keyword arguments: what every cell of that root ran."""
    import json

    want = [str(SHAPE[d]) for d in ("M", "N", "K")]
    try:
        entries = json.loads(path.read_text())["entries"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"--record {path}: not an autotune record ({exc})") from exc
    for e in entries:
        if str(e.get("kernel", "")).endswith(":mm_kernel") and list(e.get("key", []))[:3] == want:
            cfg = e["config"]
            extra = {k: cfg[k] for k in ("num_warps", "num_stages", "num_ctas", "maxnreg") if cfg.get(k) is not None}
            return {**cfg["kwargs"], **extra}
    raise SystemExit(f"--record {path}: no mm_kernel entry for M=N=K=4096 among {len(entries)} entries")


def build_sides(pair: str, config: dict[str, int] | None, log: Callable[[str], None]) -> dict[str, Callable[[], Any]]:
    """Side A and side B as one call each, on one set of operands (the campaign's, seeded)."""
    import torch
    import triton
    from _kernels import gemm
    from _kernels.inputs import randn

    m, n, k = SHAPE["M"], SHAPE["N"], SHAPE["K"]
    a = randn(m, k, seed=3, device="cuda", dtype=torch.bfloat16)
    b = randn(k, n, seed=30, device="cuda", dtype=torch.bfloat16)
    if config is None:
        os.environ.pop("DISABLE_MMA_V3", None)
        gemm.mm(a, b)  # side A autotunes, as round 1's A does
        torch.cuda.synchronize()
        config = gemm.mm_kernel.best_config.all_kwargs()
    log(f"config (both sides): {config}")
    c = {side: torch.empty((m, n), device="cuda", dtype=torch.bfloat16) for side in SIDES}
    raw = gemm.mm_kernel.fn.fn  # the Python function under @autotune(@jit): a fresh JIT has its own kernel cache

    def launcher(kernel: Any, out: Any) -> Callable[[], Any]:
        grid = (triton.cdiv(m, config["BM"]) * triton.cdiv(n, config["BN"]),)
        return lambda: kernel[grid](a, b, out, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                    out.stride(0), out.stride(1), **config)

    variants = {}
    for side, env in (("A", None), ("B", "1")):
        if env is None:
            os.environ.pop("DISABLE_MMA_V3", None)
        else:
            os.environ["DISABLE_MMA_V3"] = env  # the campaign's SWITCH.env_b, read by Triton as it compiles
        run = launcher(triton.jit(raw), c[side])
        compiled = run()
        torch.cuda.synchronize()
        variants[side] = (run, "wgmma" in compiled.asm.get("ptx", ""))
    os.environ.pop("DISABLE_MMA_V3", None)
    log(f"wgmma in PTX: A {variants['A'][1]}, B {variants['B'][1]}")
    if pair == "switch" and not (variants["A"][1] and not variants["B"][1]):
        raise SystemExit("the two compiled variants do not differ in wgmma as DISABLE_MMA_V3 should make them: "
                         "this GPU or Triton does not take the switch; nothing timed")
    expected = (a.float() @ b.float()).to(torch.bfloat16)
    for side in SIDES:
        torch.testing.assert_close(c[side], expected, atol=0.5, rtol=2e-2)
    if pair == "cublas":
        return {"A": lambda: torch.mm(a, b, out=c["A"]), "B": variants["A"][0]}
    return {side: variants[side][0] for side in SIDES}


def build_layer_norm_sides(log: Callable[[str], None]) -> dict[str, Callable[[], Any]]:
    """campaigns/layer_norm.py's sides on one set of operands: ATen (A) and the Triton kernel (B), each checked."""
    import torch
    from _kernels.inputs import randn
    from _kernels.layer_norm import layer_norm

    rows, cols = LN_SHAPE["rows"], LN_SHAPE["cols"]
    x = randn(rows, cols, seed=5, device="cuda", dtype=torch.bfloat16)
    w = randn(cols, seed=6, device="cuda", scale=0.1).add(1.0).to(torch.bfloat16)
    b = randn(cols, seed=7, device="cuda", scale=0.1, dtype=torch.bfloat16)
    sides = {"A": lambda: torch.nn.functional.layer_norm(x, (cols,), w, b, 1e-5),
             "B": lambda: layer_norm(x, w, b, 1e-5)}
    expected = torch.nn.functional.layer_norm(x.float(), (cols,), w.float(), b.float(), 1e-5).to(torch.bfloat16)
    for side, fn in sides.items():
        torch.testing.assert_close(fn(), expected, atol=2e-2, rtol=2e-2)
    log("both sides match the fp32 reference")
    return sides


def window_of(timers: dict[str, GraphWindows]) -> Callable[[str], float]:
    """One timed replay of ``side``'s graph: its time per call."""
    return lambda side: timers[side].window()[0][0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", choices=("mm", "layer_norm"), default="mm",
                        help="mm: campaigns/mm.py (--pair picks the sides); layer_norm: campaigns/layer_norm.py")
    parser.add_argument("--pair", choices=("switch", "cublas"), default="switch",
                        help="switch: campaigns/mm.py's A and B (DISABLE_MMA_V3=1 on B); cublas: torch.mm vs Triton")
    parser.add_argument("--regimes", default="burst,steady", help="burst, steady or both, comma-separated")
    parser.add_argument("--pairs", type=int, default=40, help="timed pairs per regime")
    parser.add_argument("--burst-window-ms", type=float, default=regimes.BURST_WINDOW_MS)
    parser.add_argument("--steady-window-ms", type=float, default=float(DEFAULT_DIRECT_REP_MS))
    parser.add_argument("--burst-budget-s", type=float, default=60.0, help="burst stops after this many seconds")
    parser.add_argument("--config", default="", help="pin the launch config (default: side A's autotuned pick)")
    parser.add_argument("--record", type=Path, help="pin the config a root's autotune/mm.json holds for this shape")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit: no GPU touched")
    args = parser.parse_args(argv)
    chosen = [r.strip() for r in args.regimes.split(",") if r.strip()]
    bad = [r for r in chosen if r not in regimes.REGIMES]
    if bad or not chosen or args.pairs < 2:
        parser.error(f"--regimes takes {', '.join(regimes.REGIMES)} (got {args.regimes!r}); --pairs at least 2")
    config = config_from_record(args.record) if args.record else parse_config(args.config) if args.config else None
    label = (f"mm {SHAPE['M']}x{SHAPE['N']}x{SHAPE['K']} bf16 ({args.pair})" if args.op == "mm"
             else f"layer_norm {LN_SHAPE['rows']}x{LN_SHAPE['cols']} bf16 (ATen vs Triton)")
    windows = {regimes.BURST: args.burst_window_ms, regimes.STEADY: args.steady_window_ms}
    print(f"# {label}: regimes {', '.join(chosen)}, {args.pairs} pairs each, windows "
          + ", ".join(f"{r} {windows[r]:g} ms" for r in chosen)
          + (f"; config {config or 'side A autotuned'}" if args.op == "mm" else ""))
    if args.dry_run and args.op == "layer_norm":
        from _kernels.layer_norm import layer_norm_kernel  # what side B launches

        print(f"# dry run: ATen against _kernels/layer_norm.py {layer_norm_kernel.fn.__name__}; no GPU touched")
        return 0
    if args.dry_run:
        import triton
        from _kernels import gemm

        raw = gemm.mm_kernel.fn.fn  # what build_sides compiles twice: the same source, two kernel caches
        twins = [triton.jit(raw) for _ in SIDES]
        print(f"# dry run: {len(twins)} JIT functions of _kernels/gemm.py {raw.__name__} "
              f"({len(gemm.mm_kernel.configs)} autotune configs); no GPU touched")
        return 0

    import torch

    read, max_clock, limit = open_nvml()
    print(f"# device {torch.cuda.get_device_name()}, max SM clock {max_clock} MHz, power limit {limit}", flush=True)
    started = time.monotonic()
    log = lambda text: print(f"# {text}", flush=True)  # noqa: E731
    sides = build_sides(args.pair, config, log) if args.op == "mm" else build_layer_norm_sides(log)
    lines = []
    for regime in chosen:
        timers = {side: GraphWindows(fn, windows[regime]) for side, fn in sides.items()}
        rig = Rig(window=window_of(timers), read=read, max_clock=max_clock)
        run = (run_burst(rig, args.pairs, windows[regime], args.burst_budget_s) if regime == regimes.BURST
               else run_steady(rig, args.pairs, windows[regime]))
        lines.append(regime_line(label, run))
        print(lines[-1], flush=True)
    print(f"# {time.monotonic() - started:.0f} s after NVML opened")
    return 0


if __name__ == "__main__":
    sys.exit(main())
