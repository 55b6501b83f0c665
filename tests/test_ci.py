"""The tool in CI: the README's recipe and ``abbench gate``.

- pytest answers a mistyped option and a bad environment variable with its usage error 4, the caliber
  mismatch's code too; the README's recipe runs the session with ``--ab-root`` and then ``abbench gate`` on
  that root, which reads the run's own report.json: 2 (no report), 4 (caliber), 7 (gate tripped), 0 (clean).
- The recipe is run as written in the README (bash -e, as a CI runner runs it), with only its pytest line
  replaced by the test's small campaign.
- One short markdown summary, a line per op, then the shapes slower or flagged: a session appends it to
  ``$GITHUB_STEP_SUMMARY`` when that is set, and ``abbench comment ROOT`` prints it.
- A big campaign's terminal report is compact (at most 150 lines for 100 ops), as is any under ``-q``; ``-v``
  and the report files keep every shape.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import other_shapes_campaign, simple_campaign, synthetic_root

from pytest_abbench.cli import main

FAST = "--ab-rounds 1 --ab-ir-target none --ab-samples 1 -p no:cacheprovider"
README = Path(__file__).resolve().parents[1] / "README.md"
PYTEST_LINE = "pytest campaigns --ab-rounds 6 --ab-fail-if-slower 2"


def readme_recipe() -> str:
    """The CI recipe block of the README's Exit codes section."""
    text = README.read_text()
    section = text[text.index("## Exit codes"):text.index("## Documentation")]
    return section[section.index("CI recipe"):].split("```")[1]


Recipe = tuple[subprocess.CompletedProcess[str], Path]  # the recipe's run and the root it made


def run_recipe(folder: Path, session: str, env: dict[str, str] | None = None) -> Recipe:
    """The README's recipe in ``folder`` with its pytest line's command replaced by ``session``; the root it made."""
    recipe = readme_recipe()
    assert PYTEST_LINE + ' --ab-root "$root"' in recipe, recipe
    script = recipe.replace(PYTEST_LINE, session)
    tmp = folder / "tmp"
    tmp.mkdir()
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # abbench, as an installed venv has it
    run_env = {**os.environ, "TMPDIR": str(tmp), "PATH": path, "ABBENCH_HISTORY": "off", **(env or {})}
    done = subprocess.run(["bash", "-e", "-c", script], cwd=folder, env=run_env, capture_output=True, text=True,
                          timeout=300)
    roots = list(tmp.iterdir())
    assert len(roots) == 1, roots
    return done, roots[0]


def gate_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("abbench gate: ")]
    assert len(lines) == 1, done.stdout + done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Recipe:
    """One finished clean campaign (one op, one round), run through the README's recipe in a GitHub step whose
    summary file already holds an earlier step's text; later tests reuse its root."""
    folder = tmp_path_factory.mktemp("clean")
    (folder / "c.py").write_text(simple_campaign('"one"'))
    (folder / "pytest.ini").write_text("[pytest]\n")
    (folder / "step.md").write_text("earlier step\n")
    return run_recipe(folder, f"{sys.executable} -m pytest c.py {FAST}",
                      {"XDG_CACHE_HOME": str(tmp_path_factory.mktemp("xdg")),
                       "GITHUB_STEP_SUMMARY": str(folder / "step.md")})


def test_the_recipe_passes_a_clean_run(clean_run: Recipe) -> None:
    done, root = clean_run
    assert done.returncode == 0, done.stdout + done.stderr
    assert gate_line(done) == f"abbench gate: exit 0: clean: every planned cell finished ({root}/report.json)"


def step_text(root: Path) -> str:
    """The markdown summary the clean run's session appended to the step summary, after the earlier step's text."""
    return (root.parent.parent / "step.md").read_text().removeprefix("earlier step\n")[:-1]


def test_the_session_appends_the_markdown_summary_to_the_step_summary(clean_run: Recipe) -> None:
    done, root = clean_run
    step = root.parent.parent / "step.md"
    assert f"summary: $GITHUB_STEP_SUMMARY ({step})" in done.stdout
    text = step_text(root)
    assert text.splitlines()[0] == "### abbench: exit 0: clean: every planned cell finished"
    assert "| one | inconclusive 2 | " in text and text.count("\n| one |") == 1
    assert "> NOT GPU TIMINGS" in text and f"Every shape: `{root}/report.md`" in text
    assert step.read_text().startswith("earlier step\n###")  # appended: the job's earlier steps stay


