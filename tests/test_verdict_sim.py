"""The verdict rule's properties on the seeded simulator's quick grid (benchmarks/verdict_sim.py).

Each setting is a root written as cells write it and scored by build_report, the
code `abbench summary` runs; the full grid and its table are in docs/verdicts.md.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SIM_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "verdict_sim.py"


def load_sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("verdict_sim", SIM_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["verdict_sim"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def results() -> dict[tuple[int, float, bool], object]:
    sim = load_sim()
    scored = sim.simulate(quick=True, seed=1, ops=40, shapes=5)
    return {(s.rounds, s.effect, s.control): score for s, score in scored.items()}


def test_identical_code_gets_few_false_directions_per_shape_and_per_op(results: dict) -> None:
    for (rounds, effect, control), sc in results.items():
        if effect == 0.0:
            assert sc.rate(sc.direction) <= 5.0, (rounds, control)
            if rounds >= 6:
                assert sc.rate(sc.ops_with_direction, per_op=True) <= 10.0, (rounds, control)


def test_power_grows_with_rounds_and_finds_five_percent_at_six_rounds(results: dict) -> None:
    two_at_6, two_at_10 = results[(6, 0.02, False)], results[(10, 0.02, False)]
    assert two_at_10.rate(two_at_10.direction) >= two_at_6.rate(two_at_6.direction)
    five_at_6 = results[(6, 0.05, False)]
    assert five_at_6.rate(five_at_6.direction) >= 90.0


def test_a_five_percent_effect_is_never_same_even_with_a_noisy_control(results: dict) -> None:
    for (rounds, effect, control), sc in results.items():
        if abs(effect) >= 0.05:
            assert sc.same == 0 and sc.wrong == 0, (rounds, control)
