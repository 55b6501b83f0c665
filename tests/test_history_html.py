"""``abbench history --html``: one self-contained page of the history, read back with an HTML parser.

- The runs table holds every run; an op's series holds, per run in commit-time order, the history store's delta
  (exact in ``data-value``), interval (``data-low``/``data-high``) and verdict, and marks where the verdict changed
  from the commit before, in the table and in the inline SVG.
- Nothing is loaded from anywhere; op names, shape ids, labels and commit subjects are escaped.
- ``series_plot_svg``: points left to right in the order given, each dot on its bar, marks between neighbours.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import Node, parse, parse_self_contained, synthetic_root

from pytest_abbench.cli import main
from pytest_abbench.history.record import record_root
from pytest_abbench.history.store import History, RunRecord
from pytest_abbench.report import build_report, write_report
from pytest_abbench.report.html import SeriesPoint, series_plot_svg

T0 = 1_700_000_000  # the first commit's time; each next commit an hour later
HOSTILE = "<script>alert(1)</script>"


def git(repo: Path, *args: str, when: int | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    if when is not None:
        env.update(GIT_COMMITTER_DATE=f"{when} +0000", GIT_AUTHOR_DATE=f"{when} +0000")
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                          capture_output=True, text=True, env=env).stdout.strip()


def history_over_commits(tmp_path: Path, deltas: list[list[float]], order: list[int], op: str = "op",
                         shape: str = "s", subject: str = "change") -> tuple[Path, list[str]]:
    """A history file of one root per commit of a fresh repository (commit ``i`` an hour after ``i - 1``,
    its shape ``shape`` at the per-round ``deltas[i]``, shape ``t`` always the same), recorded in ``order``."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    shas = []
    for i in range(len(deltas)):
        (repo / "camp.py").write_text(f"OPS = []  # {i}\n")
        git(repo, "add", "camp.py")
        git(repo, "commit", "-qm", f"{subject} {i}", when=T0 + 3600 * i)
        shas.append(git(repo, "rev-parse", "HEAD"))
    history_file = tmp_path / "history.sqlite"
    for i in order:
        git(repo, "checkout", "-q", shas[i])
        root = tmp_path / f"root{i}"
        synthetic_root(root, {shape: deltas[i], "t": [0.0, 0.001, -0.001]}, op=op)
        (root / "campaign.json").write_text(json.dumps({"schema": 1, "campaign_files": {str(repo / "camp.py"): "h"},
                                                        "switch_env": None}))
        write_report(root, build_report(root))
        record_root(history_file, root, 0, label=f"step {i}")
    return history_file, shas


def section(doc: Node, series: str) -> Node:
    return next(s for s in doc.find("section", "series") if s.attrs["data-series"] == series)


def body_rows(node: Node, css: str) -> list[Node]:
    return node.find("table", css)[0].find("tbody")[0].find("tr")


SAME = [0.0, 0.001, -0.001]
SLOWER = [0.10, 0.11, 0.09]


