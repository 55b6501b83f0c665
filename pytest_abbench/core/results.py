"""results.jsonl: one record per shape a cell measured (or failed), appended as each shape finishes.

The cell process writes it (``child/measure.py``); the parent counts it
(``spawn/runner.count_shapes``) and the report reads it (``report/build.py``).
Each record carries the format version; a record without one is the layout
from before versions (version 1, the same fields).  A timed shape keeps its
GPU state per timed window (``windows``: each window's condition, calls and
NVML state, ``core/regimes.py``, ``child/gpustate.py``); ``regime``,
``windows``, ``work`` (the FLOPs and bytes a call of the shape does, where
its campaign declares them) and ``energy_span`` are left out where a shape
has none (a failed one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from pytest_abbench.core.fileio import SCHEMA_FIELD, CorruptFileError, Fields, append_jsonl, numbered_jsonl

RESULTS_SCHEMA = 1
OK = "ok"  # timed; every other status (wrong, error, poisoned) but SKIPPED is a failed shape
# Not run in this cell (``--skip-shapes``): it failed alike on both sides in round 1.  Neither timed nor a failure of
# this cell; the report names it, so a shape left out of later rounds is never silently without a verdict.
SKIPPED = "skipped"
SKIPPED_WHY = "it failed alike on both sides in round 1"


# The names results.jsonl gives NVML's clock-event reasons, by bit (nvmlClocksEventReason* in pynvml; the
# nvmlClocksThrottleReason* names of older drivers have the same values, and carry the last two besides).
REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)


@dataclass
class GpuReading:
    """What NVML said at one edge of a timed window; a value NVML would not give is None, ``errors`` says why."""

    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_w: float | None = None  # NVML's power draw figure, which the driver averages over up to a second
    temperature_c: float | None = None
    energy_mj: float | None = None  # the device's total-energy counter (millijoules since the driver loaded)
    reasons_mask: int | None = None  # NVML's clock-event (throttle) reasons bitmask
    reasons: list[str] = field(default_factory=list)  # the mask's names (REASON_BITS)
    errors: dict[str, str] = field(default_factory=dict)  # value -> why NVML gave none ("NVMLError_NotSupported")

    NUMBERS = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c", "energy_mj")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in self.NUMBERS if getattr(self, name) is not None}
        if self.reasons_mask is not None:
            out.update(reasons_mask=self.reasons_mask, reasons=self.reasons)
        if self.errors:
            out["errors"] = self.errors
        return out

    @classmethod
    def from_json(cls, data: Fields) -> "GpuReading":
        return data.dataclass(cls)


@dataclass
class GpuState:
    """NVML read before and after one timed window of a shape (``child/gpustate.py``), or why it was not."""

    before: GpuReading | None = None
    after: GpuReading | None = None
    window_s: float | None = None  # wall seconds from the end of one edge's read to the end of the other's
    energy_mj: float | None = None  # the energy counter's increase over the window
    reasons: list[str] = field(default_factory=list)  # clock-event reasons NVML named at either edge of the window
    not_recorded: str | None = None  # why there is no reading: no GPU, no NVML, a device NVML does not know

    def to_json(self) -> dict[str, Any]:
        if self.not_recorded is not None:
            return {"not_recorded": self.not_recorded}
        out: dict[str, Any] = {"reasons": self.reasons}
        for name in ("window_s", "energy_mj"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        for name in ("before", "after"):
            reading = getattr(self, name)
            if reading is not None:
                out[name] = reading.to_json()
        return out


@dataclass
class TimedWindow:
    """One timed window of a shape (``child/regime.py``): whether the regime's condition held before it, how long
    the cell waited for it, how many calls and samples it timed, and the GPU's state around it."""

    condition: str  # core/regimes.py: met | not_met | not_checked
    waited_s: float  # burst: the idle gap before it; steady: the settling before the first window (0 after)
    calls: int  # kernel calls inside the window: the energy counter's delta over it is theirs
    samples: int  # how many of the shape's samples_ms it gave
    gpu_state: GpuState = field(default_factory=GpuState)
    detail: str = ""  # what was seen: "1980 MHz, no holding reason after 0.12 s", "still sw_power_cap after 2.0 s"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"condition": self.condition, "waited_s": self.waited_s, "calls": self.calls,
                               "samples": self.samples, "gpu_state": self.gpu_state.to_json()}
        if self.detail:
            out["detail"] = self.detail
        return out


# NVML's energy counter moves in steps the driver updates every few tens of milliseconds: over the ten 4 ms windows
# of a burst cell it read anything from 0 to several times the true figure on the H200 (per-round B/A changes from
# -100% to beyond +10,000% for one shape), and ten 50 ms windows gave intervals such as [-87.5 ~ +205.8%].
# Measured on the H200 (benchmarks/nvml_energy.py, docs/evidence/h200-nvml-energy-counter.txt): the counter moved
# every 100 ms (median; min 86-97 ms, p90 102-103 ms) idle, under a 691 W matmul and under a 299 W elementwise
# kernel alike, and energy over >= 100 ms windows gave the long-run power within 5%; a 10 ms window read 0 W.
ENERGY_COUNTER_UPDATE_S = 0.100
ENERGY_COUNTER_ERROR = 0.05  # the largest share of a stated energy figure the counter's steps may be off by
# A read returns the counter's last update, so it lags the energy drawn by up to one update period. Back-to-back
# windows share their edges: over a stretch of them the lags inside cancel, and its energy is off by at most one
# update's worth. A figure is stated where each separate stretch lasted this long on average.
ENERGY_MIN_S = ENERGY_COUNTER_UPDATE_S / ENERGY_COUNTER_ERROR


