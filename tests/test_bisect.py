"""``abbench bisect`` through a real git repository: a Triton kernel library over 9 commits, one of which makes
it slower and one of which does not build; the campaign imports it by package name."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import as_both_regimes, synthetic_root
from pytest_abbench.history.bisect import (BAD, BISECT_UNDECIDED, FAILED, GOOD, INCONCLUSIVE, SPLIT, Bisection,
                                           BisectOptions, Step, judge_report)
from pytest_abbench.history.store import History
from pytest_abbench.report.build import build_report

# The kernel library under bisection.  Each launch is followed by a 30 ms host-side wait: interpreter timings
# of a millisecond-scale kernel on a shared 2-core machine moved by 2x between processes (identical code gave
# round deltas of -34% and +68%), which no 2-round verdict survives; with the wait, identical code measured
# within +-3% per round and 8 launches +690% in every round.
LIBRARY = '''
import time

import triton
import triton.language as tl

LAUNCHES = {launches}


@triton.jit
def add_kernel(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) + 1)


def add_one(x, y):
    for _ in range(LAUNCHES):
        add_kernel[(1,)](x, y, N=x.numel())
        time.sleep(0.03)
    return y
'''

CAMPAIGN = textwrap.dedent('''
    from pytest_abbench import Case, Op


    def build(shape, device):
        import torch
        from addlib import add_one  # from the side's tree: GOOD on side A, the commit under test on side B
        x = torch.arange(shape["n"], device=device, dtype=torch.float32)
        y = torch.empty_like(x)
        return Case(run=lambda: add_one(x, y), expected=lambda: x + 1)


    OPS = [Op("add", build=build, shapes={"smoke": [{"n": 16}]})]
''')

BUILD = "test ! -e BROKEN"  # the "build": fails in the one commit that holds the marker


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def commit(repo: Path, message: str, launches: int = 1, broken: bool = False, note: str = "") -> str:
    (repo / "addlib").mkdir(exist_ok=True)
    (repo / "addlib" / "__init__.py").write_text(LIBRARY.format(launches=launches))
    (repo / "NOTES").write_text(note or message)
    if broken:
        (repo / "BROKEN").write_text("does not build\n")
    elif (repo / "BROKEN").exists():
        (repo / "BROKEN").unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def checkout_state(repo: Path) -> dict[str, str]:
    return {"head": git(repo, "rev-parse", "HEAD"), "status": git(repo, "status", "--porcelain=v1"),
            "diff": git(repo, "diff"), "staged": git(repo, "diff", "--cached"),
            "worktrees": git(repo, "worktree", "list", "--porcelain"),
            "library": (repo / "addlib" / "__init__.py").read_text()}


@pytest.mark.slow
def test_bisect_names_the_first_slower_commit_and_skips_the_broken_one(pytester: pytest.Pytester, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ABBENCH_HISTORY")  # the default file under the rootdir, as a user gets it (conftest.py)
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    shas = [commit(repo, "good: one launch")]
    for i in range(1, 9):
        launches = 8 if i >= 6 else 1
        shas.append(commit(repo, f"change {i}" + (": eight launches" if i == 6 else ""), launches=launches,
                           broken=i == 4))
    # The user's checkout: at BAD, with a staged change, an unstaged one and an untracked file.
    (repo / "NOTES").write_text("staged\n")
    git(repo, "add", "NOTES")
    (repo / "addlib" / "__init__.py").write_text(LIBRARY.format(launches=1) + "# my edit\n")
    (repo / "scratch.txt").write_text("mine\n")
    before = checkout_state(repo)

    pytester.makeini("[pytest]\n")
    pytester.makepyfile(camp=CAMPAIGN)
    result = pytester.run(sys.executable, "-m", "pytest_abbench.cli", "bisect", shas[0], "HEAD", "--repo", str(repo),
                          "--build", BUILD, "--rounds", "2", "--max-rounds", "8", "--",
                          "camp.py", "--ab-ir-target", "none", "--ab-margin", "100", "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert result.ret == 0, out
    result.stdout.fnmatch_lines([f"abbench bisect: {shas[4][:12]}: build failed after * s: skipped",
                                 f"abbench bisect: first slower commit: {shas[6]} 'change 6: eight launches' "
                                 f"(last good {shas[5][:12]})"])
    # What was timed: BAD first, then the halving (4 skipped, so 3), never the commits it could do without.
    timed = [line.split()[2].rstrip(":") for line in out.splitlines()
             if line.startswith("abbench bisect: ") and (": bad (" in line or ": good (" in line)]
    assert timed == [shas[i][:12] for i in (8, 3, 5, 6)], out
    assert checkout_state(repo) == before  # HEAD, index, working tree and worktree list as they were

    steps = sorted((pytester.path / ".abbench" / "bisect").glob("*/*-*[0-9a-f]"))
    assert [p.name.split("-", 1)[1] for p in steps if p.is_dir()] == [shas[i][:12] for i in (8, 3, 5, 6)]
    with History(pytester.path / ".abbench" / "history.sqlite", create=False) as history:
        runs = history.runs()
    assert [r.subject_tree.commit for r in runs if r.subject_tree] == [shas[i] for i in (8, 3, 5, 6)]
    assert all(r.label.startswith(f"bisect {shas[0][:12]}..{shas[8][:12]}") for r in runs)
    first_tree = {}  # each side's own tree comes first on its path (the inherited PYTHONPATH after it)
    for tree in runs[0].sources:
        first_tree.setdefault(tree.role, tree.commit)
    assert first_tree["A"] == shas[0] and first_tree["B"] == shas[8]
    assert [(r.shapes[0].verdict, r.shapes[0].within_margin) for r in runs] == [
        ("slower", False), ("same", False), ("same", False), ("slower", False)]

    shown = pytester.run(sys.executable, "-m", "pytest_abbench.cli", "history", "--op", "add")
    assert shown.ret == 0, shown.stdout.str()
    shown.stdout.fnmatch_lines([f"*{shas[3][:12]} *same*", f"*{shas[5][:12]} *same*",
                                f"*{shas[6][:12]} *slower*<- verdict changed: same -> slower (after {shas[5][:12]})",
                                f"*{shas[8][:12]} *slower*"])


def test_bisect_refuses_what_it_cannot_bisect_before_any_worktree(pytester: pytest.Pytester, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    first = commit(repo, "one")
    second = commit(repo, "two")
    (repo / "camp.py").write_text(CAMPAIGN)
    pytester.makepyfile(camp=CAMPAIGN)
    before = checkout_state(repo)

    def bisect(*args: str) -> pytest.RunResult:
        return pytester.run(sys.executable, "-m", "pytest_abbench.cli", "bisect", *args)

    result = bisect(second, first, "--repo", str(repo), "--", "camp.py")
    assert result.ret == 2
    result.stdout.fnmatch_lines([f"abbench bisect: GOOD {second} ({second[:12]}) is not an ancestor of BAD {first} "
                                 f"({first[:12]})"])
    result = bisect(first, "nosuchref", "--repo", str(repo), "--", "camp.py")
    assert result.ret == 2
    result.stdout.fnmatch_lines([f"abbench bisect: unknown commit in {repo}: git rev-parse *nosuchref*"])
    result = bisect(first, second, "--repo", str(repo), "--", str(repo / "camp.py"))
    assert result.ret == 2
    result.stdout.fnmatch_lines([f"abbench bisect: {repo / 'camp.py'} lies inside the repository under bisection*"])
    result = bisect(first, second, "--repo", str(repo))
    assert result.ret == 2
    result.stderr.fnmatch_lines(["abbench bisect: give the pytest arguments that select the campaign after --*"])
    assert checkout_state(repo) == before
    assert not (pytester.path / ".abbench").exists()


@pytest.mark.parametrize(("deltas", "verdict", "answer"), [
    ([0.10, 0.11, 0.09, 0.10], "slower", BAD),  # beyond the 2% margin
    ([0.010, 0.0101, 0.0099, 0.010], "slower (within the margin)", GOOD),  # real, but inside the margin
    ([0.001, -0.001, 0.0, 0.0005], "same", GOOD),
    ([-0.10, -0.11, -0.09, -0.10], "faster", GOOD),
    ([0.30, -0.25, 0.20, -0.15], "inconclusive", INCONCLUSIVE),  # more rounds, never a guess
])
def test_a_steps_answer_is_the_reports_verdict(tmp_path: Path, deltas: list[float], verdict: str,
                                               answer: str) -> None:
    synthetic_root(tmp_path, {"s": deltas})
    got, _, (evidence,) = judge_report(build_report(tmp_path))
    assert got == answer and evidence.line().endswith(f"] {verdict}")


def test_a_step_without_a_verdict_is_failed_not_good(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"s": [0.0, 0.0]}, failed=(2, "B"))  # a cell timed out: no verdict for the op
    answer, why, _ = judge_report(build_report(tmp_path))
    assert answer == FAILED and why.startswith("no verdict: op: no_verdict")


# Per-round deltas of one shape (A = 1.0 ms): what each gives under the default 2% margin.
SLOWER = [0.10, 0.11, 0.09, 0.10]
SAME = [0.001, -0.001, 0.0, 0.0005]
OPEN = [0.30, -0.25, 0.20, -0.15]


@pytest.mark.parametrize(("burst", "steady", "answer", "why"), [
    (SLOWER, SLOWER, BAD, "burst bad: slower beyond the +-2% margin: op[s]; steady bad: slower beyond"),
    (SAME, SAME, GOOD, "burst good: every shape same or faster (or slower within the margin); steady good: "),
    (SAME, SLOWER, SPLIT, "the regimes disagree: burst good: every shape same or faster (or slower within the "
                          "margin); steady bad: slower beyond the +-2% margin: op[s]"),
    (SLOWER, SAME, SPLIT, "the regimes disagree: burst bad: slower beyond the +-2% margin: op[s]; steady good"),
    (OPEN, SLOWER, INCONCLUSIVE, "burst inconclusive: 1 shape(s) inconclusive: op[s]; steady bad: "),  # more rounds
])
def test_under_both_regimes_each_is_judged_apart_and_a_disagreement_is_no_answer(
        tmp_path: Path, burst: list[float], steady: list[float], answer: str, why: str) -> None:
    """A report of --ab-regime both holds the op once per regime: a slower steady delta is not outvoted, nor
    made the step's answer, by a burst one that is not (fixed deltas, as cells write them)."""
    root = tmp_path / "root"
    synthetic_root(root, {"s": burst})
    synthetic_root(tmp_path / "steady", {"s": steady})
    as_both_regimes(root, tmp_path / "steady")
    got, said, evidence = judge_report(build_report(root))
    assert (got, said[:len(why)]) == (answer, why)
    assert [(e.regime, e.line(regime=True).split()[1]) for e in evidence] == [("burst", "burst"), ("steady", "steady")]


