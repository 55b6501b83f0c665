"""The GPU's state around each timed window of a shape, read through NVML: clocks, power, temperature, the
clock-event reasons and the energy counter.

The cell reads NVML at each edge of a shape's timed windows (``child/regime.py``);
with the graph timer each edge is read while the GPU runs a later replay, so the
reads leave no idle gap (``GraphWindows.windows``).  ``pynvml`` (the
``nvidia-ml-py`` package) is imported when a cell opens its sampler, in the
cell process only.  Anything NVML cannot do (no GPU, no library, a device it
does not know, a reading the device does not support) leaves the state out
with the reason; it never fails the cell.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from pytest_abbench.core.identity import GPU_SETTING_AXES, not_recorded
from pytest_abbench.core.results import REASON_BITS, GpuReading, GpuState

# Locked clocks (nvidia-smi -lgc / -lmc, nvmlDeviceSetGpuLockedClocks) cannot be read back: NVML has no query.
NO_LOCKED_CLOCKS_QUERY = ("NVML has no query for locked clocks; the SM clock of each timed window shows what the "
                          "card ran at")


def decode_reasons(mask: int) -> list[str]:
    """The names of the bits set in a clock-event reasons mask, lowest bit first; an unnamed bit as ``bit_0x800``."""
    known = dict(REASON_BITS)
    names = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(known.get(bit, f"bit_{bit:#x}"))
        bit <<= 1
    return names


def _why(exc: BaseException) -> str:
    """An exception as one short line: ``NVMLError_NotSupported: Not Supported``."""
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")[:200]


@dataclass
class Edge:
    """One edge of a timed window: what NVML read there, and when the read ended."""

    reading: GpuReading | None
    at: float


class GpuSampler:
    """Reads one device through NVML before and after each timed window; with ``not_recorded`` set, every window
    records that reason instead.

    ``nvml`` is the ``pynvml`` module (or a stand-in with its names), ``handle`` the device's NVML handle.
    """

    def __init__(self, nvml: Any = None, handle: Any = None, not_recorded: str | None = None,
                 device: str = "", clock: Callable[[], float] = time.monotonic) -> None:
        self.nvml, self.handle, self.not_recorded, self.device, self.clock = nvml, handle, not_recorded, device, clock

    def describe(self) -> str:
        """One run.log line's worth: which device is read, or why none is."""
        return f"not recorded ({self.not_recorded})" if self.not_recorded else f"NVML on {self.device}"

    def max_sm_clock_mhz(self) -> float | None:
        """The SM clock's maximum (NVML's max clock info): what "back at boost" is measured against; None where
        NVML does not give it."""
        if self.not_recorded is not None:
            return None
        try:
            return float(self.nvml.nvmlDeviceGetMaxClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
        except Exception:  # NotSupported, or a stand-in without it: the reasons alone decide
            return None

    def settings(self) -> dict[str, int | float | str]:
        """The clock and power settings the card runs under (``core.identity.GPU_SETTING_AXES``), read only: a
        number where NVML gave one, else ``not recorded (<why>)``.  Nothing here sets a clock or a limit."""
        if self.not_recorded is not None:
            return dict.fromkeys(GPU_SETTING_AXES, not_recorded(self.not_recorded))
        nvml, handle = self.nvml, self.handle
        out: dict[str, int | float | str] = {}
        for name, kind in (("app_clock_sm_mhz", "NVML_CLOCK_SM"), ("app_clock_mem_mhz", "NVML_CLOCK_MEM")):
            out[name] = self._first(*self._app_clock_calls(kind))
        out["locked_clocks"] = not_recorded(NO_LOCKED_CLOCKS_QUERY)
        out["power_limit_w"] = self._first(  # milliwatts; the enforced limit is what the card obeys
            lambda: round(nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0, 3),
            lambda: round(nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0, 3))
        return out

    def _app_clock_calls(self, kind: str) -> tuple[Callable[[], int], Callable[[], int]]:
        """Two ways to read an application clock target: nvmlDeviceGetApplicationsClock (deprecated in NVML, still
        answered), then nvmlDeviceGetClock's app-clock target, the same figure."""
        nvml, handle = self.nvml, self.handle
        return (lambda: int(nvml.nvmlDeviceGetApplicationsClock(handle, getattr(nvml, kind))),
                lambda: int(nvml.nvmlDeviceGetClock(handle, getattr(nvml, kind), nvml.NVML_CLOCK_ID_APP_CLOCK_TARGET)))

    @staticmethod
    def _first(*calls: Callable[[], int | float]) -> int | float | str:
        """The first call's value that NVML gives; ``not recorded (<the errors>)`` when none does."""
        errors = []
        for call in calls:
            try:
                return call()
            except Exception as exc:  # NVMLError_NotSupported, NoPermission, a function this pynvml lacks...
                errors.append(_why(exc))
        return not_recorded("; ".join(errors))

    def _reasons(self) -> int:
        nvml = self.nvml
        read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) \
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons  # the name an older pynvml has
        return int(read(self.handle))

    def _calls(self) -> dict[str, Callable[[], float]]:
        """How each value of a reading is asked of NVML, by its ``GpuReading`` field."""
        nvml, handle = self.nvml, self.handle
        return {
            "sm_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            "mem_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
            "power_w": lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,  # milliwatts
            "temperature_c": lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            "energy_mj": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle),
        }

    def _one(self, name: str) -> float | None:
        """One value of a reading alone (one NVML call); None where NVML does not give it."""
        if self.not_recorded is not None:
            return None
        try:
            return float(self._calls()[name]())
        except Exception:  # NotSupported, or a stand-in without it
            return None

    def read(self) -> GpuReading | None:
        """Every value NVML gives now; None when it gave none at all (each value's error is in ``errors``)."""
        if self.not_recorded is not None:
            return None
        reading = GpuReading()
        calls = self._calls()
        for name, call in calls.items():
            try:
                setattr(reading, name, float(call()))
            except Exception as exc:  # NVMLError_NotSupported, NoPermission, GpuIsLost, a missing function...
                reading.errors[name] = _why(exc)
        try:
            reading.reasons_mask = self._reasons()
            reading.reasons = decode_reasons(reading.reasons_mask)
        except Exception as exc:
            reading.errors["reasons_mask"] = _why(exc)
        return None if len(reading.errors) == len(calls) + 1 else reading

    def energy_mj(self) -> float | None:
        """The energy counter alone: what a steady run polls back to back to place the counter's updates."""
        return self._one("energy_mj")

    def sm_clock_mhz(self) -> float | None:
        """The SM clock alone: what the in-process reference's clock watch reads."""
        return self._one("sm_clock_mhz")

    def start(self) -> Edge:
        """Read one edge of a window (``Windows.windows`` calls it at each edge; ``between`` pairs two)."""
        return Edge(self.read(), self.clock())

    def between(self, before: Edge, after: Edge) -> GpuState:
        """A window's state from its two edges (the later edge of one window is the earlier of the next)."""
        if self.not_recorded is not None:
            return GpuState(not_recorded=self.not_recorded)
        first, last = before.reading, after.reading
        if first is None and last is None:
            return GpuState(not_recorded=f"NVML gave no reading on {self.device}")
        energy = None
        if first is not None and last is not None and first.energy_mj is not None and last.energy_mj is not None:
            energy = last.energy_mj - first.energy_mj
            energy = energy if energy >= 0 else None  # the counter restarted (driver reloaded): no figure
        reasons = [name for _, name in REASON_BITS
                   if any(name in r.reasons for r in (first, last) if r is not None)]
        seen = {name for r in (first, last) if r is not None for name in r.reasons}
        reasons += sorted(seen - set(reasons))  # unnamed bits last
        return GpuState(first, last, round(after.at - before.at, 6), energy, reasons)


