"""``python -m pytest_abbench.child.reference SPEC``: both sides of one op in one process, timed in pairs.

The in-process reference of ``--ab-reference``: for each shape it builds side
A's and side B's case on the same inputs (torch seeded alike before each
build, each build seeing its side's build-only variables), warms both with the
cells' own timer (``child/timers.py``), settles them under the steady regime
(``child/regime.py``), then times them interleaved in pairs, A then B and B
then A alternately, one window each (where a side settles at the power cap,
each side's windows after its own side's settling: ``time_pairs``).  One record per
shape and regime goes to reference.jsonl as it finishes (``core/reference.py``).  Autotune
choices are replayed from the op's records, as the cells' are.  This process
never imports pytest.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from pytest_abbench.campaign.adapters import load_for_cell
from pytest_abbench.campaign.model import SIDES, Campaign, Case, Shape
from pytest_abbench.child.autotune_pin import AutotunePin, AutotuneRecordError, install
from pytest_abbench.child.gpustate import GpuSampler, open_sampler
from pytest_abbench.child.measure import EXIT_SETUP_ERROR
from pytest_abbench.child.preload import kept_out_only
from pytest_abbench.child.regime import Pace, settle, wait_for_boost
from pytest_abbench.child.timers import CapturePoisoned, Timed, Windows, prepare_with_fallback
from pytest_abbench.core import regimes
from pytest_abbench.core.reference import ReferenceSpec, append_shape



def log(line: str) -> None:
    print(line, flush=True)


@contextlib.contextmanager
def environment_set(values: Mapping[str, str | None]) -> Iterator[None]:
    """The process environment with ``values`` set (None: unset) while the block runs, restored after."""
    saved = {name: os.environ.get(name) for name in values}

    def apply(settings: Mapping[str, str | None]) -> None:
        for name, value in settings.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    apply(values)
    try:
        yield
    finally:
        apply(saved)


def pair_order(index: int) -> tuple[str, str]:
    """The sides of pair ``index`` in the order timed: A then B, then B then A, alternately (a drift within the
    process weighs on both sides alike)."""
    return ("A", "B") if index % 2 == 0 else ("B", "A")


class BothSides:
    """The two sides' timers run alternately, for the steady regime's settling (``regime.settle`` runs only
    ``run_for``): the card settles under the load the pairs put on it."""

    marker: str | None = None
    reason: str | None = None
    queues: bool = False  # two streams' replays in turn: the settling runs them, chunk by chunk

    def __init__(self, timers: Mapping[str, Windows]) -> None:
        self.timers = timers
        self.timer = timers["A"].timer

    def run_for(self, seconds: float) -> None:
        for side in SIDES:
            self.timers[side].run_for(seconds / len(SIDES))

    def keep_busy(self, seconds: float) -> None:
        self.run_for(seconds)

    def drain(self) -> None:
        pass  # run_for waited for its calls

    def window(self) -> Timed:
        raise NotImplementedError("the sides are timed one window each, in pairs (time_pairs)")

    def windows(self, count: int, at_edge: Callable[[], None], warm_s: float = 0.0) -> list[Timed]:
        raise NotImplementedError("the sides are timed one window each, in pairs (time_pairs)")


class ClockWatch:
    """The SM clock read on a thread of its own every ``period_s`` while the pairs run (each NVML call releases the
    GIL), so the windows are not held up by it; ``side_medians`` gives each side's median over the readings taken
    inside its windows: beside the cells' clocks, they say whether a difference from the cells is the power
    controller's."""

    def __init__(self, read: Callable[[], float | None], period_s: float = 0.01,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.read, self.period_s, self.clock = read, period_s, clock
        self.readings: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="abbench-clock-watch", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            mhz = self.read()
            if mhz is not None:
                self.readings.append((self.clock(), mhz))
            self.stop.wait(self.period_s)

    def __enter__(self) -> "ClockWatch":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5.0)  # a hung NVML call keeps its (daemon) thread, not the reference process

    def side_medians(self, windows: Sequence[tuple[str, float, float]]) -> dict[str, float]:
        """Each side's median clock over the readings inside its windows ``(side, began, ended)``."""
        out = {}
        for side in SIDES:
            inside = [mhz for t, mhz in self.readings
                      if any(s == side and began <= t <= ended for s, began, ended in windows)]
            if inside:
                out[side] = statistics.median(inside)
        return out


