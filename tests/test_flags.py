"""Flags (report/flags.py): conditions under which a shape's delta is no conclusion, found in roots written as
cells write them, and the verdicts they withhold or leave standing."""

from __future__ import annotations

import json
import math
from pathlib import Path

from helpers import synthetic_root

from pytest_abbench.report import build_report, render_text
from pytest_abbench.report import flags as flags_module
from pytest_abbench.report import gpustate
from pytest_abbench.report.flags import (BIMODAL, BOOST_NOT_REACHED, CLOCKS_DIFFER, CLOCKS_NOT_SETTLED, DRIFT, FLAGS,
                                         HW_SLOWDOWN, POWER_CAPPED, REFERENCE_DIFFERS, THERMAL, WITHHOLDING)


def test_flag_names_are_declared_once_with_whether_they_withhold_and_their_wording() -> None:
    gpu = [POWER_CAPPED, THERMAL, HW_SLOWDOWN, CLOCKS_DIFFER, CLOCKS_NOT_SETTLED, BOOST_NOT_REACHED]
    assert list(FLAGS) == [DRIFT, BIMODAL, *gpu, REFERENCE_DIFFERS]
    assert WITHHOLDING == (DRIFT, BIMODAL)
    assert [name for name, flag in FLAGS.items() if flag.gpu] == gpu
    # A flag that keeps the verdict names the condition it holds under, the in-process reference's excepted (a warning).
    assert all(name == flag.name and flag.meaning and (flag.holds_under or name == REFERENCE_DIFFERS)
               for name, flag in FLAGS.items())
    # The GPU flags are the registry's, not a second list in report/gpustate.py.
    assert not hasattr(gpustate, "GPU_FLAGS") and gpustate.FLAGS is flags_module.FLAGS


def test_a_side_that_drifts_gets_no_plain_verdict_and_the_line_says_what_is_known(tmp_path: Path) -> None:
    # Identical code; side B 0.4% slower every round: the rounds alone read 'slower' (p < 0.001, 9 of 10 rounds).
    synthetic_root(tmp_path, {"s": [math.expm1(math.log1p(0.004) * k) for k in range(10)]})
    report = build_report(tmp_path)
    shape = report.ops[0].shapes[0]
    assert shape.flags == [DRIFT] and shape.verdict == "inconclusive"
    assert shape.note == "slower in 9 of 10 rounds; side B drifts +0.40%/round"
    assert report.ops[0].flags == {DRIFT: 1}
    text = render_text(report)
    assert "inconclusive [drift]" in text and "drift on 1 of 1 shapes" in text


def test_a_drift_much_smaller_than_the_effect_leaves_the_verdict_standing(tmp_path: Path) -> None:
    # +10% with B 0.1% slower a round: the trend is real (and named for the op) but cannot have made a +10% delta.
    synthetic_root(tmp_path, {"s": [0.10 + 0.001 * k for k in range(10)], "t": [0.10 + 0.001 * k for k in range(10)]})
    op = build_report(tmp_path).ops[0]
    assert [s.verdict for s in op.shapes] == ["slower", "slower"] and not any(s.flags for s in op.shapes)
    assert op.findings == ["drift: side B drifts +0.09%/round (the op's shapes together)"]


def test_processes_in_two_groups_withhold_the_direction_they_could_make(tmp_path: Path) -> None:
    # B's processes land at +0% or +8%: 6 of 8 rounds high reads 'slower' to the t-test (p = 0.003).
    synthetic_root(tmp_path, {"s": [0.08, 0.08, 0.0, 0.08, 0.08, 0.0, 0.08, 0.08]})
    shape = build_report(tmp_path).ops[0].shapes[0]
    assert shape.p_adjusted is not None and shape.p_adjusted < 0.05
    assert shape.flags == [BIMODAL] and shape.verdict == "inconclusive"
    assert shape.note == "slower in 6 of 8 rounds; side B's processes fall in two groups 8.0% apart (2 and 6 rounds)"


def test_one_outlying_process_is_no_second_group(tmp_path: Path) -> None:
    # A group of one is a bad process, which the rounds see as such: no flag, the direction stands.
    synthetic_root(tmp_path, {"s": [0.1] * 7 + [-0.001]})
    shape = build_report(tmp_path).ops[0].shapes[0]
    assert shape.flags == [] and shape.verdict == "slower"


def test_shapes_whose_rounds_agree_by_luck_are_withheld_when_the_op_shows_two_modes(tmp_path: Path) -> None:
    # Three rounds, each shape's process in one of two modes 8% apart on side B: 'flat' landed high in all three
    # (a t-test p of 0), the others split 2 + 1 in different rounds.  Together they show the modes.
    deltas = {"flat": [0.08, 0.08, 0.08]}
    for n, pattern in enumerate([(0, 0, 1), (0, 1, 0), (1, 0, 0), (1, 1, 0), (1, 0, 1), (0, 1, 1), (0, 0, 1)]):
        deltas[f"n={n}"] = [0.08 * m for m in pattern]
    synthetic_root(tmp_path, deltas)
    op = build_report(tmp_path).ops[0]
    flat = op.shapes[0]
    assert flat.p_value == 0.0 and flat.flags == [BIMODAL] and flat.verdict == "inconclusive"
    assert op.findings and op.findings[0].startswith("bimodal: in 7 of 16 shape-sides")
    assert all(s.flags == [BIMODAL] for s in op.shapes)


