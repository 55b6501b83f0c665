"""benchmarks/regimes/nvml_energy.py on the CPU: its figures from a made-up counter trace (CI has no GPU), and its exit
without one."""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest
from helpers import BENCHMARKS, load_benchmark

SCRIPT = BENCHMARKS / "regimes" / "nvml_energy.py"


@pytest.fixture(scope="module")
def energy() -> ModuleType:
    return load_benchmark("nvml_energy")


def _trace(energy: ModuleType, period_s: float, watts: float, seconds: float) -> Any:
    """A counter that a driver updates about every ``period_s`` (+-25%, seeded) at a steady ``watts``, polled every
    0.1 ms from t=0."""
    trace = energy.Trace("made up", 0.0, end=seconds, polls=int(seconds / 1e-4), first_mj=1000.0)
    draw = random.Random(0)
    update = 0.0
    while True:
        update += period_s * draw.uniform(0.75, 1.25)
        if update > seconds:
            break
        seen = update + 5e-5  # the first poll after the update
        trace.seen_at.append(seen)
        trace.last_old_at.append(seen - 1e-4)
        trace.value_mj.append(1000.0 + watts * update * 1e3)
    for index in range(int(seconds / 0.005)):
        trace.power_at.append(index * 0.005)
        trace.avg_w.append(watts)
        trace.instant_w.append(float("nan"))
    return trace


def test_the_update_period_steps_and_the_shortest_agreeing_window_come_from_the_counter(energy: ModuleType) -> None:
    trace = _trace(energy, 0.02, 500.0, 10.0)
    low, median, p90 = energy.quantiles(energy.update_periods_ms(trace))
    assert 15.0 <= low < 16.0 and median == pytest.approx(20.0, abs=0.5) and 24.0 < p90 <= 25.0
    steps = energy.steps_mj(trace)
    assert min(steps) >= 7_500.0 and statistics.median(steps) == pytest.approx(10_000.0, rel=0.03)  # 500 W x 20 ms
    assert energy.long_power_w(trace, 0.0, 10.0) == pytest.approx(500.0)
    # A read lags by up to one update: a window's error is up to one period over its length, so 5% needs windows
    # of about 20 periods (400 ms); the sweep's next length at or above that is 500 ms.
    rows = energy.agreement(trace, 0.0, 10.0, 500.0)
    assert energy.smallest_agreeing_ms(rows) == 500
    short = dict((ms, (lo, hi)) for ms, lo, hi, _ in rows)[10]
    assert short[0] == pytest.approx(-100.0) and short[1] > 50.0  # 10 ms windows read 0 or one whole step
    # NVML's averaged figure against the counter's, per window length.
    rows_w = {ms: (counter, averaged) for ms, counter, averaged, _ in energy.power_against_counter(trace, 0.0, 10.0)}
    assert rows_w[1000][0] == pytest.approx(500.0, rel=0.03) and rows_w[1000][1] == 500.0


def test_without_a_gpu_it_says_so_on_one_line_and_exits_2() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the script would measure it")
    out = subprocess.run([sys.executable, str(SCRIPT), "--seconds", "5"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stdout.startswith("nvml_energy: no GPU to measure: ") and out.stdout.count("\n") == 1


def test_a_bad_argument_is_named() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--seconds", "1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--seconds must be from 5 to 600, got 1" in out.stderr
