"""results.jsonl: one record per shape a cell measured (or failed), appended as each shape finishes.

The cell process writes it (``child/measure.py``); the parent counts it
(``spawn/runner.count_shapes``) and the report reads it (``report/build.py``).
Each record carries the format version; a record without one is the layout
from before versions (version 1, the same fields).  ``gpu_state`` (NVML
around the shape's timed window, ``child/gpustate.py``) is optional within
version 1: a record without it, such as every record written before it
existed, reads as a shape whose GPU state was not recorded, and a reader
that does not know the field reads the rest of the record unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from pytest_abbench.core.fileio import SCHEMA_FIELD, Fields, append_jsonl, numbered_jsonl

RESULTS_SCHEMA = 1
OK = "ok"  # timed; every other status (wrong, error, poisoned) is a failed shape


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
        numbers = {name: data.number_or_none(name) for name in cls.NUMBERS}
        return cls(**numbers, reasons_mask=data.whole_or_none("reasons_mask"), reasons=data.texts("reasons", []),
                   errors=data.text_map("errors", {}))


@dataclass
class GpuState:
    """NVML read before and after one timed window of a shape (``child/gpustate.py``), or why it was not."""

    before: GpuReading | None = None
    after: GpuReading | None = None
    window_s: float | None = None  # wall seconds between the two readings: the timer's whole run
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

    @classmethod
    def from_json(cls, data: Fields) -> "GpuState":
        return cls(data.or_none("before", lambda n: GpuReading.from_json(data.nested(n))),
                   data.or_none("after", lambda n: GpuReading.from_json(data.nested(n))),
                   data.number_or_none("window_s"), data.number_or_none("energy_mj"), data.texts("reasons", []),
                   data.text_or_none("not_recorded"))


@dataclass
class ShapeResult:
    """One shape of one cell: timed (``ok``, with its samples) or failed (``wrong``, ``error``, ``poisoned``)."""

    shape: str
    status: str
    params: dict[str, Any] = field(default_factory=dict)
    index: int | None = None  # its place in the op's shape list
    layout_pad_bytes: list[int] | None = None  # --ab-layout-shift: the pads held while it ran
    timer: str | None = None
    samples_ms: list[float] = field(default_factory=list)
    median_ms: float | None = None
    n: int | None = None
    marker: str | None = None  # a timer's fallback marker (core/markers.py)
    error: str | None = None
    gpu_state: GpuState | None = None  # NVML around the timed window; None: a record written without it

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {SCHEMA_FIELD: RESULTS_SCHEMA, "shape": self.shape, "params": self.params,
                               "status": self.status}
        for name in ("index", "layout_pad_bytes", "timer", "error"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.ok:
            out.update(samples_ms=self.samples_ms, median_ms=self.median_ms, n=self.n, marker=self.marker)
        if self.gpu_state is not None:
            out["gpu_state"] = self.gpu_state.to_json()
        return out

    @classmethod
    def from_json(cls, data: Fields) -> "ShapeResult":
        data.version(RESULTS_SCHEMA)
        return cls(data.text("shape"), data.text("status"), data.mapping("params", {}), data.whole_or_none("index"),
                   data.wholes_or_none("layout_pad_bytes"), data.text_or_none("timer"), data.numbers("samples_ms", []),
                   data.number_or_none("median_ms"), data.whole_or_none("n"), data.text_or_none("marker"),
                   data.text_or_none("error"),
                   data.or_none("gpu_state", lambda name: GpuState.from_json(data.nested(name))))

def append_result(path: Path, result: ShapeResult) -> None:
    """One line, one write (``fileio.append_jsonl``): a crash loses at most the shape in flight."""
    append_jsonl(path, result.to_json())


def read_results(path: Path) -> Iterator[ShapeResult]:
    """Every record of ``path``; a torn line, an unknown version or a bad field raises naming file, line and field."""
    for number, record in numbered_jsonl(path):
        yield ShapeResult.from_json(Fields(f"{path}:{number}", record))
