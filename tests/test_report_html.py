"""report.html: one self-contained page per root, read back with an HTML parser.

- Per shape its numbers (medians, delta, both intervals), verdict and flags are report.json's, exact in the
  cells' data attributes and rounded in their text; the GPU state per side is report.json's too.
- Nothing is loaded from anywhere: no script, no stylesheet link, no image, no URL.
- Op names, shape ids and switch labels are escaped; a long shape id is clipped with its whole text kept.
- An incomplete root says so; the session, ``abbench summary`` and ``write_report`` all write the page.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from helpers import (Node, capped_gpu_state, load_benchmark, parse, parse_self_contained, simple_campaign,
                     synthetic_root, with_gpu_state)

from pytest_abbench.cli import main
from pytest_abbench.report import build_report, read_report, write_report
from pytest_abbench.report.flags import FLAGS
from pytest_abbench.report.html import PlotPoint, interval_plot_svg, nice_ticks, page, render_html
from pytest_abbench.report.render import interval_text

HOSTILE = "<script>alert(1)</script>"
def sim_root(root: Path) -> None:
    """Two ops x four shapes from the seeded simulator: +5% and -5% shapes, A/A cells, noisy machine."""
    sim = load_benchmark("verdict_sim")
    root.rmdir()  # the simulator makes the root itself
    sim.write_root(root, sim.Setting(6, 0.05, True, "shifted", "mixed"), ops=2, shapes=4,
                   rng=np.random.default_rng(7))


def flagged_root(root: Path) -> None:
    """A drifting op (its shape flagged ``drift``) and a power-capped op with GPU state."""
    synthetic_root(root, {"s": [0.03 + 0.01 * k for k in range(8)]}, op="drifting")
    synthetic_root(root, {"mm": [0.097, 0.095, 0.1] * 2 + [0.096, 0.098], "sum": [-0.4, -0.41] * 4}, op="capped")
    with_gpu_state(root, capped_gpu_state)


def shape_rows(doc: Node, op: str) -> list[Node]:
    section = next(s for s in doc.find("section") if s.attrs.get("data-op") == op)
    return section.find("table", "shapes")[0].find("tbody")[0].find("tr")


@pytest.mark.parametrize("make", [sim_root, flagged_root], ids=["simulator", "flags-and-gpu"])
def test_every_shape_in_the_page_has_report_json_numbers_verdict_and_flags(tmp_path: Path,
                                                                       make: Callable[[Path], None]) -> None:
    make(tmp_path)
    write_report(tmp_path, build_report(tmp_path))
    data = json.loads((tmp_path / "report.json").read_text())
    doc = parse((tmp_path / "report.html").read_text())
    verdicts, flags, gpu_flags = set(), set(), set()
    for op in data["ops"]:
        assert op["state"] == "verdict"
        rows = shape_rows(doc, op["op"])
        assert len(rows) == len(op["shapes"])
        for row, shape in zip(rows, op["shapes"]):
            cells = row.find("td")
            assert cells[0].find("span", "clip")[0].attrs["title"] == shape["shape"]
            # Exact in data-value, rounded in the text as the text report rounds (4 digits, 0.1 point).
            for cell, key, text in ((cells[1], "a_ms", f"{shape['a_ms']:.4g}"), (cells[2], "b_ms",
                                    f"{shape['b_ms']:.4g}"), (cells[3], "delta_pct", f"{shape['delta_pct']:+.1f}%")):
                assert float(cell.attrs["data-value"]) == shape[key] and cell.all_text() == text, key
            assert cells[4].all_text() == f"{shape['delta_min_pct']:+.1f} ~ {shape['delta_max_pct']:+.1f}%"
            for cell, key in ((cells[5], "ci_pct"), (cells[6], "ci90_pct")):
                span = cell.find("span")[0]
                assert [float(span.attrs["data-low"]), float(span.attrs["data-high"])] == shape[key], key
                assert span.all_text() == interval_text(tuple(shape[key])), key
            assert cells[7].all_text() == f"{shape['faster_rounds']}/{shape['rounds']}"
            verdict = cells[12].find("span")[0]
            assert verdict.attrs["data-verdict"] == shape["verdict"]
            if shape["note"]:
                assert f"({shape['note']})" in cells[12].all_text()
            # One list of flags in report.json; the page puts those that withhold a verdict apart from the GPU's.
            withheld = [f for f in shape["flags"] if FLAGS[f].withholds]
            assert [f.all_text() for f in cells[13].find("span", "flag")] == withheld
            assert [f.all_text() for f in cells[14].find("span", "flag")] == [f for f in shape["flags"]
                                                                               if f not in withheld]
            if op["control"]:
                aa = cells[15].find("span")[0]
                assert [float(aa.attrs["data-low"]), float(aa.attrs["data-high"])] == shape["aa_ci_pct"]
            verdicts.add(shape["verdict"])
            flags.update(f for f in shape["flags"] if FLAGS[f].withholds)
            gpu_flags.update(f for f in shape["flags"] if not FLAGS[f].withholds)
        svg = next(s for s in doc.find("section") if s.attrs.get("data-op") == op["op"]).find("svg")
        assert len(svg) == 1
        labels = [t.all_text() for t in svg[0].find("text")]
        assert all(s["shape"] in labels for s in op["shapes"]) and "geomean" in labels
    if make is sim_root:
        assert {"slower", "faster"} <= verdicts  # the page is checked on both directions
    else:
        assert flags == {"drift"} and {"power_capped", "clocks_differ"} <= gpu_flags


def test_the_gpu_state_table_holds_report_json_per_side(tmp_path: Path) -> None:
    flagged_root(tmp_path)
    write_report(tmp_path, build_report(tmp_path))
    op = next(o for o in json.loads((tmp_path / "report.json").read_text())["ops"] if o["op"] == "capped")
    section = next(s for s in parse((tmp_path / "report.html").read_text()).find("section")
                   if s.attrs.get("data-op") == "capped")
    rows = section.find("table", "gpu")[0].find("tbody")[0].find("tr")
    for row, side in zip(rows, ("A", "B")):
        cells = row.find("td")
        state = op["gpu_state"][side]
        assert cells[0].all_text() == side
        values = [float(c.attrs["data-value"]) if "data-value" in c.attrs else c.all_text() for c in cells[1:8]]
        assert values == [state[k] if state[k] is not None else "-" for k in (
            "windows", "recorded", "sm_clock_mhz", "mem_clock_mhz", "power_w", "energy_power_w", "temperature_c")]
        assert state["energy_power_w"] is None  # one 0.5 s window per cell: too short for the energy counter
        assert float(cells[8].attrs["data-value"]) == state["reason_share"]["sw_power_cap"]
        # The thermal state the side's windows started and ended in, before the last column (why not recorded).
        assert [float(c.attrs["data-value"]) for c in cells[-3:-1]] == [state["temperature_first_c"],
                                                                         state["temperature_last_c"]]
    assert "GPU: A 1508 MHz 690 W (NVML avg), B 1395 MHz 690 W (NVML avg)" in section.all_text()  # the text's line


def test_the_page_loads_nothing_from_anywhere(tmp_path: Path) -> None:
    sim_root(tmp_path)
    write_report(tmp_path, build_report(tmp_path))
    doc = parse_self_contained((tmp_path / "report.html").read_text())
    assert len(doc.find("svg")) == 2 and len(doc.find("style")) == 1


def test_op_names_shape_ids_and_switch_labels_are_escaped(tmp_path: Path) -> None:
    op = "op<b>&\"'"
    long_id = "M=4096,N=4096,K=4096,dtype=bfloat16,layout=row_major," + "y" * 200
    synthetic_root(tmp_path, {HOSTILE: [0.05, 0.051, 0.049], long_id: [0.0, 0.001, -0.001]}, op=op)
    switch = '<img src=x onerror="alert(2)"> & DISABLE_MMA_V3=1'
    for identity in tmp_path.glob("r*_*/*/run_identity.json"):
        identity.write_text(json.dumps({**json.loads(identity.read_text()), "switch": switch}))
    report = build_report(tmp_path)
    assert report.setup["switch"] == switch
    write_report(tmp_path, report)
    text = (tmp_path / "report.html").read_text()
    assert "<script>" not in text and "<img" not in text and "<b>" not in text
    doc = parse(text)
    assert not {n.tag for n in doc.walk()} & {"script", "img", "b"}
    assert doc.find("title")[0].all_text() == f"abbench report: {switch}"
    assert doc.find("section")[0].attrs["data-op"] == op
    rows = shape_rows(doc, op)
    titles = [r.find("span", "clip")[0].attrs["title"] for r in rows]
    assert titles == [HOSTILE, long_id] and rows[0].find("td")[0].all_text() == HOSTILE
    labels = [t.all_text() for t in doc.find("svg")[0].find("text")]
    assert HOSTILE in labels
    long_label = next(label for label in labels if label.startswith("M=4096"))
    assert long_label.endswith("\u2026") and len(long_label) < 40  # clipped in the plot ...
    assert any(t.all_text().startswith(long_id + ":") for t in doc.find("svg")[0].find("title"))  # ... whole on hover


def test_an_incomplete_root_says_so(tmp_path: Path) -> None:
    synthetic_root(tmp_path / "stopped", {"s": [0.05, 0.051, 0.049]}, op="one")
    synthetic_root(tmp_path / "stopped", {"s": [0.05, 0.051]}, op="two")  # planned 3 rounds, ran 2
    report = build_report(tmp_path / "stopped")
    assert not report.complete
    doc = parse(render_html(report))
    banners = [p.all_text() for p in doc.find("p", "banner")]
    assert any(b.startswith("INCOMPLETE: the session stopped before every planned cell ran") for b in banners)
    two = next(s for s in doc.find("section") if s.attrs["data-op"] == "two")
    assert "stopped after round 2 of 3: no verdict" in two.all_text() and not two.find("table")
    synthetic_root(tmp_path / "whole", {"s": [0.05, 0.051, 0.049]}, op="one")
    whole = parse(render_html(build_report(tmp_path / "whole")))
    assert not any("INCOMPLETE" in p.all_text() for p in whole.find("p"))


def test_the_header_names_the_setup_and_any_field_a_later_report_adds(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"s": [0.05, 0.051, 0.049]})
    report = build_report(tmp_path)
    report.setup["power_regime"] = "capped 700 W"
    rows = {tr.find("td")[0].all_text(): tr.find("td")[1].all_text()
            for tr in parse(render_html(report)).find("table", "setup")[0].find("tbody")[0].find("tr")}
    assert rows["device"] == "H200" and rows["timer"] == "cudagraph" and rows["level"] == "core"
    assert rows["power regime"] == "capped 700 W" and rows["rounds"] == "planned 3, run 3"
    assert rows["margin"] == "+-2% (default)"


def test_abbench_summary_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    synthetic_root(tmp_path, {"s": [0.05, 0.051, 0.049, 0.05]})
    assert main(["summary", str(tmp_path), "--ab-fail-if-slower", "2"]) == 7
    capsys.readouterr()
    doc = parse((tmp_path / "report.html").read_text())
    banners = [p.all_text() for p in doc.find("p", "banner")]
    assert "REGRESSION GATE: slower beyond the threshold: op[geomean, s]" in banners
    setup = {tr.find("td")[0].all_text(): tr.find("td")[1].all_text()
             for tr in doc.find("table", "setup")[0].find("tbody")[0].find("tr")}
    assert setup["exit"].startswith("7: slower beyond --ab-fail-if-slower")


def test_interval_plot_places_each_point_between_its_ends_on_a_shared_axis() -> None:
    points = [PlotPoint("a", 5.0, 4.0, 6.0, rounds=[4.5, 5.5]), PlotPoint("b", -10.0, -12.0, -8.0, verdict="faster"),
              PlotPoint("no interval", 1.0), PlotPoint("nothing", None)]
    svg = parse(interval_plot_svg(points, margin_pct=2.0, title="t"))
    groups = svg.find("g")
    assert len(groups) == 4
    for group, point in zip(groups, points):
        dots = [float(c.attrs["cx"]) for c in group.find("circle") if c.attrs["r"] == "4"]
        bars = group.find("line")
        if point.low is not None:
            ends = sorted(float(bars[0].attrs[k]) for k in ("x1", "x2"))
            assert ends[0] < dots[0] < ends[1]
        assert len(dots) == (0 if point.delta is None else 1)
    texts = [t.all_text() for t in svg.find("text")]
    assert texts[0] == "t" and texts[1:texts.index("B/A - 1 (%)")] == ["-15%", "-10%", "-5%", "0", "+5%", "+10%"]
    assert nice_ticks(-12.0, 6.0) == [-15.0, -10.0, -5.0, 0.0, 5.0, 10.0]
    assert nice_ticks(-2.0, 10.000000000000009) == [-5.0, 0.0, 5.0, 10.0]  # a +10% delta's rounding error
    assert nice_ticks(0.0, 0.0) == [-1.0, -0.5, 0.0, 0.5, 1.0]


def test_page_is_a_whole_document_with_its_title_escaped() -> None:
    doc = parse(page("a < b", "<p>x</p>"))
    assert doc.find("title")[0].all_text() == "a < b" and doc.find("p")[0].all_text() == "x"
    assert doc.find("html")[0].attrs["lang"] == "en"


def test_a_session_writes_report_html(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), "--ab-ir-target",
                                               "none", "--ab-samples", "1", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"report: {root / 'report.md'}, {root / 'report.json'}, {root / 'report.html'}"])
    report = read_report(root / "report.json")
    doc = parse((root / "report.html").read_text())
    assert any(p.all_text().startswith("NOT GPU TIMINGS") for p in doc.find("p", "banner"))
    rows = shape_rows(doc, "one")
    assert [r.find("span", "clip")[0].attrs["title"] for r in rows] == [s.shape for s in report.ops[0].shapes]
    assert [float(r.find("td")[1].attrs["data-value"]) for r in rows] == [s.a_ms for s in report.ops[0].shapes]


def test_the_page_names_each_switch_with_its_ops(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"s": [0.05, 0.051]}, op="mm", switch="DISABLE_MMA_V3=1")
    synthetic_root(tmp_path, {"s": [0.0, 0.001]}, op="sum", switch="ABBENCH_PLANTED=1")
    page = render_html(build_report(tmp_path))
    assert "of mm: DISABLE_MMA_V3=1" in page and "of sum: ABBENCH_PLANTED=1" in page
    assert "DISABLE_MMA_V3=1 | ABBENCH_PLANTED=1" not in page and "<title>abbench report: 2 switches</title>" in page