def cuda_device_ids() -> tuple[str | None, str | None]:
    """The cell's CUDA device as NVML can look it up: its UUID (``GPU-...``) and PCI bus id.

    torch's device 0 is whatever CUDA_VISIBLE_DEVICES names (an index or a UUID); its UUID and bus id name the
    same physical GPU in NVML, which ignores CUDA_VISIBLE_DEVICES.
    """
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = str(getattr(props, "uuid", "") or "") or None
    if uuid and not uuid.startswith(("GPU-", "MIG-")):
        uuid = f"GPU-{uuid}"
    domain, bus, slot = (getattr(props, f"pci_{name}_id", None) for name in ("domain", "bus", "device"))
    pci = f"{domain:04x}:{bus:02x}:{slot:02x}.0" if None not in (domain, bus, slot) else None  # torch >= 2.5
    return uuid, pci


def open_sampler(backend: str, nvml: Any = None,
                 device: Callable[[], tuple[str | None, str | None]] = cuda_device_ids) -> GpuSampler:
    """The sampler of this cell's device; one that records why not where there is no device NVML can read.

    ``nvml`` (default: ``import pynvml``) and ``device`` (the UUID and PCI bus id) are parameters so a test
    can stand in for a GPU.
    """
    if backend != "cuda":
        return GpuSampler(not_recorded=f"backend {backend}: the kernels run on no GPU")
    if nvml is None:
        try:
            import pynvml  # nvidia-ml-py: imported here, in the cell process only
        except ImportError as exc:
            return GpuSampler(not_recorded=f"nvidia-ml-py is not installed ({exc})")
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return GpuSampler(not_recorded=f"NVML did not start: {_why(exc)}")
    try:
        uuid, pci = device()
    except Exception as exc:
        return GpuSampler(not_recorded=f"the cell's CUDA device is unknown: {_why(exc)}")
    tried = []
    for key, lookup in ((uuid, "nvmlDeviceGetHandleByUUID"), (pci, "nvmlDeviceGetHandleByPciBusId")):
        if key is None:
            continue
        try:
            return GpuSampler(nvml, getattr(nvml, lookup)(key), device=key)
        except Exception as exc:
            tried.append(f"{key}: {_why(exc)}")
    return GpuSampler(not_recorded="NVML does not know the cell's device (" + ("; ".join(tried) or "no UUID or PCI "
                                                                                "bus id from torch") + ")")
