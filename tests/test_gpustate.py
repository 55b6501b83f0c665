"""The GPU's state per timed window: NVML's clock-event reasons decoded, the sampler read around the timer (against
a stand-in for NVML: CI has no GPU), results.jsonl's gpu_state, the report's summary and flags, and a real
interpreter cell, which has no GPU state and says why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from helpers import simple_campaign, synthetic_root, with_gpu_state

from pytest_abbench.child.gpustate import GpuSampler, decode_reasons, open_sampler
from pytest_abbench.core.fileio import FormatError
from pytest_abbench.core.identity import GPU_SETTING_AXES
from pytest_abbench.core.results import (ENERGY_COUNTER_UPDATE_S, ENERGY_MIN_S, REASON_BITS, GpuReading, GpuState,
                                         ShapeResult, TimedWindow, append_result, read_results)
from pytest_abbench.report import build_report, render_text, write_report
from pytest_abbench.report.flags import CLOCKS_DIFFER, FLAGS, HW_SLOWDOWN, POWER_CAPPED, THERMAL
from pytest_abbench.report.gpustate import Window, shape_flags, side_summary
from pytest_abbench.report.model import read_report


# -- decoding --------------------------------------------------------------------
PYNVML_NAMES = {"gpu_idle": "GpuIdle", "applications_clocks_setting": "ApplicationsClocksSetting",
                "sw_power_cap": "SwPowerCap", "hw_slowdown": "HwSlowdown", "sync_boost": "SyncBoost",
                "sw_thermal_slowdown": "SwThermalSlowdown", "hw_thermal_slowdown": "HwThermalSlowdown",
                "hw_power_brake": "HwPowerBrakeSlowdown", "display_clock_setting": "DisplayClockSetting",
                "board_limit": "BoardLimit", "reliability": "Reliability"}


def test_reason_bits_are_pynvmls() -> None:
    pynvml = pytest.importorskip("pynvml")
    for bit, name in REASON_BITS:
        assert getattr(pynvml, f"nvmlClocksThrottleReason{PYNVML_NAMES[name]}") == bit, name
        if name not in ("board_limit", "reliability"):  # only the older names carry these two
            assert getattr(pynvml, f"nvmlClocksEventReason{PYNVML_NAMES[name]}") == bit, name
    assert sum(bit for bit, _ in REASON_BITS) == pynvml.nvmlClocksThrottleReasonAll


def test_a_mask_decodes_to_its_names_lowest_bit_first() -> None:
    assert decode_reasons(0) == []
    assert decode_reasons(0x4) == ["sw_power_cap"]  # the H200's mm at its 700 W limit
    assert decode_reasons(0x1 | 0x40 | 0x8 | 0x80) == ["gpu_idle", "hw_slowdown", "hw_thermal_slowdown",
                                                       "hw_power_brake"]
    assert decode_reasons(0x20 | 0x800) == ["sw_thermal_slowdown", "bit_0x800"]  # a bit no pynvml names yet


# -- the sampler, against a stand-in for NVML ---------------------------------------
class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    def __str__(self) -> str:
        return "Not Supported"


class StandInNvml:
    """Stands for pynvml on a machine with a GPU, which CI does not have: the names the sampler calls, answering
    from the figures set on it, each call logged so a test can see when NVML was read."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, log: list[str], uuids: tuple[str, ...] = ("GPU-1234",), buses: tuple[str, ...] = ()) -> None:
        self.log, self.uuids, self.buses = log, uuids, buses
        self.sm, self.mem, self.power_mw, self.temp, self.energy, self.mask = 1980, 3201, 148000, 41, 10_000, 0x1
        self.unsupported: set[str] = set()

    def _call(self, name: str, value: Any) -> Any:
        self.log.append(name)
        if name in self.unsupported:
            raise NVMLError_NotSupported()
        return value

    def nvmlInit(self) -> None:
        self.log.append("init")

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid not in self.uuids:
            raise NVMLError("Not Found")
        return f"handle:{uuid}"

    def nvmlDeviceGetHandleByPciBusId(self, bus: str) -> str:
        if bus not in self.buses:
            raise NVMLError("Not Found")
        return f"handle:{bus}"

    def nvmlDeviceGetClockInfo(self, handle: str, kind: int) -> int:
        return int(self._call("sm" if kind == self.NVML_CLOCK_SM else "mem", self.sm if kind == 1 else self.mem))

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return int(self._call("power", self.power_mw))

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        return int(self._call("temp", self.temp))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> int:
        return int(self._call("energy", self.energy))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        return int(self._call("reasons", self.mask))