def test_comment_prints_the_same_body_and_refuses_a_root_without_a_report(clean_run: Recipe,
                                                                        campaign_dir: pytest.Pytester) -> None:
    _, root = clean_run
    printed = campaign_dir.run(sys.executable, "-m", "pytest_abbench.cli", "comment", str(root))
    assert printed.ret == 0
    assert "\n".join(printed.outlines) + "\n" == step_text(root)
    empty = campaign_dir.mkdir("empty")
    refused = campaign_dir.run(sys.executable, "-m", "pytest_abbench.cli", "comment", str(empty))
    assert refused.ret == 2 and not refused.outlines
    refused.stderr.fnmatch_lines([f"abbench comment: no report.json in {empty}: the session stopped before its "
                                  "report*"])


@pytest.mark.parametrize("session, env", [
    (f"{sys.executable} -m pytest c.py --ab-rounsd 1", {}),
    (f"{sys.executable} -m pytest c.py {FAST}", {"ABBENCH_COMPILE_JOBS": "abc"}),
], ids=["typo-option", "bad-variable"])
def test_the_recipe_tells_a_usage_error_from_a_caliber_mismatch(campaign_dir: pytest.Pytester, session: str,
                                                                env: dict[str, str]) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    # pytest's own answer is 4, the caliber mismatch's code: the exit code alone cannot tell them apart.
    alone = subprocess.run(session.split(), cwd=campaign_dir.path, env={**os.environ, **env}, capture_output=True,
                           text=True, timeout=120)
    assert alone.returncode == 4, alone.stdout + alone.stderr
    done, root = run_recipe(campaign_dir.path, session, env)
    assert done.returncode == 1
    assert gate_line(done).startswith(f"abbench gate: exit 2: no report.json in {root}: the session stopped before "
                                      "its report")
    assert done.stdout.splitlines()[-1].startswith("no report: the session stopped before it")
    assert "caliber" not in done.stdout