@dataclass(frozen=True)
class EnergySpan:
    """The energy counter over a steady shape's back-to-back run around its timed windows (``child/regime.py``
    ``energy_span``): from the last counter update seen before the first window to the first one seen after the
    last, each update's time found by reading the counter back to back while the GPU kept running the kernel.
    ``edge_error_s``: how far either way each end's update may lie from where it was placed (half the time from
    the read before it to the read that showed it), both ends added: the figure's only timing error (the counter's
    own lag is the same at both ends)."""

    energy_mj: float
    seconds: float
    edge_error_s: float

    def to_json(self) -> dict[str, Any]:
        return {"energy_mj": self.energy_mj, "seconds": self.seconds, "edge_error_s": self.edge_error_s}


@dataclass(frozen=True)
class PooledEnergy:
    """The energy counter over some timed windows taken together: its increase, their wall time (None where a
    window's length was not recorded), their calls and how many separate stretches of back-to-back windows.
    From an ``EnergySpan`` (``edge_error_s`` set): the span's increase and length, and the calls that fit in it
    at the shape's time per call (the GPU ran the kernel back to back throughout)."""

    energy_mj: float
    window_s: float | None
    calls: float
    stretches: int
    edge_error_s: float | None = None

    def withheld(self) -> str:
        """Why the counter's figure is too coarse to state for these windows; "" where it is not."""
        if self.window_s is None:
            return "withheld: the timed windows' lengths were not recorded"
        if self.edge_error_s is not None:
            if self.edge_error_s <= ENERGY_COUNTER_ERROR * self.window_s:
                return ""
            return (f"withheld: the energy counter's updates were placed within {self.edge_error_s * 1e3:.0f} ms "
                    f"over a {self.window_s:.2g} s span (more than {ENERGY_COUNTER_ERROR:.0%} of it)")
        if self.window_s >= ENERGY_MIN_S * self.stretches:
            return ""
        return withheld_why(self.window_s, self.stretches)

    def power_w(self) -> float | None:
        """Mean power over the windows, or None where ``withheld``."""
        return None if self.withheld() or not self.window_s else self.energy_mj / 1000.0 / self.window_s

    def per_call_j(self) -> float | None:
        """Joules per call, or None where ``withheld`` or no call was counted."""
        return None if self.withheld() or not self.calls else self.energy_mj / 1000.0 / self.calls


def withheld_why(window_s: float, stretches: float, per: str = "") -> str:
    """``withheld: 0.04 s of timed windows per cell in 10 separate stretches against the energy counter's ~50 ms
    updates (a figure needs 1 s a stretch)``."""
    apart = f" in {stretches:g} separate stretches" if stretches > 1 else ""
    return (f"withheld: {window_s:.2g} s of timed windows{per}{apart} against the energy counter's "
            f"~{ENERGY_COUNTER_UPDATE_S * 1e3:.0f} ms updates (a figure needs {ENERGY_MIN_S:g} s a stretch)")


def pool_energy(states: list[tuple[GpuState | None, int]]) -> PooledEnergy | None:
    """The energy counter over the windows (each its state and calls) that have an energy figure; None where none
    has.  A window starts a new stretch unless its first reading is the one the previous window ended on."""
    energy: list[float] = []
    seconds: list[float | None] = []
    calls, stretches = 0, 0
    previous: GpuReading | None = None
    for state, window_calls in states:
        if state is None or state.energy_mj is None:
            previous = None
            continue
        stretches += 0 if previous is not None and state.before == previous else 1
        previous = state.after
        energy.append(state.energy_mj)
        seconds.append(state.window_s)
        calls += window_calls
    if not energy:
        return None
    known = [s for s in seconds if s is not None]
    # fsum: ten 0.1 s windows last 1 s, not 0.9999999999999999 s (a plain sum would withhold them at ENERGY_MIN_S 1)
    return PooledEnergy(math.fsum(energy), math.fsum(known) if len(known) == len(seconds) else None, calls, stretches)


def cell_energy(windows: list[TimedWindow]) -> PooledEnergy | None:
    """The energy counter over one cell's timed windows of a shape, the windows with calls taken together."""
    return pool_energy([(w.gpu_state, w.calls) for w in windows if w.calls > 0])


def span_energy(span: EnergySpan, per_call_ms: float | None) -> PooledEnergy | None:
    """A steady span's energy as ``PooledEnergy``: its calls are the span's length over the time per call, since the
    kernel ran back to back throughout; None without a time per call."""
    if not per_call_ms or per_call_ms <= 0 or span.seconds <= 0:
        return None
    return PooledEnergy(span.energy_mj, span.seconds, span.seconds / (per_call_ms / 1e3), 1, span.edge_error_s)