def _device(uuid: str | None = "GPU-1234", bus: str | None = "0000:3b:00.0") -> Callable[[], tuple[str | None,
                                                                                                     str | None]]:
    return lambda: (uuid, bus)


def _ticks(*values: float) -> Callable[[], float]:
    it = iter(values)
    return lambda: next(it)


def test_the_sampler_reads_every_value_at_each_edge_of_a_window() -> None:
    log: list[str] = []
    nvml = StandInNvml(log)
    sampler = open_sampler("cuda", nvml=nvml, device=_device())
    assert sampler.describe() == "NVML on GPU-1234"
    sampler.clock = _ticks(100.0, 101.25)
    window = sampler.start()
    log.append("timer")  # the timed window: what the timer does runs here
    nvml.sm, nvml.power_mw, nvml.energy, nvml.mask, nvml.temp = 1395, 693500, 10_000 + 866_875, 0x4, 60
    state = sampler.between(window, sampler.start())
    reads = ["sm", "mem", "power", "temp", "energy", "reasons"]
    assert log == ["init", *reads, "timer", *reads]
    assert state.before == GpuReading(1980.0, 3201.0, 148.0, 41.0, 10_000.0, 0x1, ["gpu_idle"])
    assert state.after == GpuReading(1395.0, 3201.0, 693.5, 60.0, 876_875.0, 0x4, ["sw_power_cap"])
    assert state.window_s == 1.25 and state.energy_mj == 866_875.0  # 693.5 W over 1.25 s
    assert state.reasons == ["gpu_idle", "sw_power_cap"] and state.not_recorded is None


def test_the_device_is_found_by_pci_bus_id_where_nvml_does_not_know_its_uuid() -> None:
    nvml = StandInNvml([], uuids=(), buses=("0000:3b:00.0",))
    assert open_sampler("cuda", nvml=nvml, device=_device()).describe() == "NVML on 0000:3b:00.0"
    missing = open_sampler("cuda", nvml=StandInNvml([], uuids=()), device=_device())
    assert missing.describe() == ("not recorded (NVML does not know the cell's device (GPU-1234: NVMLError: Not Found; "
                                  "0000:3b:00.0: NVMLError: Not Found))")
    assert missing.between(missing.start(), missing.start()) == GpuState(not_recorded=missing.not_recorded)


def test_a_reading_the_device_does_not_support_is_left_out_with_its_reason() -> None:
    nvml = StandInNvml([])
    nvml.unsupported = {"energy", "temp"}
    sampler = open_sampler("cuda", nvml=nvml, device=_device())
    state = sampler.between(sampler.start(), sampler.start())
    assert state.after is not None and state.after.sm_clock_mhz == 1980.0 and state.after.energy_mj is None
    assert state.after.errors == {"temperature_c": "NVMLError_NotSupported: Not Supported",
                                  "energy_mj": "NVMLError_NotSupported: Not Supported"}
    assert state.energy_mj is None and state.reasons == ["gpu_idle"]
    nvml.unsupported = {"sm", "mem", "power", "temp", "energy", "reasons"}
    assert sampler.between(sampler.start(), sampler.start()) == GpuState(not_recorded="NVML gave no reading on GPU-1234")


def test_an_older_pynvml_reads_the_reasons_under_their_old_name() -> None:
    class OldNvml(StandInNvml):
        nvmlDeviceGetCurrentClocksEventReasons = None  # type: ignore[assignment]

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: str) -> int:
            return int(self._call("throttle", 0x4))

    sampler = open_sampler("cuda", nvml=OldNvml([]), device=_device())
    reading = sampler.read()
    assert reading is not None and reading.reasons == ["sw_power_cap"]


