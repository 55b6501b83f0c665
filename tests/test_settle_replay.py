"""benchmarks/regimes/settle_replay.py on the CPU: a settling recorded from a stand-in for the H200's NVML (CI has
no GPU: the stand-in's clocks, power, counter and temperature are the test's) replays to the moment the live settling
ended, a changed constant moves it, and the script's command line names a bad constant."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from helpers import BENCHMARKS, load_benchmark
from test_regimes import FakeClock, QueueingKernel, StandInGpu, counter

from pytest_abbench.child import regime
from pytest_abbench.core import regimes

SCRIPT = BENCHMARKS / "regimes" / "settle_replay.py"


@pytest.fixture(scope="module")
def replay() -> ModuleType:
    return load_benchmark("settle_replay")


def heating(t: float) -> tuple[float, float, list[str], float, float]:
    """A card at its 700 W cap, clock steady at 1500 MHz, heating 3 C/s for 3 s: the temperature holds it."""
    return 1500.0, 690.0, ["sw_power_cap"], counter(700.0, update_s=0.1)(t), float(round(50.0 + 3.0 * min(t, 3.0)))


def recorded(replay: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Path, float]:
    """A live settling on the stand-in, its judge's last arguments written as settle_trace.py --record writes
    them; returns the file and the live settling's seconds."""
    clock = FakeClock()
    gpu = StandInGpu(clock, heating, power_limit=700.0)
    seen: list[tuple[Any, ...]] = []
    original = regime.judge

    def traced(*a: Any, **k: Any) -> regime.Judgement:
        seen[:] = [a]
        return original(*a, **k)

    monkeypatch.setattr(regime, "judge", traced)
    settling = regime.settle(QueueingKernel(clock, window_s=0.05), gpu, cpu=False, pace=clock)
    monkeypatch.setattr(regime, "judge", original)
    assert seen[0][4], "a queueing timer's settling polls the counter"
    path = tmp_path / "settle.jsonl"
    monkeypatch.syspath_prepend(str(BENCHMARKS / "regimes"))  # the script imports its neighbours, as run from its room
    load_benchmark("settle_trace").record(path, "stand-in", 1, 0.0, seen[0])  # as --record writes it on a GPU
    return path, settling.waited_s


def test_a_recorded_settling_replays_to_where_the_live_one_ended_and_a_changed_constant_moves_it(
        replay: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path, live_s = recorded(replay, monkeypatch, tmp_path)
    [trace] = replay.read_traces(path)
    assert live_s > 3.0  # held by the heating
    out = replay.replay(trace)
    assert out.settled_s == pytest.approx(live_s, abs=regimes.STEADY_CHUNK_MS / 1e3)
    assert out.detail == "1500 MHz at the cap" and out.clock_vs_after_pct is None  # nothing recorded after it
    # A slope rule ten times looser settles the same readings well before the heating ends.
    monkeypatch.setattr(regimes, "STEADY_TEMP_SLOPE_C_S", 5.0)
    looser = replay.replay(trace)
    assert looser.settled_s is not None and looser.settled_s < 2.0


def test_the_command_line_replays_a_file_and_names_a_bad_constant(
        replay: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path, live_s = recorded(replay, monkeypatch, tmp_path)
    run = subprocess.run([sys.executable, str(SCRIPT), str(path),
                          "--set", "STEADY_TEMP_SLOPE_C_S=5"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "; STEADY_TEMP_SLOPE_C_S=5" in run.stdout and "-- stand-in: 1 of 1 settled, mean" in run.stdout
    # A constant set for the whole regime carries to the constants derived from it, as core/regimes.py derives them.
    run = subprocess.run([sys.executable, str(SCRIPT), str(path), "--set", "STEADY_POWER_SPAN_S=0.5",
                          "--set", "STEADY_LAST_K=6"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.splitlines()[0].endswith(
        "; STEADY_CAP_POWER_SPAN_S=0.5, STEADY_LAST_K=6, STEADY_MIN_S=0.3, STEADY_POWER_SPAN_S=0.5"), \
        run.stdout + run.stderr
    for bad, said in (("NO_SUCH=1", "NO_SUCH is not a numeric constant"), ("STEADY_MIN_S=x", "'x' is not a number"),
                      ("STEADY_LAST_K=5.7", "STEADY_LAST_K is a whole number")):
        run = subprocess.run([sys.executable, str(SCRIPT), str(path), "--set", bad],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 1 and said in run.stderr, (bad, run.stderr)
    good = json.loads(path.read_text())
    for field, value in (("readings", 3), ("times", good["times"][:-1]), ("counter", [[1.0, 2.0]]),
                         ("counter", 5)):
        (tmp_path / "bad.jsonl").write_text(json.dumps({**good, field: value}) + "\n")
        run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "bad.jsonl")],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 2 and run.stderr.startswith(
            f"settle_replay: {tmp_path / 'bad.jsonl'}:1: field '{field}'"), (field, run.stderr)
