"""The tool in CI: the README's recipe and ``abbench gate``.

- pytest answers a mistyped option and a bad environment variable with its usage error 4, the caliber
  mismatch's code too; the README's recipe runs the session with ``--ab-root`` and then ``abbench gate`` on
  that root, which reads the run's own report.json: 2 (no report), 4 (caliber), 7 (gate tripped), 0 (clean).
- The recipe is run as written in the README (bash -e, as a CI runner runs it), with only its pytest line
  replaced by the test's small campaign.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import simple_campaign, synthetic_root

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
    """One finished clean campaign (one op, one round), run through the README's recipe; later tests reuse its root."""
    folder = tmp_path_factory.mktemp("clean")
    (folder / "c.py").write_text(simple_campaign('"one"'))
    (folder / "pytest.ini").write_text("[pytest]\n")
    return run_recipe(folder, f"{sys.executable} -m pytest c.py {FAST}",
                      {"XDG_CACHE_HOME": str(tmp_path_factory.mktemp("xdg"))})


def test_the_recipe_passes_a_clean_run(clean_run: Recipe) -> None:
    done, root = clean_run
    assert done.returncode == 0, done.stdout + done.stderr
    assert gate_line(done) == f"abbench gate: exit 0: clean: every planned cell finished ({root}/report.json)"


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
    campaign_dir.makepyfile(c=simple_campaign('"one"', switch='Switch(options_b={"direct_rep": "80"})'))
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


def test_the_gate_refuses_a_root_whose_report_is_missing_stale_or_unreadable(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gate", str(tmp_path / "nothing")]) == 2
    assert f"abbench gate: exit 2: root {tmp_path / 'nothing'} does not exist" in capsys.readouterr().err
    root = tmp_path / "root"
    synthetic_root(root, {"s": [0.0, 0.001, -0.001]})
    assert main(["gate", str(root)]) == 2  # cells, but no report: the session never reached its end
    assert f"abbench gate: exit 2: no report.json in {root}" in capsys.readouterr().err
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