@dataclass
class TimedPairs:
    """A shape's pairs under one regime, ``(A ms, B ms)`` each, and how the steady regime settled them:
    ``alone`` where a side settled alone ran at the power cap, so each side's windows followed its own side's
    settling (``alone_met`` of the ``alone_settlings`` met their condition)."""

    pairs: list[tuple[float, float]] = field(default_factory=list)
    alone: bool = False
    alone_met: int = 0
    alone_settlings: int = 0


def time_pairs(timers: Mapping[str, Windows], regime: str, sampler: GpuSampler, pairs: int, cpu: bool,
               pace: Pace | None = None, windows: list[tuple[str, float, float]] | None = None) -> TimedPairs:
    """``pairs`` pairs of one window per side under ``regime``: (A ms, B ms) each, a window's median per call;
    ``windows`` (where given) gets each steady window's side and when it began and ended.

    steady: each side settles alone once; where either ends at the power cap, each window that follows the other
    side's is preceded by its own side's settling: at the cap the controller holds the clock its load allows, and
    in pairs of short windows it holds one clock for the mix, which is not the clock either side's cells (or its
    user) run at; alone, each side's windows see its own.  The order A,B then B,A puts two windows of a side back
    to back, the second on the load of the first, as a cell's windows follow each other: one settling serves both,
    which halves the settlings (1 to 6 s each at the cap).  (Settled together, a heavy side beside a light one can
    read below the cap.)
    Otherwise both settle together and the pairs run back to back.  burst: every window waits for the card to be
    back at boost and warms for ``BURST_WARM_S``, as a burst cell's windows do.
    """
    pace = pace or Pace()
    max_clock = sampler.max_sm_clock_mhz() if regime == regimes.BURST else None
    out = TimedPairs()
    if regime == regimes.STEADY:
        for side in SIDES:
            out.alone = settle(timers[side], sampler, cpu, pace).at_cap or out.alone
            timers[side].drain()  # its queued replays end before the other side's settling reads the card
        if not out.alone:
            settle(BothSides(timers), sampler, cpu, pace)
    last_side = ""  # the side whose window ran last: its load is still the card's
    for index in range(pairs):
        ms: dict[str, float] = {}
        for side in pair_order(index):
            if regime == regimes.BURST:
                wait_for_boost(sampler, max_clock, pace)
                [(samples, _)] = timers[side].windows(1, lambda: None, 0.0 if cpu else regimes.BURST_WARM_S)
            else:
                if out.alone and side != last_side:
                    out.alone_met += settle(timers[side], sampler, cpu, pace).condition == regimes.MET
                    out.alone_settlings += 1
                began = pace.clock()
                samples, _ = timers[side].window()
                if windows is not None:  # a burst window's call also runs its warm-up and tail: not attributed
                    windows.append((side, began, pace.clock()))
            ms[side] = statistics.median(samples)
            last_side = side
        out.pairs.append((ms["A"], ms["B"]))
    return out


def load_sides(spec: ReferenceSpec) -> dict[str, Campaign]:
    """Each side's campaign, loaded under its build environment: once for a campaign file (its builds read the
    variables), once per side for an adapted file (each side's build runs its own provider)."""
    campaign_path = Path(spec.campaign)
    if spec.adapter is None:
        campaign = load_for_cell(campaign_path, spec.module, None, "A", log)
        return {side: campaign for side in SIDES}
    loaded = {}
    for side in SIDES:
        with environment_set(spec.build_env.get(side, {})):
            loaded[side] = load_for_cell(campaign_path, spec.module, spec.adapter, side, log)
    return loaded


def build_case(campaign: Campaign, spec: ReferenceSpec, side: str, shape: Shape, device: str) -> Case:
    """Side ``side``'s case of ``shape``, built under its build environment from torch's seed ``spec.seed``."""
    import torch

    torch.manual_seed(spec.seed)
    with environment_set(spec.build_env.get(side, {})):
        built = campaign.op(spec.op).build(shape, device)
    return built if isinstance(built, Case) else Case(run=built)


