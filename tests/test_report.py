"""The round-delta report: known per-round deltas in, the verdicts they must give out."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import simple_campaign, synthetic_root

from pytest_abbench.cli import main
from pytest_abbench.core.fileio import FormatError
from pytest_abbench.report import REPORT_JSON, build_report, read_report, render_text, report_from_json, write_report
from pytest_abbench.report.compact import compact_lines
from pytest_abbench.report.render import header_lines


def test_consistent_ten_percent_faster_has_an_interval_around_it(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"s": [-0.10, -0.099, -0.101, -0.100, -0.098, -0.102]})
    op = build_report(tmp_path).ops[0]
    shape = op.shapes[0]
    assert shape.verdict == "faster" and not shape.sign_flip
    assert shape.ci_pct is not None and -10.5 < shape.ci_pct[0] < -10.0 < shape.ci_pct[1] < -9.5
    assert op.geomean_pct == pytest.approx(-10.0, abs=0.1) and op.verdicts == {"faster": 1}


def test_small_deltas_of_both_signs_count_as_a_sign_flip_and_never_a_direction(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"s": [0.003, -0.002, 0.001]})
    op = build_report(tmp_path).ops[0]
    assert op.sign_flips == 1 and op.shapes[0].sign_flip
    assert op.shapes[0].verdict not in ("faster", "slower")


def test_a_control_is_a_diagnostic_and_never_widens_the_margin(tmp_path: Path) -> None:
    # B/A's 90% interval is about [-1.0%, +2.8%]: outside +-2%, so not 'same', however noisy the A/A cells were.
    deltas = {"s": [0.025, -0.01, 0.02, 0.0]}
    synthetic_root(tmp_path / "ctl", deltas, control={"s": [0.03, -0.03, 0.035, -0.02]})
    report = build_report(tmp_path / "ctl")
    shape = report.ops[0].shapes[0]
    assert shape.aa_ci_pct is not None and shape.margin_pct == 2.0 and shape.verdict == "inconclusive"
    assert report.margin_source == "default" and shape.aa_bias_pct is None
    assert build_report(tmp_path / "ctl", margin_pct=5.0).ops[0].shapes[0].verdict == "same"


def test_an_aa_bias_withholds_directions_no_larger_than_it(tmp_path: Path) -> None:
    # A/A reads +0.5% in every round: the machine favours the later process by about that much.
    deltas = {"small": [0.004, 0.0041, 0.0039, 0.004], "large": [0.05, 0.051, 0.049, 0.05]}
    synthetic_root(tmp_path, deltas, control={"small": [0.005, 0.0051, 0.0049, 0.005],
                                               "large": [0.005, 0.0051, 0.0049, 0.005]})
    text = render_text(build_report(tmp_path))
    shapes = {s.shape: s for s in build_report(tmp_path).ops[0].shapes}
    assert shapes["small"].aa_bias_pct is not None and shapes["small"].verdict == "inconclusive"
    assert "A/A bias" in shapes["small"].note and shapes["large"].verdict == "slower"
    assert "2 shape(s) show a bias between processes" in text


def test_a_lone_aa_interval_off_zero_among_many_shapes_is_no_bias(tmp_path: Path) -> None:
    # One A/A shape of ten with a t-test p of 0.016: chance among ten shapes (BH: 0.16), not a machine bias.
    quiet = [0.001, -0.001, 0.0005, -0.0005]
    control = {"x": [0.01, 0.012, 0.004, 0.008]} | {f"n={n}": quiet for n in range(9)}
    synthetic_root(tmp_path, {shape: [0.05, 0.051, 0.049, 0.05] for shape in control}, control=control)
    report = build_report(tmp_path)
    x = report.ops[0].shapes[0]
    assert x.aa_ci_pct is not None and x.aa_ci_pct[0] > 0.0  # its own interval excludes 0 ...
    assert x.aa_p_adjusted is not None and x.aa_p_adjusted > 0.05 and x.aa_bias_pct is None  # ... BH says chance
    assert x.verdict == "slower" and "no shape shows a bias" in render_text(report)


def test_the_report_says_how_many_false_directions_chance_gives_at_its_size(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"s": [0.05, 0.051, 0.049, 0.05], "t": [0.001, -0.001, 0.0005, -0.0005]}, op="one")
    synthetic_root(tmp_path, {"s": [0.001, -0.001, 0.0005, -0.0005]}, op="two")
    assert ("by chance: with no change anywhere this rule gives a false direction to at most about 5% of ops, up to "
            "0.1 of these 2 ops (3 shapes); of the 1 direction(s) reported, up to 5% may be false"
            in render_text(build_report(tmp_path)))


def test_a_missing_control_cell_withholds_the_verdict(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"s": [0.1, 0.1]}, control={"s": [0.0, 0.0]}, failed=(2, "A2"))
    op = build_report(tmp_path).ops[0]
    assert op.state == "no_verdict" and "r2-A2 TIMEOUT" in op.reason


def test_regression_gate_exit_code_names_the_ops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    synthetic_root(tmp_path, {"s": [0.05, 0.051, 0.049, 0.05]}, op="slowop")
    synthetic_root(tmp_path, {"s": [0.0, 0.001, -0.001, 0.0]}, op="fineop")
    assert main(["summary", str(tmp_path), "--ab-fail-if-slower", "2"]) == 7
    assert "REGRESSION GATE: slower beyond the threshold: slowop" in capsys.readouterr().out
    assert main(["summary", str(tmp_path), "--ab-fail-if-slower", "10"]) == 0  # the interval is not beyond 10%


def test_the_gate_trips_on_one_slower_shape_that_the_geomean_hides(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # One shape of ten +10% in every round, nine unchanged: the geomean moves about 1%, below a 5% gate.
    deltas = {"big": [0.10, 0.101, 0.099, 0.10]} | {f"n={n}": [0.001, -0.001, 0.0005, -0.0005] for n in range(9)}
    synthetic_root(tmp_path, deltas, op="mixed")
    synthetic_root(tmp_path, {"s": [0.001, -0.001, 0.0005, -0.0005]}, op="fine")
    report = build_report(tmp_path, fail_if_slower_pct=5.0)
    assert report.slower_ops == ["mixed[big]"] and report.gate_scope == "shapes"
    op = report.ops[1]
    assert op.geomean_ci_pct is not None and op.geomean_ci_pct[1] < 5.0
    assert build_report(tmp_path, fail_if_slower_pct=5.0, gate="geomean").slower_ops == []
    assert build_report(tmp_path, fail_if_slower_pct=12.0).slower_ops == []  # the interval is not beyond 12%
    assert main(["summary", str(tmp_path), "--ab-fail-if-slower", "5"]) == 7
    out = capsys.readouterr().out
    assert "REGRESSION GATE: slower beyond the threshold: mixed[big]" in out
    assert "abbench: exit 7: slower beyond --ab-fail-if-slower: mixed[big]" in out


def test_the_shapes_short_of_the_gate_do_not_dilute_the_one_beyond_it(tmp_path: Path) -> None:
    # One shape around +9% in six rounds (one-sided p above 5% of 0.0043), nine unchanged ones below 5% in every
    # round: they cannot trip the gate falsely and leave its family, so the one is judged at 2.5% / 1 with its p
    # doubled (0.0085), not at 2.5% / 10 (0.043 after Benjamini-Hochberg across all ten: not counted).
    deltas = {"big": [0.10, 0.07, 0.12, 0.06, 0.11, 0.08]} | {f"n={n}": [0.001, -0.001] * 3 for n in range(9)}
    synthetic_root(tmp_path, deltas)
    report = build_report(tmp_path, fail_if_slower_pct=5.0)
    assert report.slower_ops == ["op[big]"] and report.ops[0].shapes[0].verdict == "slower"


def test_the_gate_sees_half_the_shapes_slower_when_the_other_half_is_faster(tmp_path: Path) -> None:
    # +5% and -5% shapes: a geomean near 0 hides both; the shape gate names the slower ones.
    up, down = [0.05, 0.051, 0.049, 0.05], [-0.05, -0.049, -0.051, -0.05]
    synthetic_root(tmp_path, {"a": up, "b": down, "c": up, "d": down})
    assert build_report(tmp_path, fail_if_slower_pct=2.0).slower_ops == ["op[a, c]"]
    assert build_report(tmp_path, fail_if_slower_pct=2.0, gate="geomean").slower_ops == []


def test_the_gate_does_not_count_a_shape_whose_slower_reading_a_flag_withheld(tmp_path: Path) -> None:
    # Side B 1% slower every round from +3%: beyond a 2% gate, but a delta that changes with time is no conclusion.
    synthetic_root(tmp_path, {"s": [0.03 + 0.01 * k for k in range(8)]})
    report = build_report(tmp_path, fail_if_slower_pct=2.0)
    assert report.slower_ops == [] and report.gate_held == ["op[s] (inconclusive [drift])"]
    text = render_text(report)
    assert "beyond the threshold but not counted (no plain 'slower'): op[s] (inconclusive [drift])" in text


def test_report_json_round_trips(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"a": [0.1, 0.12, 0.09], "b": [0.01, -0.01, 0.02]}, control={"a": [0.0, 0.01, -0.01]})
    built = build_report(tmp_path)
    write_report(tmp_path, built)
    data = json.loads((tmp_path / REPORT_JSON).read_text())
    assert data["schema_version"] == built.schema_version
    assert report_from_json(data) == built


def test_a_report_json_of_another_schema_is_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"a": [0.1, 0.12, 0.09]})
    write_report(tmp_path, build_report(tmp_path))
    path = tmp_path / REPORT_JSON
    assert read_report(path) == report_from_json(json.loads(path.read_text()))
    path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 6}))
    with pytest.raises(FormatError, match=rf"^{re.escape(str(path))}: field 'schema_version': expected 9, .* got 6$"):
        read_report(path)
    with pytest.raises(FormatError, match=r"report.json: field 'schema_version': missing"):
        report_from_json({"ops": []})


@pytest.mark.parametrize("mode", [("-n", "2"), ("-p", "no:xdist")])
def test_terminal_report_with_and_without_xdist(campaign_dir: pytest.Pytester, tmp_path: Path,
                                                 mode: tuple[str, str]) -> None:
    campaign_dir.makepyfile(c=simple_campaign())
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "2", "--ab-root", str(root), "--ab-control",
                                               "--ab-ir-target", "none", "-p", "no:cacheprovider", *mode)
    result.assert_outcomes(passed=12)
    out = result.stdout.str()
    assert out.count("abbench report") == 1
    assert "== one: rounds 2/2" in out and "== two: rounds 2/2" in out and "A/A control" in out
    data = json.loads((root / REPORT_JSON).read_text())
    assert [o["op"] for o in data["ops"]] == ["one", "two"] and all(o["control"] for o in data["ops"])


def test_verdicts_from_per_round_deltas(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"fast": [-0.10, -0.098, -0.102, -0.101], "flip": [0.003, -0.002, 0.001, 0.0005],
                               "slow": [0.05, 0.052, 0.049, 0.051]})
    report = build_report(tmp_path)
    op = report.ops[0]
    shapes = {s.shape: s for s in op.shapes}
    assert shapes["fast"].verdict == "faster"
    assert shapes["fast"].ci_pct is not None and shapes["fast"].ci_pct[0] < -10.0 < shapes["fast"].ci_pct[1]
    assert shapes["flip"].sign_flip and shapes["flip"].verdict == "same"
    assert shapes["slow"].ci90_pct is not None and shapes["fast"].p_adjusted is not None
    assert shapes["slow"].verdict == "slower"
    assert op.sign_flips == 1 and not report.caliber_mismatch


def test_each_shape_says_in_how_many_rounds_b_was_faster(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"mostly": [-0.05, -0.04, 0.01, -0.06], "never": [0.02, 0.03, 0.0, 0.025]})
    report = build_report(tmp_path)
    assert [s.faster_rounds for s in report.ops[0].shapes] == [3, 0]  # a round of exactly 0 is faster in none
    table = render_text(report).splitlines()
    header = next(line for line in table if "95% CI" in line)
    assert header.split().index("faster") == header.split().index("CI") + 1
    rows = {line.split()[0]: line for line in table if line.split()[:1] in (["mostly"], ["never"])}
    assert re.search(r" ~ [-+0-9.]+% +3/4 ", rows["mostly"]) and re.search(r" ~ [-+0-9.]+% +0/4 ", rows["never"])


def test_failed_round_gives_no_verdict(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"s": [-0.1, -0.1, -0.1]}, failed=(2, "B"))
    op = build_report(tmp_path).ops[0]
    assert op.state == "no_verdict" and "r2-B TIMEOUT" in op.reason and not op.shapes


def test_one_outlier_round_no_longer_vetoes_a_clear_effect(tmp_path: Path) -> None:
    # Seven rounds at +10% and one just below zero: the sign flip is reported, the direction stands.
    synthetic_root(tmp_path, {"s": [0.1] * 7 + [-0.001]})
    op = build_report(tmp_path).ops[0]
    shape = op.shapes[0]
    assert shape.ci_pct is not None and shape.ci_pct[0] > 0
    assert shape.sign_flip and op.sign_flips == 1 and shape.verdict == "slower"


def test_a_significant_mean_carried_by_a_minority_of_rounds_gets_no_direction(tmp_path: Path) -> None:
    # The t-test is significant (p = 0.037), but 6 of 10 rounds sit below zero.
    synthetic_root(tmp_path, {"s": [0.05] * 4 + [-0.00001] * 6})
    shape = build_report(tmp_path).ops[0].shapes[0]
    assert shape.p_adjusted is not None and shape.p_adjusted < 0.05
    assert shape.verdict == "inconclusive" and "4 of 10 rounds slower, 6 needed" in shape.note


def test_many_shapes_are_corrected_together_and_keep_their_declared_order(tmp_path: Path) -> None:
    # One shape whose own t-test is at p = 0.03 among nine without an effect: after
    # Benjamini-Hochberg over the op's ten shapes it is no longer a direction.
    deltas = {f"n={n}": [0.001, -0.001, 0.0005] for n in (100000, 4096, 8, 512, 64, 2, 1, 16, 32)}
    deltas = {"n=3": [0.03, 0.05, 0.035], **deltas}
    synthetic_root(tmp_path, deltas)
    op = build_report(tmp_path).ops[0]
    assert [s.shape for s in op.shapes] == list(deltas)
    first = op.shapes[0]
    assert first.p_value is not None and first.p_value < 0.05 and first.p_adjusted is not None
    assert first.p_adjusted >= 0.05 and first.verdict == "inconclusive"


def test_the_regression_gate_refuses_interpreter_timings(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=simple_campaign())
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-backend", "interpreter", "--ab-fail-if-slower", "5",
                                               "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--ab-fail-if-slower gates on GPU timings*interpreter*wall timer*"])


def test_summary_refuses_to_gate_on_wall_clock_and_the_header_says_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    synthetic_root(tmp_path, {"s": [0.05, 0.051, 0.049, 0.05]})
    for identity in tmp_path.glob("r*/op/run_identity.json"):
        data = json.loads(identity.read_text())
        identity.write_text(json.dumps({**data, "backend": "interpreter", "timer": "wall", "switch": "X=1"}))
    assert main(["summary", str(tmp_path), "--ab-fail-if-slower", "2"]) == 2
    assert "says nothing about GPU speed" in capsys.readouterr().err
    assert main(["summary", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "switch (side B): X=1; backend interpreter; timer wall; device H200" in out
    assert "NOT GPU TIMINGS" in out and "rounds planned 4, run 4" in out
    assert "intervals cover this run's rounds on this card" not in out  # no card was timed


def test_a_gpu_report_says_its_intervals_cover_this_card_only(tmp_path: Path) -> None:
    """Two H200s read one layer_norm 1.5 points apart, each with an interval of +-0.05%: the header says what an
    interval covers, in the full text and the compact one."""
    synthetic_root(tmp_path, {"s": [0.05, 0.051, 0.049, 0.05]})
    report = build_report(tmp_path)
    scope = ("intervals cover this run's rounds on this card under its regime, not another card of the same model "
             "(docs/verdicts.md#what-an-interval-covers)")
    assert scope in header_lines(report)
    assert scope in compact_lines(report)


def test_each_switch_of_a_root_gets_a_header_line_naming_its_ops(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"s": [0.05, 0.051]}, op="mm", switch="DISABLE_MMA_V3=1")
    synthetic_root(tmp_path, {"s": [0.0, 0.001]}, op="sum", switch="ABBENCH_PLANTED=1")
    synthetic_root(tmp_path, {"s": [0.0, 0.001]}, op="topk", switch="DISABLE_MMA_V3=1")
    header = header_lines(build_report(tmp_path))
    assert header[:3] == ["switch (side B) of mm, topk: DISABLE_MMA_V3=1", "switch (side B) of sum: ABBENCH_PLANTED=1",
                          "backend cuda; timer cudagraph; device H200"]
    assert not any(" | " in line for line in header[:3])


def test_a_long_shape_id_is_shortened_in_its_row_and_given_whole_under_the_table(tmp_path: Path) -> None:
    long_id = "M=4096," + ",".join(f"arg{i}={i}" for i in range(700))  # about 5,000 characters
    synthetic_root(tmp_path, {long_id: [0.05, 0.051], "n=8": [0.0, 0.001]})
    lines = render_text(build_report(tmp_path)).splitlines()
    rows = [line for line in lines if "M=4096," in line or line.startswith("   n=8 ")]
    assert len(long_id) > 5000 and max(len(line) for line in rows[:-1]) < 200
    assert rows[0].startswith("   M=4096,arg0=0") and "... [1]" in rows[0]
    assert rows[-1] == f"   [1] shape {long_id}"
