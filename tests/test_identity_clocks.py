"""The GPU's clock and power settings in each cell's identity: read through NVML (never set), compared between the
sides by the caliber check.  CI has no GPU: a stand-in answers for pynvml on an H200 (700 W, 1980 MHz) and says so;
the no-NVML path runs in a real interpreter session (test_gpustate.py, the real interpreter cell)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import synthetic_root

from pytest_abbench.checks.caliber import compare_identities
from pytest_abbench.child.gpustate import GpuSampler, open_sampler
from pytest_abbench.core.identity import GPU_SETTING_AXES, recorded


class NVMLError_NotSupported(Exception):
    def __str__(self) -> str:
        return "Not Supported"


class SettingsNvml:
    """Stands for pynvml on an H200, which CI does not have: the settings queries answer from the figures set on it;
    every name the code looks up is logged, so a test can see that nothing was set."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_CLOCK_ID_APP_CLOCK_TARGET = 1

    def __init__(self, sm: int = 1980, mem: int = 3201, enforced_mw: int = 700_000, management_mw: int = 700_000,
                 unsupported: tuple[str, ...] = (), missing: tuple[str, ...] = ()) -> None:
        self.figures = {"nvmlDeviceGetApplicationsClock": {1: sm, 2: mem}, "nvmlDeviceGetClock": {1: sm, 2: mem},
                        "nvmlDeviceGetEnforcedPowerLimit": enforced_mw,
                        "nvmlDeviceGetPowerManagementLimit": management_mw}
        self.unsupported, self.missing = unsupported, missing
        self.looked_up: list[str] = []

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return f"handle:{uuid}"

    def __getattr__(self, name: str) -> Any:
        self.looked_up.append(name)
        if name not in self.figures or name in self.missing:
            raise AttributeError(f"module 'pynvml' has no attribute '{name}'")
        figure = self.figures[name]

        def query(handle: str, kind: int = 0, clock_id: int | None = None) -> int:
            if name in self.unsupported:
                raise NVMLError_NotSupported()
            return figure[kind] if isinstance(figure, dict) else figure
        return query


def _settings(nvml: SettingsNvml) -> dict[str, Any]:
    return open_sampler("cuda", nvml=nvml, device=lambda: ("GPU-1234", None)).settings()


def test_the_settings_are_read_never_set() -> None:
    nvml = SettingsNvml()
    assert _settings(nvml) == {
        "app_clock_sm_mhz": 1980, "app_clock_mem_mhz": 3201, "power_limit_w": 700.0,
        "locked_clocks": "not recorded (NVML has no query for locked clocks; the SM clock of each timed window "
                         "shows what the card ran at)"}
    assert nvml.looked_up and not [n for n in nvml.looked_up if "Set" in n or "Reset" in n]


def test_a_query_the_card_refuses_or_pynvml_lacks_says_not_recorded_and_why() -> None:
    # An older pynvml without nvmlDeviceGetApplicationsClock: the app-clock target through nvmlDeviceGetClock.
    older = _settings(SettingsNvml(sm=1755, missing=("nvmlDeviceGetApplicationsClock",)))
    assert older["app_clock_sm_mhz"] == 1755
    # No enforced limit: the management limit is the figure; neither: not recorded, with both errors.
    assert _settings(SettingsNvml(management_mw=650_000,
                                  unsupported=("nvmlDeviceGetEnforcedPowerLimit",)))["power_limit_w"] == 650.0
    refused = _settings(SettingsNvml(unsupported=("nvmlDeviceGetApplicationsClock", "nvmlDeviceGetClock",
                                                  "nvmlDeviceGetEnforcedPowerLimit",
                                                  "nvmlDeviceGetPowerManagementLimit")))
    assert refused["app_clock_mem_mhz"] == ("not recorded (NVMLError_NotSupported: Not Supported; "
                                            "NVMLError_NotSupported: Not Supported)")
    assert not any(recorded(refused[axis]) for axis in GPU_SETTING_AXES)


def test_without_a_gpu_every_setting_says_not_recorded_and_why() -> None:
    assert GpuSampler(not_recorded="nvidia-ml-py is not installed").settings() == \
        dict.fromkeys(GPU_SETTING_AXES, "not recorded (nvidia-ml-py is not installed)")


def _root_with_settings(root: Path, side_a: dict[str, Any], side_b: dict[str, Any]) -> None:
    """A two-round root whose identities carry each side's settings as a cell writes them (identity.update)."""
    synthetic_root(root, {"s": [0.1, 0.1]})
    for cell, settings in (("r1_A", side_a), ("r2_A", side_a), ("r1_B", side_b), ("r2_B", side_b)):
        path = root / cell / "op" / "run_identity.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **settings}))


@pytest.mark.parametrize("nvml_b, axis, shown", [
    (SettingsNvml(enforced_mw=600_000), "power_limit_w", "A=700.0 B=600.0"),
    (SettingsNvml(sm=1410), "app_clock_sm_mhz", "A=1980 B=1410"),
    (SettingsNvml(mem=2619), "app_clock_mem_mhz", "A=3201 B=2619"),
])
def test_a_side_under_other_settings_is_a_caliber_mismatch_naming_the_axis(tmp_path: Path, capsys: Any,
                                                                           nvml_b: SettingsNvml, axis: str,
                                                                           shown: str) -> None:
    from pytest_abbench.cli import main

    _root_with_settings(tmp_path, _settings(SettingsNvml()), _settings(nvml_b))
    assert main(["summary", str(tmp_path)]) == 4
    out = capsys.readouterr().out
    assert f"!!! [caliber] op=op axis={axis}: {shown} - the GPU's clock or power settings changed" in out
    assert [line for line in out.splitlines() if line.startswith("!!!")] == [
        line for line in out.splitlines() if f"axis={axis}:" in line and line.startswith("!!!")]  # that axis only


def test_equal_settings_or_one_side_not_recorded_is_no_mismatch(tmp_path: Path, capsys: Any) -> None:
    from pytest_abbench.cli import main

    _root_with_settings(tmp_path / "equal", _settings(SettingsNvml()), _settings(SettingsNvml()))
    assert main(["summary", str(tmp_path / "equal")]) == 0
    # Side B without NVML (a container without it): nothing to compare, so nothing to refuse.
    no_nvml = GpuSampler(not_recorded="nvidia-ml-py is not installed").settings()
    _root_with_settings(tmp_path / "half", _settings(SettingsNvml()), no_nvml)
    assert main(["summary", str(tmp_path / "half")]) == 0
    assert "[caliber" not in capsys.readouterr().out
    # An identity written before these fields: no field, no mismatch.
    a, b = tmp_path / "equal" / "r1_A" / "op", tmp_path / "equal" / "r1_B" / "op"
    path = b / "run_identity.json"
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k not in GPU_SETTING_AXES}))
    assert not compare_identities("op", a, b).mismatches