def test_the_page_holds_the_stores_numbers_by_commit_time_and_marks_where_the_verdict_changed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Four commits: the third makes shape s 10% slower.  Recorded out of commit order.
    history_file, shas = history_over_commits(tmp_path, [SAME, SAME, SLOWER, SLOWER], order=[2, 0, 3, 1])
    out = tmp_path / "op.html"
    assert main(["history", "--history", str(history_file), "--op", "op", "--html", str(out)]) == 0
    printed = capsys.readouterr().out  # the text table says what the page says
    assert f"html: {out}" in printed and printed.count("<- verdict changed") == 1
    assert f"slower         step 2  <- verdict changed: same -> slower (after {shas[1][:12]})" in printed
    doc = parse_self_contained(out.read_text())
    with History(history_file, create=False) as history:
        runs = {r.id: r for r in history.runs()}

    by_commit = sorted(runs.values(), key=lambda r: r.subject_tree.commit_time if r.subject_tree else 0)
    assert [r.subject_tree.commit if r.subject_tree else None for r in by_commit] == shas
    for name in ("s", "t"):
        rows = body_rows(section(doc, name), "series")
        assert [float(r.find("td")[0].attrs["data-value"]) for r in rows] == [r.id for r in by_commit]
        for row, run in zip(rows, by_commit):
            cells = row.find("td")
            stored = next(s for s in run.shapes if s.shape == name)
            assert cells[1].all_text() == stored_commit(run) and cells[1].attrs["title"].endswith(
                f"change {shas.index(stored_commit_full(run))}")
            assert float(cells[3].attrs["data-value"]) == stored.delta_pct
            assert cells[3].all_text() == f"{stored.delta_pct:+.1f}%"
            ends = cells[4].find("span")[0]
            assert (float(ends.attrs["data-low"]), float(ends.attrs["data-high"])) == stored.ci_pct
            assert cells[5].find("span")[0].attrs["data-verdict"] == stored.verdict
            assert float(cells[6].attrs["data-value"]) == stored.rounds
    # The verdict changed once, at the third commit, in the table and in the plot.
    rows = body_rows(section(doc, "s"), "series")
    assert [r.find("td")[8].all_text() for r in rows] == ["", "", "same -> slower", ""]
    assert [r.find("td")[5].all_text() for r in rows] == ["same", "same", "slower", "slower"]
    assert [r.find("td")[8].all_text() for r in body_rows(section(doc, "t"), "series")] == [""] * 4
    svg = section(doc, "s").find("svg")[0]
    points = svg.find("g", "point")
    xs = [float(g.find("circle")[0].attrs["cx"]) for g in points]
    ys = [float(g.find("circle")[0].attrs["cy"]) for g in points]
    assert xs == sorted(xs) and len(xs) == 4
    assert ys[2] < ys[0] and ys[3] < ys[1]  # +10% drawn above 0%
    assert [g.find("text")[0].all_text() for g in points] == [s[:12] for s in shas]
    (mark,) = svg.find("g", "mark")
    assert mark.find("title")[0].all_text() == "same -> slower"
    assert xs[1] < float(mark.find("line")[0].attrs["x1"]) < xs[2]
    # Every run in the runs table, with the store's id and commit.
    listed = body_rows(doc, "runs")
    assert [float(r.find("td")[0].attrs["data-value"]) for r in listed] == sorted(runs)
    assert [r.find("td")[2].all_text() for r in listed] == [stored_commit(runs[i]) for i in sorted(runs)]
    assert [r.find("td")[10].all_text() for r in listed] == ["same 1, slower 1", "same 2", "same 1, slower 1",
                                                             "same 2"]


def stored_commit(run: RunRecord) -> str:
    return stored_commit_full(run)[:12]


def stored_commit_full(run: RunRecord) -> str:
    tree = run.subject_tree
    assert tree is not None and tree.commit is not None
    return tree.commit


def test_without_op_the_page_lists_the_runs_and_a_shape_narrows_the_series(tmp_path: Path) -> None:
    history_file, _ = history_over_commits(tmp_path, [SAME, SLOWER], order=[0, 1])
    out = tmp_path / "runs.html"
    assert main(["history", "--history", str(history_file), "--html", str(out)]) == 0
    doc = parse_self_contained(out.read_text())
    assert not doc.find("svg") and not doc.find("section") and len(body_rows(doc, "runs")) == 2
    assert doc.find("title")[0].all_text() == "abbench history: every run"
    assert main(["history", "--history", str(history_file), "--op", "op", "--shape", "t", "--html", str(out)]) == 0
    doc = parse_self_contained(out.read_text())
    assert [s.attrs["data-series"] for s in doc.find("section", "series")] == ["t"]
    assert main(["history", "--history", str(history_file), "--op", "nope", "--html", str(tmp_path / "x.html")]) == 2
    assert not (tmp_path / "x.html").exists()