def test_one_round_out_high_in_some_shapes_and_low_in_others_is_two_modes_not_a_bad_process(tmp_path: Path) -> None:
    # Three rounds: with modes of each shape's own, one round of three is the odd one in half the shapes by chance
    # alone, and it is out high in some of them and low in others (issue 46).  A bad process puts it out on one side.
    modes = {"flat": [0.08, 0.08, 0.08]}
    for n, pattern in enumerate([(1, 0, 0)] * 3 + [(0, 1, 1)] * 2 + [(0, 1, 0), (0, 0, 1), (1, 0, 1)]):
        modes[f"n={n}"] = [0.08 * m for m in pattern]
    synthetic_root(tmp_path / "modes", modes)
    op = build_report(tmp_path / "modes").ops[0]
    assert op.findings and op.findings[0].startswith("bimodal: in 8 of 18 shape-sides")
    assert op.shapes[0].verdict == "inconclusive" and op.shapes[0].flags == [BIMODAL]
    bad = {f"n={n}": [0.001 * n, 0.08 + 0.001 * n, -0.001 * n] for n in range(9)}
    synthetic_root(tmp_path / "bad", bad)
    assert not build_report(tmp_path / "bad").ops[0].findings


def _noisy_cells(root: Path, spread: float) -> None:
    """Give every cell's samples a spread around their median (the median itself unchanged)."""
    for results in root.glob("r*/*/results.jsonl"):
        lines = []
        for line in results.read_text().splitlines():
            rec = json.loads(line)
            m = rec["median_ms"]
            rec["samples_ms"] = [m * (1 + spread * k) for k in (-2, -1, 0, 1, 2)]
            lines.append(json.dumps(rec))
        results.write_text("\n".join(lines) + "\n")


def test_rounds_that_agree_more_closely_than_their_cells_are_noisy_give_no_tiny_p(tmp_path: Path) -> None:
    # Three rounds at +1.00%, +1.01%, +0.99%, each the difference of two medians of samples 2% apart: the
    # rounds' spread (0.01%) is luck, the cells' own noise says a round's delta varies by about 2%.
    deltas = {"s": [0.01, 0.0101, 0.0099]}
    synthetic_root(tmp_path / "quiet", deltas)
    synthetic_root(tmp_path / "noisy", deltas)
    _noisy_cells(tmp_path / "noisy", 0.02)
    quiet = build_report(tmp_path / "quiet").ops[0].shapes[0]
    noisy = build_report(tmp_path / "noisy").ops[0].shapes[0]
    assert quiet.spread_floor_pct == 0.0 and quiet.p_value is not None and quiet.p_value < 0.001
    assert quiet.verdict == "slower"
    assert noisy.spread_floor_pct > 2.0 and noisy.p_value is not None and noisy.p_value > 0.3
    assert noisy.verdict == "inconclusive"
    assert noisy.ci_pct is not None and noisy.ci_pct[0] < -4.0  # 1% - 4.3 x 2.4% / sqrt(3)


def _scale_rounds(root: Path, factor_of_round: dict[int, float]) -> None:
    """Multiply every cell's times (both sides) in a round: the machine, not the code, moved."""
    for rnd, factor in factor_of_round.items():
        for results in root.glob(f"r{rnd}_*/*/results.jsonl"):
            lines = []
            for line in results.read_text().splitlines():
                rec = json.loads(line)
                rec["median_ms"] *= factor
                rec["samples_ms"] = [v * factor for v in rec["samples_ms"]]
                lines.append(json.dumps(rec))
            results.write_text("\n".join(lines) + "\n")


def test_both_sides_moving_together_is_the_machine_and_no_drift(tmp_path: Path) -> None:
    # Every process 1% slower than the one before, both sides alike, B +5% throughout: the delta holds.
    synthetic_root(tmp_path, {"s": [0.05, 0.051, 0.049, 0.05, 0.05, 0.051, 0.049, 0.05]})
    _scale_rounds(tmp_path, {rnd: 1.01 ** rnd for rnd in range(1, 9)})
    op = build_report(tmp_path).ops[0]
    assert op.findings == [] and op.shapes[0].flags == [] and op.shapes[0].verdict == "slower"


def test_processes_that_move_every_shape_into_two_groups_are_named_for_the_op(tmp_path: Path) -> None:
    # Side B's processes of rounds 1, 4 and 6 landed 8% higher with all four shapes.
    high = {1, 4, 6}
    synthetic_root(tmp_path, {f"n={n}": [0.08 + 0.001 * n if r in high else 0.001 * n for r in range(1, 9)]
                              for n in range(4)})
    op = build_report(tmp_path).ops[0]
    assert "bimodal: side B's processes fall in two groups 8.0% apart with all shapes (rounds 1, 4, 6 vs the rest)" \
        in op.findings
    assert all(s.flags == [BIMODAL] and s.verdict == "inconclusive" for s in op.shapes)


def test_a_large_effect_stands_beside_processes_in_two_groups(tmp_path: Path) -> None:
    # +20% with side B's processes 6.7% apart in 3 of 8 rounds: two such groups cannot make +20% (2 x 6.7% < 20%).
    synthetic_root(tmp_path, {"s": [0.28 if r in (2, 5, 7) else 0.20 for r in range(1, 9)]})
    shape = build_report(tmp_path).ops[0].shapes[0]
    assert shape.verdict == "slower" and shape.flags == []