def measure_op(spec: ReferenceSpec, campaigns: Mapping[str, Campaign], sampler: GpuSampler,
               shapes: Sequence[Shape]) -> None:
    """Every shape of the op under every regime the cells time: one record each, appended as it finishes."""
    rows = Path(spec.rows)
    device = "cuda" if spec.backend == "cuda" else "cpu"
    for shape in shapes:
        timers_used: dict[str, str] = {}
        regime = ""
        try:
            cases = {side: build_case(campaigns[side], spec, side, shape, device) for side in SIDES}
            for regime in regimes.cell_regimes(spec.regime):
                window_ms = regimes.window_ms(regime, spec.direct_rep_ms)
                timers = {side: prepare_with_fallback(cases[side].run, spec.timer, window_ms, spec.direct_warmup_ms,
                                                      spec.op, shape.id, log) for side in SIDES}
                timers_used = {side: timer.timer for side, timer in timers.items()}
                timed: list[tuple[str, float, float]] = []
                with ClockWatch(sampler.sm_clock_mhz) as watch:
                    timed_pairs = time_pairs(timers, regime, sampler, spec.pairs, cpu=device == "cpu", windows=timed)
                pairs = timed_pairs.pairs
                alone = (timed_pairs.alone_met, timed_pairs.alone_settlings) if timed_pairs.alone else None
                append_shape(rows, spec.op, shape.id, regime, timers_used, pairs,
                             clocks_mhz=watch.side_medians(timed), settled_alone=alone)
                shown = statistics.median(100.0 * (b / a - 1.0) for a, b in pairs) if pairs else float("nan")
                how = "" if alone is None else (f", at the power cap each side's windows after its own side's "
                                                f"settling ({alone[0]} of {alone[1]} met)")
                log(f"[abbench] reference {spec.op} {shape.id} ({regime}): {len(pairs)} pairs{how}, B/A-1 median "
                    f"{shown:+.2f}%")
        except CapturePoisoned as exc:
            append_shape(rows, spec.op, shape.id, regime, timers_used, error=f"capture poisoned: {exc.reason}")
            log("[abbench] reference: the CUDA context is poisoned: no later number of this process is trusted")
            return
        except (Exception, SystemExit) as exc:
            log(f"[abbench] reference {spec.op} {shape.id}: {type(exc).__name__}: {exc}")
            traceback.print_exc(file=sys.stdout)
            append_shape(rows, spec.op, shape.id, regime, timers_used, error=f"{type(exc).__name__}: {exc}")


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        log("usage: python -m pytest_abbench.child.reference SPEC.json")
        return 2
    spec = ReferenceSpec.read(Path(argv[0]))
    import torch  # noqa: F401  (import cost belongs to start-up)

    campaigns = load_sides(spec)
    kept_out_only(campaigns["A"].server_imports)  # as in the cells: before any build imports the op's library
    try:
        pin = AutotunePin("replay", Path(spec.autotune_record) if spec.autotune_record else None, log,
                          can_benchmark=lambda at: spec.backend == "cuda" or at._do_bench is not None,
                          side_mode="replay" if spec.autotune_side_record else None,
                          side_path=Path(spec.autotune_side_record) if spec.autotune_side_record else None,
                          side="B", cell="reference")
    except AutotuneRecordError as exc:
        log(f"[abbench] reference: {exc}")
        return EXIT_SETUP_ERROR
    install(pin)
    shapes = campaigns["A"].op(spec.op).shapes_for(spec.level)
    sampler = open_sampler(spec.backend)
    log(f"[abbench] reference {spec.op}: {len(shapes)} shapes, both sides in one process, {spec.pairs} pairs each "
        f"(timer {spec.timer}, regime {spec.regime}, level {spec.level})")
    measure_op(spec, campaigns, sampler, shapes)
    return 0


def _run() -> Any:
    code = main(sys.argv[1:])
    sys.stdout.flush()
    # Threads a campaign started may still run, and a CUDA context's teardown can hang: the rows are written.
    os._exit(code)


if __name__ == "__main__":
    _run()