def test_the_recipe_names_a_real_caliber_mismatch(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(c=other_shapes_campaign())
    done, root = run_recipe(campaign_dir.path, f"{sys.executable} -m pytest c.py {FAST}")
    assert done.returncode == 1
    assert gate_line(done) == (f"abbench gate: exit 4: caliber mismatch: the two sides' numbers mean different "
                               f"things for one ({root}/report.json)")
    assert done.stdout.splitlines()[-1] == "caliber mismatch: the two sides are not comparable"


def test_the_recipe_names_a_regression(campaign_dir: pytest.Pytester) -> None:
    """--ab-fail-if-slower gates on GPU timings only, so an interpreter session cannot trip it: the pytest line is
    replaced by a root written as GPU cells write it, judged by ``abbench summary`` with the same threshold."""
    write = (f'{sys.executable} -c "import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); '
             'from helpers import synthetic_root; from pathlib import Path; '
             'synthetic_root(Path(sys.argv[1]), {\'s\': [0.05, 0.051, 0.049, 0.05]}, op=\'slowop\')" "$root" && '
             f'{sys.executable} -m pytest_abbench.cli summary "$root" --ab-fail-if-slower 2 >/dev/null || true #')
    done, root = run_recipe(campaign_dir.path, write)
    assert done.returncode == 1, done.stdout + done.stderr
    assert gate_line(done) == (f"abbench gate: exit 7: slower beyond --ab-fail-if-slower: slowop[geomean, s] "
                               f"({root}/report.json)")
    assert done.stdout.splitlines()[-1].startswith("regression: a shape or an op is slower beyond 2%")


def test_the_gate_keeps_the_sessions_allowance_of_a_mismatch_and_names_a_failed_cell(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    synthetic_root(tmp_path / "ok", {"s": [0.0, 0.001, -0.001]})
    synthetic_root(tmp_path / "failed", {"s": [0.0, 0.001, -0.001]}, failed=(2, "B"))
    for name in ("ok", "failed"):
        assert main(["summary", str(tmp_path / name)]) in (0, 1)
    assert main(["gate", str(tmp_path / "ok")]) == 0
    assert main(["gate", str(tmp_path / "failed")]) == 1
    assert "abbench gate: exit 1: 1 cell(s) failed: op[r2-B]" in capsys.readouterr().out
    # One side timed with another direct-timer repeat: a mismatch, 4, unless the summary (a session) allowed it.
    identity = tmp_path / "ok" / "r1_B" / "op" / "run_identity.json"
    identity.write_text(json.dumps({**json.loads(identity.read_text()), "direct_repeat": "other"}))
    assert main(["summary", str(tmp_path / "ok")]) == 4
    assert main(["gate", str(tmp_path / "ok")]) == 4
    assert main(["summary", str(tmp_path / "ok"), "--allow-caliber-mismatch"]) == 0
    assert main(["gate", str(tmp_path / "ok")]) == 0
    assert json.loads((tmp_path / "ok" / "report.json").read_text())["allow_caliber_mismatch"] is True
    # A later summary without the option keeps the allowance and the margin of the report it replaces (before, it
    # rewrote the report as exit 4, and the gate said 4 from then on).
    assert main(["summary", str(tmp_path / "ok"), "--ab-margin", "5", "--allow-caliber-mismatch"]) == 0
    capsys.readouterr()
    assert main(["summary", str(tmp_path / "ok")]) == 0
    assert (f"abbench summary: --ab-margin 5 and --allow-caliber-mismatch kept from the session that wrote "
            f"{tmp_path / 'ok' / 'report.json'}") in capsys.readouterr().err
    assert main(["gate", str(tmp_path / "ok")]) == 0
    assert json.loads((tmp_path / "ok" / "report.json").read_text())["margin_pct"] == 5


def test_a_later_summary_keeps_the_sessions_regression_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # B 5% slower in every round, written as GPU cells write it: --ab-fail-if-slower 2 trips on it.
    synthetic_root(tmp_path, {"s": [0.05, 0.051, 0.049, 0.05]}, op="slowop")
    assert main(["summary", str(tmp_path), "--ab-fail-if-slower", "2", "--ab-gate", "geomean"]) == 7
    assert main(["gate", str(tmp_path)]) == 7
    capsys.readouterr()
    # Rebuilt without the options (a report re-rendered after a fix to the report code), the gate stays: before,
    # the report was rewritten as a clean exit 0 and the CI gate passed a regression.
    assert main(["summary", str(tmp_path)]) == 7
    assert (f"abbench summary: --ab-fail-if-slower 2 and --ab-gate geomean kept from the session that wrote "
            f"{tmp_path / 'report.json'}") in capsys.readouterr().err
    assert main(["gate", str(tmp_path)]) == 7
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["fail_if_slower_pct"] == 2 and written["gate_scope"] == "geomean"
    assert written["slower_ops"] == ["slowop"]  # the geomean scope: the op, not its shapes
    # A threshold given here replaces the session's.
    assert main(["summary", str(tmp_path), "--ab-fail-if-slower", "50"]) == 0
    assert json.loads((tmp_path / "report.json").read_text())["gate_scope"] == "shapes"
    # A gated report from before the threshold was kept: refused, with what to give, and left as it was.
    assert main(["summary", str(tmp_path), "--ab-fail-if-slower", "2", "--ab-gate", "geomean"]) == 7
    older = json.loads((tmp_path / "report.json").read_text())
    del older["fail_if_slower_pct"]
    (tmp_path / "report.json").write_text(json.dumps(older))
    capsys.readouterr()
    assert main(["summary", str(tmp_path)]) == 2
    assert (f"abbench summary: {tmp_path / 'report.json'} was gated by --ab-fail-if-slower (slower: slowop) but does "
            f"not say its threshold: give --ab-fail-if-slower PCT (and --ab-gate geomean)") in capsys.readouterr().err
    assert json.loads((tmp_path / "report.json").read_text()) == older
    assert main(["gate", str(tmp_path)]) == 7
    # Dropped on purpose: the rewritten report has no gate, and a later summary keeps none.
    assert main(["summary", str(tmp_path), "--ab-no-fail-if-slower", "--ab-fail-if-slower", "2"]) == 2
    assert main(["summary", str(tmp_path), "--ab-no-fail-if-slower"]) == 0
    assert json.loads((tmp_path / "report.json").read_text())["fail_if_slower_pct"] is None
    assert main(["summary", str(tmp_path)]) == 0
    assert main(["gate", str(tmp_path)]) == 0


def test_the_gate_refuses_a_root_whose_report_is_missing_stale_or_unreadable(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", str(tmp_path / "nothing")]) == 2
    assert f"abbench gate: exit 2: root {tmp_path / 'nothing'} does not exist" in capsys.readouterr().err
    root = tmp_path / "root"
    synthetic_root(root, {"s": [0.0, 0.001, -0.001]})
    assert main(["gate", str(root)]) == 2  # cells, but no report: the session never reached its end
    said = capsys.readouterr().err
    # A killed session ran cells: not "a mistyped option", and abbench summary is the way on.
    assert (f"abbench gate: exit 2: no report.json in {root}, whose status.tsv holds 6 cell row(s): the session was "
            f"killed or crashed before its report (abbench summary {root} writes the report from its cells; "
            f"--ab-resume {root} runs the rest)") in said, said
    assert "mistyped" not in said
    assert main(["summary", str(root)]) == 0
    assert main(["gate", str(root)]) == 0
    # A later session appended a row and died before its report: the report is an earlier session's.
    status = root / "status.tsv"
    os.utime(status, ns=(status.stat().st_atime_ns, (root / "report.json").stat().st_mtime_ns + 1_000_000))
    assert main(["gate", str(root)]) == 2
    assert f"{root}/report.json is older than {status}" in capsys.readouterr().err
    (root / "report.json").write_text("{not json")
    assert main(["gate", str(root)]) == 2
    assert "report.json: not valid JSON" in capsys.readouterr().err


@pytest.mark.parametrize(("path", "value", "named"), [
    (("ops", 0, "shapes", 0, "ci_pct"), [1], "field 'ops[0].shapes[0].ci_pct': expected a list of 2 (a number, a "
                                             "number) or null, got [1]"),
    (("ops", 0, "geomean_pct"), "abc", "field 'ops[0].geomean_pct': expected a number or null, got 'abc'"),
    (("failed_cells",), "none", "field 'failed_cells': expected a list of (text), got 'none'"),
    (("complete",), "yes", "field 'complete': expected true or false, got 'yes'"),
    (("exit_code",), "zero", "field 'exit_code': expected a whole number or null, got 'zero'"),
    (("ops", 0, "shapes", 0, "rounds"), None, "field 'ops[0].shapes[0].rounds': expected a whole number, got None"),
    (("ops", 0, "surprise"), 1, "field 'ops[0].surprise': not a field of OpReport"),
])
def test_gate_and_comment_name_an_ill_typed_report_field_and_never_read_it_as_another_answer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], path: tuple[object, ...], value: object, named: str) -> None:
    """Before, a pair of one number crashed both with a traceback, a text geomean passed the gate and crashed the
    comment, and failed_cells "none" failed the gate naming the cells n, o, n, e."""
    root = tmp_path / "root"
    synthetic_root(root, {"s": [0.0, 0.001, -0.001]})
    assert main(["summary", str(root)]) == 0
    report = root / "report.json"
    data = json.loads(report.read_text())
    inner = data
    for step in path[:-1]:
        inner = inner[step]
    inner[path[-1]] = value
    stamp = report.stat().st_mtime_ns
    report.write_text(json.dumps(data))
    os.utime(report, ns=(stamp, stamp))
    capsys.readouterr()
    assert main(["gate", str(root)]) == 2
    assert capsys.readouterr().err == f"abbench gate: exit 2: {report}: {named}\n"
    assert main(["comment", str(root)]) == 2
    assert capsys.readouterr().err == f"abbench comment: {report}: {named}\n"


def test_the_markdown_summary_names_every_op_then_the_slower_and_flagged_shapes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Eight rounds: +5% throughout, +3% rising by a point a round (a drift, test_report.py), and nothing.
    steady, rising = [0.05, 0.051, 0.049, 0.05] * 2, [0.03 + 0.01 * k for k in range(8)]
    quiet = [0.001, -0.001, 0.0005, -0.0005, -0.001, 0.001, -0.0005, 0.0005]
    synthetic_root(tmp_path, {"M=1|N=2": steady, "drifts": rising}, op="mm")
    synthetic_root(tmp_path, {"s": quiet}, op="fine")
    assert main(["summary", str(tmp_path), "--ab-fail-if-slower", "2"]) == 7
    capsys.readouterr()
    assert main(["comment", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == "### abbench: exit 7: slower beyond --ab-fail-if-slower: mm[geomean, M=1|N=2]"
    assert "**REGRESSION GATE: slower beyond the threshold: mm[geomean, M=1|N=2]**" in lines
    assert "switch (side B): X=1  " in lines and "NOT GPU TIMINGS" not in text
    fine = next(line for line in lines if line.startswith("| fine |"))
    assert fine.startswith("| fine | same 1 | -0.0% | -0.07 ~ +0.07% | ") and fine.endswith(" | 8/8 |")
    mm = next(line for line in lines if line.startswith("| mm |"))
    assert mm.startswith("| mm | slower 1, inconclusive 1 | +") and mm.endswith("| drift 1 | 8/8 |")
    shapes = lines[lines.index("Shapes slower or flagged (2):") + 4:]
    assert shapes[0] == "| mm | M=1\\|N=2 | slower | +5.0% | +4.94 ~ +5.06% |"  # a | in a shape id stays in its cell
    assert shapes[1] == "| mm | drifts | inconclusive [drift] | +6.5% | +4.4 ~ +8.5% |"
    assert shapes[2] == "" and "| fine | s |" not in text


def test_the_markdown_summary_lists_at_most_twenty_shapes_and_says_how_many_more(tmp_path: Path) -> None:
    from pytest_abbench.report import build_report
    from pytest_abbench.report.markdown import render_markdown

    synthetic_root(tmp_path, {f"n={n}": [0.05, 0.051, 0.049, 0.05] for n in range(25)})
    text = render_markdown(build_report(tmp_path))
    assert "Shapes slower or flagged (25):" in text and "... and 5 more in report.md" in text
    assert sum(1 for line in text.splitlines() if line.startswith("| op | n=")) == 20


def hundred_op_root(root: Path) -> None:
    """A 100-op interpreter campaign as its cells write it: two rounds, two shapes per op; one op slower."""
    for index in range(100):
        synthetic_root(root, {"n=8": [0.01, -0.012], "n=16": [0.004, 0.002]}, op=f"op{index:03d}")
    synthetic_root(root, {"n=8": [0.30, 0.31], "n=16": [0.0, 0.001]}, op="op100")
    for identity in root.glob("r*/*/run_identity.json"):
        data = json.loads(identity.read_text())
        identity.write_text(json.dumps({**data, "backend": "interpreter", "timer": "wall", "device": "cpu"}))


def test_a_hundred_op_report_is_compact_in_the_terminal_and_whole_under_v_and_in_its_files(tmp_path: Path) -> None:
    from pytest_abbench.report import build_report, write_report
    from pytest_abbench.report.compact import terminal_lines

    hundred_op_root(tmp_path)
    report = build_report(tmp_path)
    assert len(report.ops) == 101
    compact = terminal_lines(report, verbosity=0)
    assert len(compact) <= 150
    assert compact == terminal_lines(report, verbosity=-1)
    assert sum(1 for line in compact if line.startswith("== op")) == 101  # every op's verdicts
    assert compact[:5] == ["switch (side B): X=1", "backend interpreter; timer wall; device cpu",
                           "rounds planned 2, run 2; margin +-2% (default); verdict rule: docs/verdicts.md",
                           "regime unknown (docs/explanation/regimes.md)",
                           "NOT GPU TIMINGS: interpreter or wall-clock numbers say nothing about GPU speed"]
    assert "== op100: slower 1, same 1; geomean +14.3% [+11.2 ~ +17.5%]; rounds 2/2" in compact
    assert ("shapes slower, flagged, faster or inconclusive: 101 of 202 (the first 30, slower and flagged first)"
            in compact)
    shown = [line for line in compact if line.startswith("   op")]
    assert len(shown) == 30 and shown[0].startswith("   op100[n=8]: slower, delta +30.5% [+30.0 ~ +31.0], 95% CI ")
    full = terminal_lines(report, verbosity=1)
    assert len(full) > 600 and sum(1 for line in full if line.startswith("   n=")) == 202
    write_report(tmp_path, report)
    md = (tmp_path / "report.md").read_text()
    assert all(f"== op{index:03d}:" in md for index in range(101)) and md.count("\n   n=") == 202


def test_a_small_campaign_keeps_the_full_report_unless_q(clean_run: Recipe) -> None:
    from pytest_abbench.report import read_report
    from pytest_abbench.report.compact import terminal_lines

    _, root = clean_run
    report = read_report(root / "report.json")
    assert terminal_lines(report, 0) == terminal_lines(report, 1)
    compact = terminal_lines(report, -1)
    assert compact[-1].startswith("compact report of 1 ops") and "== one: inconclusive 2; geomean " in compact[5]


def test_a_q_session_prints_the_compact_report(campaign_dir: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"one", "two"'))
    step = campaign_dir.path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))  # a GitHub step gets it unasked
    result = campaign_dir.runpytest_subprocess("c.py", *FAST.split(), "-q")
    assert result.ret == 0
    assert step.read_text().startswith("### abbench: exit 0: clean") and "\n| two | inconclusive 2 | " in step.read_text()
    result.stdout.fnmatch_lines(["switch (side B): ABBENCH_TEST_SWITCH=1", "backend interpreter; timer wall; device *",
                                 "rounds planned 1, run 1; margin +-2% (default); verdict rule: docs/verdicts.md",
                                 "regime steady (docs/explanation/regimes.md)", "NOT GPU TIMINGS: *",
                                 "== one: inconclusive 2; geomean *; rounds 1/1",
                                 "== two: inconclusive 2; geomean *; rounds 1/1",
                                 "shapes slower, flagged, faster or inconclusive: 4 of 4",
                                 "   one[[]n=8[]]: inconclusive, delta *", "*",
                                 "compact report of 2 ops: every shape and column in report.md; -v prints it here"])
    assert "delta med [min ~ max]" not in result.stdout.str()


def test_the_gate_refuses_a_report_edited_to_hide_failed_cells(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    synthetic_root(tmp_path / "failed", {"s": [0.0, 0.001, -0.001]}, failed=(2, "B"))
    assert main(["summary", str(tmp_path / "failed")]) == 1
    report_json = tmp_path / "failed" / "report.json"
    # The two edits that passed the gate before: failed_cells emptied, exit_code set to 0.
    forged = {**json.loads(report_json.read_text()), "failed_cells": [], "exit_code": 0}
    report_json.write_text(json.dumps(forged))
    capsys.readouterr()
    assert main(["gate", str(tmp_path / "failed")]) == 2
    err = capsys.readouterr().err
    assert (f"abbench gate: exit 2: {report_json} disagrees with {tmp_path / 'failed' / 'status.tsv'}: status.tsv "
            "has failed cell(s) that report.json's failed_cells lacks: op[r2-B]. The report is not the run's own "
            f"record: abbench summary {tmp_path / 'failed'} rebuilds it from the cells") in err, err
    assert main(["comment", str(tmp_path / "failed")]) == 2


def test_a_step_summary_that_cannot_be_written_is_blamed_on_the_variable(campaign_dir: pytest.Pytester,
                                                                         tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    folder = tmp_path / "a-folder"
    folder.mkdir()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(folder))
    result = campaign_dir.runpytest_subprocess("c.py", *FAST.split())
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([f"abbench: $GITHUB_STEP_SUMMARY: {folder}: not written (Is a directory)"])


def test_the_gate_takes_a_report_that_already_says_it_is_not_clean_and_a_cell_folder_without_a_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A session's report covers its own cells: an interrupted one's rowless folder, or a resume that stopped
    before rerunning an earlier failed cell, is not a forged report."""
    synthetic_root(tmp_path / "ok", {"s": [0.0, 0.001, -0.001]})
    assert main(["summary", str(tmp_path / "ok")]) == 0
    (tmp_path / "ok" / "r4_A" / "op").mkdir(parents=True)  # a cell cut off before its row
    assert main(["gate", str(tmp_path / "ok")]) == 0
    synthetic_root(tmp_path / "failed", {"s": [0.0, 0.001, -0.001]}, failed=(2, "B"))
    assert main(["summary", str(tmp_path / "failed")]) == 1
    report_json = tmp_path / "failed" / "report.json"
    # A report that names a failure, though not this one (complete: False, as an interrupted session's is).
    report_json.write_text(json.dumps({**json.loads(report_json.read_text()), "failed_cells": [], "complete": False}))
    capsys.readouterr()
    assert main(["gate", str(tmp_path / "failed")]) == 1