def test_no_gpu_no_nvml_no_device_each_leaves_the_state_out_with_the_reason() -> None:
    class NoLibrary(StandInNvml):
        def nvmlInit(self) -> None:
            raise NVMLError("NVML Shared Library Not Found")

    def no_device() -> tuple[str | None, str | None]:
        raise RuntimeError("No CUDA GPUs are available")

    assert open_sampler("interpreter").not_recorded == "backend interpreter: the kernels run on no GPU"
    assert open_sampler("cuda", nvml=NoLibrary([])).not_recorded == \
        "NVML did not start: NVMLError: NVML Shared Library Not Found"
    assert open_sampler("cuda", nvml=StandInNvml([]), device=no_device).not_recorded == \
        "the cell's CUDA device is unknown: RuntimeError: No CUDA GPUs are available"


def test_nothing_pytest_imports_at_start_up_imports_pynvml() -> None:
    code = ("import sys, pytest_abbench.plugin, pytest_abbench.child.measure, pytest_abbench.report.gpustate; "
            "print('pynvml' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


# -- results.jsonl ----------------------------------------------------------------
def _state(sm: float, power: float, reasons: list[str], energy: float | None = 500.0) -> GpuState:
    before = GpuReading(1980.0, 3201.0, 100.0, 40.0, 1000.0, 0x1, ["gpu_idle"])
    after = GpuReading(sm, 3201.0, power, 50.0, None if energy is None else 1000.0 + energy, 0, [])
    return GpuState(before, after, 0.5, energy, reasons)


def test_gpu_state_round_trips_per_window(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    timed = ShapeResult("n=4", "ok", {"n": 4}, 0, None, "cudagraph", [1.0], 1.0, 1, None, regime="burst",
                        windows=[TimedWindow("met", 0.1, 5, 1, _state(1395.0, 693.0, ["gpu_idle", "sw_power_cap"]))])
    absent = ShapeResult("n=8", "ok", {"n": 8}, 1, None, "wall", [1.0], 1.0, 1, None, regime="burst",
                         windows=[TimedWindow("met", 0.1, 5, 1, GpuState(
                             not_recorded="backend interpreter: the kernels run on no GPU"))])
    append_result(path, timed)
    append_result(path, absent)
    assert list(read_results(path)) == [timed, absent]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["schema"] == 1 and lines[0]["windows"][0]["gpu_state"]["after"]["sm_clock_mhz"] == 1395.0
    assert lines[1]["windows"][0]["gpu_state"] == {"not_recorded": "backend interpreter: the kernels run on no GPU"}


def test_a_bad_gpu_state_field_is_named(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    window = {"condition": "met", "waited_s": 0.1, "calls": 5, "samples": 1, "gpu_state": {"after": {"power_w": "hot"}}}
    path.write_text(json.dumps({"shape": "s", "status": "ok", "windows": [window]}) + "\n")
    with pytest.raises(FormatError,
                       match=r"results.jsonl:1: field 'windows\[0\]\.gpu_state.after.power_w': expected a number"):
        list(read_results(path))


def test_a_record_with_a_field_results_jsonl_does_not_hold_is_refused_naming_it(tmp_path: Path) -> None:
    # The record-level gpu_state of records from before windows is no field of this format any more.
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"schema": 1, "shape": "s", "status": "ok", "gpu_state": {"reasons": []}}) + "\n")
    with pytest.raises(FormatError, match=r"results.jsonl:1: field 'gpu_state': not a field of ShapeResult$"):
        list(read_results(path))


# -- the report ---------------------------------------------------------------------
def _w(state: GpuState | None, condition: str | None = None) -> Window:
    """A timed window as the report reads it: its regime condition (None: a record from before regimes), state."""
    return condition, state