def shape_energy(rec: "ShapeResult") -> PooledEnergy | None:
    """The energy figure of one record: its steady span's where it has one, else its windows' taken together."""
    if rec.energy_span is not None:
        return span_energy(rec.energy_span, rec.median_ms)
    return cell_energy(rec.windows)


def energy_per_call_j(windows: list[TimedWindow]) -> float | None:
    """Joules per call over the windows whose energy counter was read: the counter's total delta over their calls;
    None where no window has an energy figure, or where it is withheld (``PooledEnergy.withheld``)."""
    pooled = cell_energy(windows)
    return None if pooled is None else pooled.per_call_j()


# The parts of a cell's time on one shape (``ShapeResult.spent_s``): building its inputs, the first call (compiling
# and autotuning), checking its output, preparing the timer (a graph capture), the settling or the idle gaps before
# the windows, the timed windows, the energy counter's wait after them, the kernel split's profiling pass.
SPENT_PARTS = ("inputs", "first_call", "check", "capture", "settle", "windows", "energy_span", "profile")


@dataclass
class ShapeResult:
    """One shape of one cell: timed (``ok``, with its samples) or failed (``wrong``, ``error``, ``poisoned``)."""

    shape: str
    status: str
    params: dict[str, Any] = field(default_factory=dict)
    index: int | None = None  # its place in the op's shape list
    layout_pad_bytes: list[int] | None = None  # the layout shift: the pads held while it ran
    timer: str | None = None
    samples_ms: list[float] = field(default_factory=list)
    median_ms: float | None = None
    n: int | None = None
    marker: str | None = None  # a timer's fallback marker (core/markers.py)
    error: str | None = None
    regime: str | None = None  # core/regimes.py: the regime its windows ran under; None: written before regimes
    windows: list[TimedWindow] = field(default_factory=list)  # each timed window (records with a regime)
    work: dict[str, Any] = field(default_factory=dict)  # per call, as the campaign declares it: flops, bytes, dtype
    energy_span: EnergySpan | None = None  # steady, a queueing timer and the energy counter: around the windows
    # Where the cell's time on this shape went, in seconds per part (``SPENT_PARTS``); the shape's inputs, first
    # call and check are in its first regime's record only.
    spent_s: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {SCHEMA_FIELD: RESULTS_SCHEMA, "shape": self.shape, "params": self.params,
                               "status": self.status}
        for name in ("index", "layout_pad_bytes", "timer", "error", "regime"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.ok:
            out.update(samples_ms=self.samples_ms, median_ms=self.median_ms, n=self.n, marker=self.marker)
        if self.windows:
            out["windows"] = [w.to_json() for w in self.windows]
        if self.work:
            out["work"] = self.work
        if self.energy_span is not None:
            out["energy_span"] = self.energy_span.to_json()
        if self.spent_s:
            out["spent_s"] = self.spent_s
        return out

    @classmethod
    def from_json(cls, data: Fields) -> "ShapeResult":
        """A record, each field checked against its declared type (``Fields.dataclass``), nested ones included."""
        data.version(RESULTS_SCHEMA)
        return Fields(data.where, {k: v for k, v in data.data.items() if k != SCHEMA_FIELD}, data.prefix).dataclass(cls)


def append_result(path: Path, result: ShapeResult) -> None:
    """One line, one write (``fileio.append_jsonl``): a crash loses at most the shape in flight."""
    append_jsonl(path, result.to_json())


def read_results(path: Path, on_bad: Callable[[CorruptFileError], None] | None = None) -> Iterator[ShapeResult]:
    """Every record of ``path``; a torn line, an unknown version or a bad field raises naming file, line and field,
    or, with ``on_bad``, is handed to it and skipped: one damaged shape does not cost the cell's others."""
    for number, record in numbered_jsonl(path, on_bad):
        try:
            yield ShapeResult.from_json(Fields(f"{path}:{number}", record))
        except CorruptFileError as exc:  # FormatError: a field of the wrong type, a newer version
            if on_bad is None:
                raise
            on_bad(exc)


ERROR = "error"  # the shape's build or call raised: ``error`` holds the exception's type and message


def failed_alike(results_a: Path, results_b: Path) -> dict[str, str]:
    """The shapes that raised the same exception (type and message) on both sides of one round, with that error.

    A round-1 failure that both sides share is the script's or the inputs', not the switch's: later rounds would
    fail it again at the same cost, so they skip it (``--skip-shapes``) and the report names it once.  A shape
    that failed on one side only, differently, or poisoned the CUDA context (a fresh process may time it) is not
    among them.  A missing or unreadable file gives none.
    """
    def errors(path: Path) -> dict[str, str]:
        try:
            return {r.shape: r.error or "" for r in read_results(path, lambda _: None) if r.status == ERROR}
        except OSError:
            return {}

    a, b = errors(results_a), errors(results_b)
    return {shape: error for shape, error in a.items() if b.get(shape) == error}