def test_a_step_whose_regimes_disagree_ends_the_bisection_undecided_naming_the_way_on(tmp_path: Path) -> None:
    root = tmp_path / "root"
    synthetic_root(root, {"s": SAME})
    synthetic_root(tmp_path / "steady", {"s": SLOWER})
    as_both_regimes(root, tmp_path / "steady")
    said: list[str] = []
    bisection = Bisection(BisectOptions("good", "bad", ["camp.py"]), said.append)
    bisection.commits = [("a" * 40, "good"), ("b" * 40, "change 1"), ("c" * 40, "change 2")]
    step = Step(2, "c" * 40, "change 2", rounds=2, exit_code=0)
    step.answer, step.why, step.evidence = judge_report(build_report(root))
    bisection.steps.append(step)
    assert bisection.finish(step, 0, 2, set()) == BISECT_UNDECIDED
    out = "\n".join(said)
    assert f"{'c' * 12} 'change 2': split (the regimes disagree: burst good:" in out
    assert "op[s] burst +0.0% [-0.1 ~ +0.1] same" in out and "op[s] steady +10.0% [+8.7 ~ +11.3] slower" in out
    assert (f"abbench bisect: step {'c' * 12} is slower under one timing regime and not under the other: bisect the "
            "regime you mean (--ab-regime burst or --ab-regime steady after --); the first slower commit is one of 2: "
            f"{'b' * 12}, {'c' * 12}") in out