def test_boost_clocks_on_both_sides_give_the_op_line_and_no_flag(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"s": [0.02, 0.03, 0.025], "t": [0.0, 0.01, -0.01]})
    with_gpu_state(tmp_path, lambda rnd, side, shape: _state(1980.0, 148.0 if side == "A" else 150.0, ["gpu_idle"]))
    report = build_report(tmp_path)
    op = report.ops[0]
    # Six 0.5 s windows, each with edges of its own: too short for the energy counter's steps, so the line gives
    # NVML's averaged figure and says so.
    assert op.gpu_state["A"] == {"windows": 6, "recorded": 6, "sm_clock_mhz": 1980.0, "mem_clock_mhz": 3201.0,
                                 "power_w": 148.0, "temperature_c": 50.0, "energy_power_w": None,
                                 "energy_power_withheld": f"withheld: 3 s of timed windows in 6 separate stretches "
                                 f"against the energy counter's ~{ENERGY_COUNTER_UPDATE_S * 1e3:.0f} ms updates (a "
                                 f"figure needs {ENERGY_MIN_S:g} s a stretch)",
                                 "temperature_first_c": 40.0, "temperature_last_c": 50.0,
                                 "reason_share": {"gpu_idle": 1.0}, "conditions": {"not_checked": 6}}
    assert [s.flags for s in op.shapes] == [[], []]
    assert ("   GPU: A 1980 MHz 148 W (NVML avg), B 1980 MHz 150 W (NVML avg); power cap in 0% / 0% of windows; "
            "temperature first/last window A 40/50 C, B 40/50 C\n" in render_text(report))


def test_a_power_capped_side_at_lower_clocks_flags_its_shape(tmp_path: Path) -> None:
    # The H200's mm at its power cap (docs' power-regime table): A at 1508 MHz, B at 1395 MHz, both capped.
    synthetic_root(tmp_path, {"mm": [0.097, 0.095, 0.1], "sum": [-0.4, -0.4, -0.41]})

    def state(rnd: int, side: str, shape: str) -> GpuState:
        if shape == "sum":
            return _state(1980.0, 420.0, [])
        capped = side == "B" or rnd == 1
        return _state(1508.0 if side == "A" else 1395.0, 690.0, ["sw_power_cap"] if capped else [])

    with_gpu_state(tmp_path, state)
    report = build_report(tmp_path)
    op = report.ops[0]
    mm, sum_ = op.shapes
    assert mm.flags == [POWER_CAPPED, CLOCKS_DIFFER] and sum_.flags == []
    assert mm.verdict == "slower" and mm.delta_pct == pytest.approx(9.7)  # the flag keeps the numbers
    assert op.flags == {POWER_CAPPED: 1, CLOCKS_DIFFER: 1}
    assert op.gpu_state["A"]["reason_share"] == {"sw_power_cap": pytest.approx(1 / 6)}
    assert op.gpu_state["B"]["reason_share"] == {"sw_power_cap": 0.5}
    line = next(line for line in render_text(report).splitlines() if line.startswith("   GPU:"))
    # One 0.5 s window per cell: too short for the energy counter's figure, so NVML's averaged one, said so.
    assert line == ("   GPU: A 1744 MHz 555 W (NVML avg), B 1688 MHz 555 W (NVML avg); power cap in 17% / 50% of "
                    "windows; temperature first/last window A 40/50 C, B 40/50 C; flagged: power_capped on 1 of 2 "
                    "shapes, clocks_differ on 1 of 2 shapes")
    write_report(tmp_path, report)
    again = read_report(tmp_path / "report.json")
    assert again.ops[0].gpu_state == op.gpu_state and again.ops[0].shapes[0].flags == mm.flags
    assert render_text(again) == render_text(report)
    # The verdict line keeps the verdict and names the condition it holds under, with the shape's own clocks and
    # power (the op's line mixes in the shape that never reached the cap).
    ends = {"temperature_first_c": 40.0, "temperature_last_c": 50.0}
    assert mm.gpu == {"A": {"sm_clock_mhz": 1508.0, "power_w": 690.0, "energy_power_w": None,
                            "power_cap_share": pytest.approx(1 / 3), **ends},
                      "B": {"sm_clock_mhz": 1395.0, "power_w": 690.0, "energy_power_w": None, "power_cap_share": 1.0,
                            **ends}}
    assert sum_.gpu["A"] == {"sm_clock_mhz": 1980.0, "power_w": 420.0, "energy_power_w": None, "power_cap_share": 0.0,
                             **ends}
    assert again.ops[0].shapes[0].gpu == mm.gpu
    assert ("slower [power_capped, clocks_differ] (holds under the power cap, side clocks that differ: "
            "A 1508 MHz 690 W (NVML avg), B 1395 MHz 690 W (NVML avg))") in render_text(report)