def test_op_names_shape_ids_labels_and_subjects_are_escaped(tmp_path: Path) -> None:
    op, shape = 'op<b>&"', HOSTILE
    history_file, _ = history_over_commits(tmp_path, [SAME, SLOWER], order=[0, 1], op=op, shape=shape,
                                           subject='<img src=x onerror="alert(2)">')
    out = tmp_path / "h.html"
    assert main(["history", "--history", str(history_file), "--op", op, "--html", str(out)]) == 0
    text = out.read_text()
    assert "<script>" not in text and "<img" not in text and "<b>" not in text
    doc = parse_self_contained(text)
    assert not {n.tag for n in doc.walk()} & {"script", "img", "b"}
    assert doc.find("title")[0].all_text() == f"abbench history: {op}"
    hostile = section(doc, shape)
    assert hostile.attrs["data-op"] == op
    assert hostile.find("h2")[0].find("span", "clip")[0].attrs["title"] == f"{op}[{shape}]"
    commit = body_rows(hostile, "series")[0].find("td")[1]
    assert commit.attrs["title"].endswith('<img src=x onerror="alert(2)"> 0')
    assert any(t.all_text() == f"{op}[{shape}]: B/A - 1 across commits" for t in hostile.find("svg")[0].find("text"))


def test_series_plot_places_points_in_order_each_dot_on_its_bar_and_marks_between_neighbours() -> None:
    points = [SeriesPoint("c1", 1.0, 0.0, 2.0, "same"), SeriesPoint("c2", None),
              SeriesPoint("c3", 8.0, 6.0, 10.0, "slower", mark="same -> slower"),
              SeriesPoint("c4" + "x" * 40, -3.0, -4.0, -2.0, "faster", mark=HOSTILE)]
    svg = parse(series_plot_svg(points, margin_pct=2.0, title="t"))
    groups = svg.find("g", "point")
    assert len(groups) == 4
    xs = []
    for group, point in zip(groups, points):
        dots = group.find("circle")
        assert len(dots) == (0 if point.delta is None else 1)
        label = group.find("text")[0].all_text()
        assert label == point.label if len(point.label) <= 14 else label.endswith("\u2026") and len(label) == 14
        if dots:
            bar = group.find("line")[0]
            assert bar.attrs["x1"] == bar.attrs["x2"] == dots[0].attrs["cx"]
            low, high = sorted(float(bar.attrs[k]) for k in ("y1", "y2"))
            assert low < float(dots[0].attrs["cy"]) < high
            xs.append(float(dots[0].attrs["cx"]))
    assert xs == sorted(xs)
    ys = {p.label: float(g.find("circle")[0].attrs["cy"]) for g, p in zip(groups, points) if p.delta is not None}
    assert ys["c3"] < ys["c1"] < ys[points[3].label]  # up is slower
    # The line breaks at the point without a delta: two segments, the first a single point (not drawn).
    (line,) = svg.find("polyline")
    assert len(line.attrs["points"].split()) == 2
    marks = svg.find("g", "mark")
    assert [m.find("title")[0].all_text() for m in marks] == ["same -> slower", HOSTILE]
    assert xs[0] < float(marks[0].find("line")[0].attrs["x1"]) < xs[1]
    assert [t.all_text() for t in svg.find("text") if t.attrs.get("text-anchor") == "end"][:5] == [
        "-5%", "0", "+5%", "+10%", "c1"]


def test_a_page_into_a_missing_folder_or_onto_a_folder_is_refused_and_no_folder_is_made(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history_file, _ = history_over_commits(tmp_path, [SAME, SLOWER], order=[0, 1])
    missing = tmp_path / "nodir"
    assert main(["history", "--history", str(history_file), "--op", "op", "--html", str(missing / "x.html")]) == 2
    assert (f"abbench history: --html {str(missing / 'x.html')!r}: its folder {str(missing)!r} does not exist"
            in capsys.readouterr().err)
    assert not missing.exists()
    (tmp_path / "page.html").mkdir()
    assert main(["history", "--history", str(history_file), "--op", "op", "--html", str(tmp_path / "page.html")]) == 2
    assert f"abbench history: --html {str(tmp_path / 'page.html')!r} is a folder" in capsys.readouterr().err