@pytest.mark.parametrize("reasons, flags", [
    (["sw_thermal_slowdown"], [THERMAL]), (["hw_thermal_slowdown", "gpu_idle"], [THERMAL]),
    (["hw_slowdown"], [HW_SLOWDOWN]), (["hw_power_brake"], [HW_SLOWDOWN]),
    (["sw_power_cap", "hw_power_brake", "hw_thermal_slowdown"], [POWER_CAPPED, THERMAL, HW_SLOWDOWN]),
    (["gpu_idle", "sync_boost", "applications_clocks_setting"], []),
])
def test_reasons_seen_in_any_window_name_their_flags(reasons: list[str], flags: list[str]) -> None:
    quiet = _w(_state(1980.0, 300.0, []))
    assert shape_flags([([quiet], [quiet]), ([quiet], [quiet, _w(_state(1980.0, 300.0, reasons))])]) == flags
    assert set(flags) <= set(FLAGS) and not any(FLAGS[f].withholds for f in flags)


@pytest.mark.parametrize("clock_b, differ", [(1980.0, False), (1965.0, False), (1950.0, True), (1395.0, True)])
def test_clocks_differ_beyond_one_percent(clock_b: float, differ: bool) -> None:
    a, b = _w(_state(1980.0, 300.0, [])), _w(_state(clock_b, 300.0, []))
    assert shape_flags([([a], [b]), ([a], [b]), ([a], [(None, None)])]) == ([CLOCKS_DIFFER] if differ else [])


def test_windows_not_recorded_are_counted_and_named() -> None:
    summary = side_summary([_w(_state(1980.0, 150.0, [])), (None, None),
                            _w(GpuState(not_recorded="NVML did not start: x")),
                            _w(GpuState(not_recorded="NVML did not start: x"))])
    assert summary["windows"] == 4 and summary["recorded"] == 1 and summary["not_recorded"] == "NVML did not start: x"
    assert summary["sm_clock_mhz"] == 1980.0 and summary["reason_share"] == {}
    empty = side_summary([_w(GpuState(not_recorded="backend interpreter: the kernels run on no GPU"))])
    assert empty["recorded"] == 0 and empty["sm_clock_mhz"] is None and empty["energy_power_w"] is None


def test_a_root_without_timed_windows_says_it_was_not_recorded(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"s": [0.02, 0.03, 0.025]})
    report = build_report(tmp_path)
    assert report.ops[0].shapes[0].flags == []
    lines = render_text(report).splitlines()
    # Said once, in the header; the op's block does not repeat it.
    assert [line for line in lines if "GPU state" in line] == [
        "GPU state: not recorded (no timed window)"]


def test_a_real_interpreter_cell_records_why_it_has_no_gpu_state(campaign_dir: pytest.Pytester,
                                                                  tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=simple_campaign(ops='"one"'))
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), "--ab-ir-target",
                                               "none", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    for cell in ("r1_A", "r1_B"):
        records = [json.loads(line) for line in (root / cell / "one" / "results.jsonl").read_text().splitlines()]
        assert [w["gpu_state"] for r in records for w in r["windows"]] == \
            [{"not_recorded": "backend interpreter: the kernels run on no GPU"}] * 6  # 2 shapes, 3 windows each
        assert "[abbench] GPU state: not recorded (backend interpreter" in (root / cell / "one" / "run.log").read_text()
        # The clock and power settings in the identity say why they are missing, and compare as no mismatch.
        identity = json.loads((root / cell / "one" / "run_identity.json").read_text())
        assert {axis: identity[axis] for axis in GPU_SETTING_AXES} == \
            dict.fromkeys(GPU_SETTING_AXES, "not recorded (backend interpreter: the kernels run on no GPU)")
    assert result.ret == 0 and "[caliber" not in result.stdout.str()
    report = read_report(root / "report.json")
    assert report.ops[0].gpu_state["A"]["recorded"] == 0 and report.ops[0].gpu_state["A"]["windows"] == 6
    assert ("GPU state: not recorded (backend interpreter: the kernels run on no GPU); the regime's condition could "
            "not be checked") in (root / "report.md").read_text().splitlines()
    assert "GPU: A" not in (root / "report.md").read_text()
