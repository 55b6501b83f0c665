"""``abbench bisect GOOD BAD -- <pytest args>``: the first commit that made a campaign slower, by the tool's verdict.

Side A is a worktree of GOOD, side B a worktree of the commit under test; each
is put first on its side's import path (``--ab-switch-env-a`` /
``--ab-switch-env`` ``PYTHONPATH=<tree>``: two source trees as the switch).
The worktrees are clean ``git worktree add --detach`` folders outside the
user's checkout, which is never touched.  Each step is a normal campaign
root under the bisection's folder, recorded in the history file.

BAD is timed first and judged by the report's verdicts (``judge_report``): a
shape ``slower`` beyond the margin makes it the effect to hunt.  A step between
the ends asks whether its commit is like GOOD or like BAD, not whether it equals
GOOD: it is judged against a share of BAD's effect on the shapes BAD is slower
on (``Hunted``), one-sided.  A step that neither test decides gets more rounds
(``--ab-resume``) up to ``--max-rounds`` and is then reported inconclusive with
the range left.  Under ``--ab-regime both`` each regime is judged on its own.
A commit whose build command fails is skipped, as ``git bisect skip``.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from pytest_abbench.core.prctl import parent_death_signal
from pytest_abbench.core.exitcodes import EXIT_SLOWER
from pytest_abbench.core.fileio import CorruptFileError
from pytest_abbench.core.layout import ABBENCH_DIR, BISECT_DIR, RootLayout
from pytest_abbench.core.settings import HISTORY_OFF
from pytest_abbench.history import git
from pytest_abbench.report.model import Report, read_report
from pytest_abbench.spawn.cellrun import log_tail
from pytest_abbench.report.stats import ALPHA, difference, pct

# Exit codes of ``abbench bisect`` (docs/guide/history.md).
BISECT_FOUND = 0  # one commit named: the first slower one
BISECT_STEP_FAILED = 1  # a step's session failed (a cell, a caliber mismatch, its root): no answer from it
BISECT_USAGE = 2  # bad arguments, unknown commits, GOOD not an ancestor of BAD, GOOD does not build
BISECT_UNDECIDED = 3  # a step inconclusive at --max-rounds or split by its regimes; or several candidates left
BISECT_NOT_SLOWER = 5  # BAD is not slower than GOOD: nothing to find
PYTEST_USAGE_ERROR = 4  # a step session's exit code for bad arguments (pytest's ExitCode.USAGE_ERROR)
END_SESSION_S = 60.0  # how long a stopped step's session may take to write its report before it is killed


class StepUsage(Exception):
    """A step's session refused the pytest arguments: the bisection's arguments are wrong, not a commit."""


class Stopped(Exception):
    """SIGTERM reached the bisection: its step's session is ended and the steps so far printed."""


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise Stopped()


def end_session(child: subprocess.Popen[bytes], forward: bool) -> None:
    """End a step's session that was stopped: SIGTERM where this process got it alone (``forward``; a Ctrl-C
    reaches the whole process group, the session included), then wait for its report, then kill it."""
    try:
        if forward and child.poll() is None:
            child.send_signal(signal.SIGTERM)
        child.wait(timeout=END_SESSION_S)
    except subprocess.TimeoutExpired:
        pass
    finally:  # also where a second Ctrl-C or SIGTERM cut the wait short: never leave it running
        if child.poll() is None:
            child.kill()
            child.wait()


def _tail(log: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a step's log (``cellrun.log_tail`` reads only its end: a session logs a lot)."""
    return "\n".join(log_tail(log).strip().splitlines()[-lines:])

GOOD, BAD, SKIP, INCONCLUSIVE, FAILED = "good", "bad", "skip", "inconclusive", "failed"
SPLIT = "split"  # --ab-regime both: slower under one regime and not under the other
DEFAULT_ROUNDS = 2
DEFAULT_MAX_ROUNDS = 8
DEFAULT_SHARE = 0.5  # a step is bad beyond this share of BAD's slowdown (log scale): the geometric middle
BUILD_TIMEOUT_S = 3600.0


@dataclass
class BisectOptions:
    good: str
    bad: str
    pytest_args: list[str]
    repo: Path = Path(".")
    build: str | None = None
    rounds: int = DEFAULT_ROUNDS
    max_rounds: int = DEFAULT_MAX_ROUNDS
    history: Path | None = None  # None: nothing recorded
    work: Path | None = None  # the bisection's folder (step roots, logs); default .abbench/bisect/<stamp>
    import_path: str = "."  # the folder inside a tree that goes on the import path (Triton: python)
    share: float = DEFAULT_SHARE  # Hunted: where between GOOD and BAD a step turns bad


@dataclass
class Evidence:
    """One shape of a step's report: what its verdict rests on, and for a step between the ends, where it stands
    against the threshold BAD's effect sets."""

    op: str
    shape: str
    delta_pct: float
    ci_pct: tuple[float, float] | None
    verdict: str
    within_margin: bool
    regime: str = ""  # the timing regime of its op's report entry ("" from a report written before regimes)
    log_ratios: list[float] = field(default_factory=list)  # per round ln(B/A)
    floor: float = 0.0  # the least standard deviation of a round's ln(B/A) (its cells' own noise)
    against: str = ""  # a step between the ends: how it stands against the threshold (``Hunted.judge``)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.regime, self.op, self.shape

    def line(self, regime: bool = False) -> str:
        """Its delta, interval and verdict; ``regime``: named after the shape (a report of several regimes)."""
        ci = f" [{self.ci_pct[0]:+.1f} ~ {self.ci_pct[1]:+.1f}]" if self.ci_pct else ""
        small = " (within the margin)" if self.within_margin else ""
        named = f" {self.regime}" if regime and self.regime else ""
        against = f"; {self.against}" if self.against else ""
        return f"{self.op}[{self.shape}]{named} {self.delta_pct:+.1f}%{ci} {self.verdict}{small}{against}"


@dataclass
class Step:
    """One commit tested: its build, its root, the rounds it took and its answer."""

    index: int
    commit: str
    subject: str
    answer: str = ""
    why: str = ""
    build_s: float | None = None
    root: Path | None = None
    rounds: int = 0
    rounds_why: str = ""  # why it took the rounds it took (decided at its first look, or what kept it open)
    exit_code: int | None = None
    evidence: list[Evidence] = field(default_factory=list)

    @property
    def short(self) -> str:
        return self.commit[:12]


def report_evidence(report: Report) -> tuple[list[Evidence], str | None]:
    """Every shape of a report as evidence, and why the report gives no answer at all (None when it gives one)."""
    evidence = [Evidence(o.op, s.shape, s.delta_pct, s.ci_pct, s.verdict, s.within_margin, o.regime,
                         s.round_log_ratios(), s.spread_floor_log())
                for o in report.ops for s in o.shapes]
    unjudged = [f"{o.op}{' ' + o.regime if o.regime else ''}: {o.state}{' (' + o.reason + ')' if o.reason else ''}"
                for o in report.ops if o.state != "verdict"]
    if unjudged or not report.complete or not evidence:
        return evidence, "no verdict: " + ("; ".join(unjudged) or "incomplete report")
    return evidence, None


def judge_report(report: Report) -> tuple[str, str, list[Evidence]]:
    """BAD's answer from its report, by the report's own verdicts: (bad|good|inconclusive|split|failed, why, the
    shapes' evidence).  BAD against GOOD is a free-standing A/B question: is BAD slower at all?

    Each timing regime in the report is judged on its own shapes.  Under
    ``--ab-regime both`` the step is bad when both regimes say bad and good
    when both say good; inconclusive while either is (more rounds may decide
    it); ``split`` when one says bad and the other good: the regimes measure
    different things (core/regimes.py), so neither answer is picked for the
    user.
    """
    evidence, failed = report_evidence(report)
    if failed is not None:
        return FAILED, failed, evidence
    judged = {r: _judge_shapes([e for e in evidence if e.regime == r], report.margin_pct)
              for r in dict.fromkeys(e.regime for e in evidence)}
    answer, why = combine_regimes(judged)
    return answer, why, evidence


def combine_regimes(judged: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """One answer from each regime's (answer, why): theirs when they agree, ``split`` when one is bad and another
    good, inconclusive while any is."""
    if len(judged) == 1:
        (answer, why), = judged.values()
        return answer, why
    answers = {answer for answer, _ in judged.values()}
    said = "; ".join(f"{regime} {answer}: {why}" for regime, (answer, why) in judged.items())
    if answers == {BAD, GOOD}:
        return SPLIT, f"the regimes disagree: {said}"
    if INCONCLUSIVE in answers:
        return INCONCLUSIVE, said
    return answers.pop(), said  # every regime says the same


def _judge_shapes(evidence: list[Evidence], margin_pct: float) -> tuple[str, str]:
    """The answer one regime's shapes give BAD: bad, good or inconclusive, and why."""
    slower = [e for e in evidence if e.verdict == "slower" and not e.within_margin]
    if slower:
        return BAD, f"slower beyond the +-{margin_pct:g}% margin: {slower[0].op}[{slower[0].shape}]"
    open_ = [e for e in evidence if e.verdict not in ("same", "faster", "slower")]
    if open_:
        return INCONCLUSIVE, f"{len(open_)} shape(s) inconclusive: {open_[0].op}[{open_[0].shape}]"
    return GOOD, "every shape same or faster (or slower within the margin)"


class Hunted:
    """The effect a bisection hunts: BAD's delta against GOOD on each shape where BAD is slower beyond the margin.

    A step between the ends asks whether its commit is like GOOD or like BAD, not whether it equals GOOD: each
    hunted shape's threshold lies ``share`` of the way from GOOD to BAD on a log scale (half: the geometric middle,
    +312% for a 17x slowdown, +2.5% for +5%).  A shape is beyond it when the one-sided test of
    ``step - share * BAD > 0`` holds at ``ALPHA`` (Welch: BAD's own rounds' spread counts), below it when the
    opposite one-sided test does.  The step is bad when any hunted shape is beyond (Bonferroni over them: a
    commit may carry part of the slowdown), good when every one is below, and stays open while one straddles.
    """

    def __init__(self, bad: list[Evidence], share: float) -> None:
        self.share = share
        self.shapes = {e.key: e for e in bad if e.verdict == "slower" and not e.within_margin}

    def describe(self) -> str:
        """The rule, for the bisection's first lines."""
        several = len({e.regime for e in self.shapes.values()}) > 1
        names = ", ".join(f"{e.op}[{e.shape}]{' ' + e.regime if several and e.regime else ''} {e.delta_pct:+.1f}%"
                          for e in self.shapes.values())
        return (f"a step is bad when a shape's slowdown is, with 95% one-sided confidence, beyond {self.share:g} of "
                f"BAD's on a log scale, good when every such shape is below it; the shapes BAD is slower on: {names}")

    def judge(self, evidence: list[Evidence]) -> tuple[str, str]:
        """A step's answer from its shapes (each hunted one's ``against`` filled in), and why."""
        step = {e.key: e for e in evidence}
        missing = [_name(end) for key, end in self.shapes.items() if key not in step]
        if missing:
            return FAILED, f"no rounds of the shape(s) BAD is slower on: {', '.join(missing)}"
        judged = {}
        for regime in dict.fromkeys(key[0] for key in self.shapes):
            keys = [key for key in self.shapes if key[0] == regime]
            judged[regime] = self._judge_regime([(step[key], self.shapes[key]) for key in keys])
        return combine_regimes(judged)

    def _judge_regime(self, pairs: list[tuple[Evidence, Evidence]]) -> tuple[str, str]:
        """One regime's answer: its hunted shapes (step, BAD) against their thresholds."""
        beyond, open_ = [], []
        for e, end in pairs:
            diff = difference(e.log_ratios, end.log_ratios, self.share, e.floor, end.floor)
            if diff is None:
                e.against = "fewer than 2 rounds"
                open_.append(e)
                continue
            threshold = self.share * statistics.fmean(end.log_ratios)
            # The step's own delta with bounds that carry BAD's spread too: threshold + (step - share * BAD).
            lower, upper = (pct(threshold + bound) for bound in diff.bounds(1.0 - ALPHA))
            if diff.p_above() * len(pairs) < ALPHA:  # Bonferroni: any one shape beyond makes the step bad
                where = "beyond"
                beyond.append(e)
            elif diff.p_below() < ALPHA:  # every shape must be below: each is tested at ALPHA
                where = "below"
            else:
                where = "straddles"
                open_.append(e)
            e.against = (f"{where} the {pct(threshold):+.1f}% threshold ({self.share:g} of BAD's "
                         f"{end.delta_pct:+.1f}%; one-sided 95% bounds {lower:+.1f} ~ {upper:+.1f}%)")
        if beyond:
            return BAD, f"{_name(beyond[0])} beyond {self.share:g} of BAD's slowdown"
        if open_:
            return INCONCLUSIVE, f"{len(open_)} shape(s) straddle the threshold: {_name(open_[0])}"
        return GOOD, f"every shape BAD is slower on is below {self.share:g} of its slowdown"


def _name(e: Evidence) -> str:
    return f"{e.op}[{e.shape}]"


def campaign_paths_inside(args: Sequence[str], repo: Path) -> list[str]:
    """The pytest arguments naming a file or folder inside ``repo``: both sides would import what lies beside
    such a campaign from the user's checkout, not from their trees."""
    inside = []
    for arg in args:
        if arg.startswith("-"):
            continue
        path = Path(arg.split("::")[0])
        if path.exists() and path.resolve().is_relative_to(repo.resolve()):
            inside.append(arg)
    return inside


class Bisection:
    """One bisection: its commits, its worktrees, its steps, what it prints."""

    def __init__(self, options: BisectOptions, say: Callable[[str], None] = print) -> None:
        self.options = options
        self.say = say
        self.steps: list[Step] = []
        self.trees: dict[str, Path] = {}
        self.repo = Path()
        self.commits: list[tuple[str, str]] = []  # (sha, subject), GOOD first, BAD last
        self.work = Path()
        self.tree_dir: Path | None = None
        self.hunted: Hunted | None = None  # BAD's effect, once BAD is judged slower

    # -- the commands ---------------------------------------------------------------
    def run(self) -> int:
        problem = self.prepare()
        if problem:
            self.say(f"abbench bisect: {problem}")
            return BISECT_USAGE
        previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
        try:
            return self.search()
        except StepUsage as exc:
            self.say(f"abbench bisect: {exc}")
            return BISECT_USAGE
        except (KeyboardInterrupt, Stopped) as exc:
            name = "SIGTERM" if isinstance(exc, Stopped) else "SIGINT"
            for step in self.steps:
                if not step.answer:  # the step under way
                    step.answer, step.why = "stopped", f"its session ended by {name}"
            self.say(f"\nabbench bisect: stopped by {name}; its step's session was ended and left its root "
                     "(abbench summary ROOT reads it)")
            self.say_steps()
            return 128 + (signal.SIGTERM if isinstance(exc, Stopped) else signal.SIGINT)
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.remove_trees()

    def prepare(self) -> str | None:
        """Resolve the repository, the commits and the folders; a str says why the bisection cannot start."""
        o = self.options
        top = git.toplevel(o.repo.resolve())
        if top is None:
            return f"--repo {o.repo} is not inside a git work tree"
        self.repo = top
        try:
            good = git.git(top, "rev-parse", "--verify", "--end-of-options", f"{o.good}^{{commit}}")
            bad = git.git(top, "rev-parse", "--verify", "--end-of-options", f"{o.bad}^{{commit}}")
        except git.GitError as exc:
            return f"unknown commit in {top}: {exc}"
        try:
            git.git(top, "merge-base", "--is-ancestor", good, bad)
        except git.GitError:
            return f"GOOD {o.good} ({good[:12]}) is not an ancestor of BAD {o.bad} ({bad[:12]})"
        listed = git.git(top, "log", "--reverse", "--first-parent", "--ancestry-path", "--format=%H%x00%s",
                         f"{good}..{bad}")
        between = [line.split("\0", 1) for line in listed.splitlines() if line]
        if not between:
            return f"GOOD and BAD are the same commit ({good[:12]})"
        subject = git.git(top, "log", "-1", "--format=%s", good)
        self.commits = [(good, subject), *((c[0], c[1] if len(c) > 1 else "") for c in between)]
        inside = campaign_paths_inside(o.pytest_args, top)
        if inside:
            return (f"{', '.join(inside)} lies inside the repository under bisection ({top}): both sides would "
                    "import what lies beside it from your checkout; keep the campaign outside it (it imports "
                    "the code under test by its package name)")
        if sys.version_info < (3, 11) and Path.cwd().resolve().is_relative_to(top):
            return (f"run it from outside {top} on Python {sys.version_info.major}.{sys.version_info.minor}: "
                    "before 3.11 a cell's current folder comes first on its import path (PYTHONSAFEPATH)")
        if o.max_rounds < o.rounds:
            return f"--max-rounds {o.max_rounds} is below --rounds {o.rounds}"
        stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        self.work = (o.work or Path.cwd() / ABBENCH_DIR / BISECT_DIR / stamp).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        return None

    def search(self) -> int:
        """Build GOOD, check BAD is slower, then halve the range; the exit code says how it ended."""
        o = self.options
        n = len(self.commits) - 1
        self.say(f"abbench bisect: {self.commits[0][0][:12]}..{self.commits[-1][0][:12]} in {self.repo}: "
                 f"{n} commit(s) after GOOD; side A at GOOD; steps in {self.work}")
        good_tree = self.tree(0)
        build = self.build(0, good_tree)
        if build is not None and not build[1]:
            self.say(f"abbench bisect: GOOD {self.commits[0][0][:12]} does not build ({o.build!r} failed after "
                     f"{build[0]:.1f} s; log {self.build_log(0)}): side A needs it")
            return BISECT_USAGE
        last = self.test(n)
        if last.answer == SKIP:
            self.say(f"abbench bisect: BAD {last.short} does not build: nothing to compare GOOD with")
            return BISECT_USAGE
        if last.answer == GOOD:
            self.say(f"abbench bisect: BAD {last.short} is not slower than GOOD: nothing to find")
            return BISECT_NOT_SLOWER
        if last.answer != BAD:
            return self.finish(last, 0, n, set())
        self.hunted = Hunted(last.evidence, o.share)
        self.say(f"abbench bisect: {self.hunted.describe()}")
        lo, hi, skipped = 0, n, set[int]()
        while True:
            candidates = [i for i in range(lo + 1, hi) if i not in skipped]
            if not candidates:
                break
            middle = (lo + hi) / 2
            step = self.test(min(candidates, key=lambda i: (abs(i - middle), i)))
            if step.answer == BAD:
                hi = step.index
            elif step.answer == GOOD:
                lo = step.index
            elif step.answer == SKIP:
                skipped.add(step.index)
            else:
                return self.finish(step, lo, hi, skipped)
        return self.finish(None, lo, hi, skipped)

    def say_steps(self) -> None:
        """Each step so far: its answer, root, rounds and evidence."""
        self.say("")
        self.say("abbench bisect: steps")
        for step in self.steps:
            build = f", build {step.build_s:.1f} s" if step.build_s is not None else ""
            self.say(f"  {step.short} {step.subject[:50]!r}: {step.answer} ({step.why}){build}")
            if step.root is not None:
                self.say(f"      root {step.root} ({step.rounds} rounds: {step.rounds_why}; exit {step.exit_code})")
            several = len({e.regime for e in step.evidence}) > 1
            for e in step.evidence:
                self.say(f"      {e.line(regime=several)}")

    def finish(self, stopped: Step | None, lo: int, hi: int, skipped: set[int]) -> int:
        """Print the result and the evidence; the exit code."""
        self.say_steps()
        remaining = [self.commits[i][0][:12] for i in range(lo + 1, hi + 1)]
        if stopped is not None:
            code = BISECT_STEP_FAILED if stopped.answer == FAILED else BISECT_UNDECIDED
            if stopped.answer == FAILED:
                what = "failed: see its root and log"
            elif stopped.answer == SPLIT:
                what = ("is slower under one timing regime and not under the other: bisect the regime you mean "
                        "(--ab-regime burst or --ab-regime steady after --)")
            else:
                what = f"stayed inconclusive at {stopped.rounds} rounds (--max-rounds {self.options.max_rounds})"
            self.say(f"abbench bisect: step {stopped.short} {what}; the first slower commit is one of "
                     f"{len(remaining)}: {', '.join(remaining)} (after {self.commits[lo][0][:12]}, the last good)")
            return code
        between = [i for i in range(lo + 1, hi) if i in skipped]
        if between:
            self.say(f"abbench bisect: the first slower commit is one of {len(between) + 1}: "
                     f"{', '.join(self.commits[i][0][:12] for i in [*between, hi])} (skipped commits did not build)")
            return BISECT_UNDECIDED
        sha, subject = self.commits[hi]
        self.say(f"abbench bisect: first slower commit: {sha} {subject!r} (last good {self.commits[lo][0][:12]})")
        if self.options.history is not None:
            self.say(f"history: abbench history --history {self.options.history}")
        return BISECT_FOUND

    # -- one step ---------------------------------------------------------------------
    def test(self, index: int) -> Step:
        """Build and time commit ``index`` against GOOD, with more rounds while it is inconclusive."""
        sha, subject = self.commits[index]
        step = Step(index, sha, subject)
        self.steps.append(step)
        tree = self.tree(index)
        build = self.build(index, tree)
        if build is not None:
            step.build_s = build[0]
            if not build[1]:
                step.answer, step.why = SKIP, f"build failed, log {self.build_log(index)}"
                self.say(f"abbench bisect: {step.short}: build failed after {build[0]:.1f} s: skipped")
                return step
        step.root = self.work / f"{len(self.steps):02d}-{step.short}"
        rounds = self.options.rounds
        kept_open: list[str] = []  # what each look that did not decide left open
        while True:
            step.exit_code = self.session(step, rounds)
            step.rounds = rounds
            try:
                report = read_report(RootLayout(step.root).report_json)
            except (OSError, CorruptFileError) as exc:
                log = step.root.with_name(step.root.name + ".log")
                if step.exit_code == PYTEST_USAGE_ERROR:  # the arguments after --, not the commit
                    raise StepUsage(f"the step's session stopped at a usage error (exit {step.exit_code}), so the "
                                    f"arguments after -- are wrong; the end of its log ({log}):\n"
                                    f"{_tail(log)}") from None
                step.answer, step.why = FAILED, (f"exit {step.exit_code}, no readable report ({exc}); the end of its "
                                                 f"log ({log}): {_tail(log, 3)}")
                break
            step.answer, step.why, step.evidence = self.judge(report)
            if step.exit_code not in (0, EXIT_SLOWER) and step.answer != FAILED:  # 7: a --ab-fail-if-slower given
                step.answer, step.why = FAILED, f"its session exited {step.exit_code}: {report.exit_reason}"
            if step.answer != INCONCLUSIVE or rounds >= self.options.max_rounds:
                break
            kept_open.append(f"open at {rounds} ({step.why})")
            rounds = min(rounds * 2, self.options.max_rounds)
            self.say(f"abbench bisect: {step.short}: {step.why}: {rounds} rounds")
        if step.answer == INCONCLUSIVE:
            kept_open.append(f"still open at {rounds}, the cap (--max-rounds {self.options.max_rounds})")
        elif step.answer == FAILED:
            kept_open.append(f"failed at {rounds}")
        elif kept_open:
            kept_open.append(f"{step.answer} at {rounds}")
        step.rounds_why = "; ".join(kept_open) or "decided at its first look"
        self.say(f"abbench bisect: {step.short}: {step.answer} ({step.why}); root {step.root}")
        return step

    def judge(self, report: Report) -> tuple[str, str, list[Evidence]]:
        """BAD by the report's verdicts (is it slower at all?); a step between the ends against BAD's effect."""
        if self.hunted is None:
            return judge_report(report)
        evidence, failed = report_evidence(report)
        if failed is not None:
            return FAILED, failed, evidence
        answer, why = self.hunted.judge(evidence)
        return answer, why, evidence

    def session(self, step: Step, rounds: int) -> int:
        """One pytest session of the step's root (a resumed one when it adds rounds); its exit code."""
        assert step.root is not None
        o = self.options
        side_a, side_b = self.import_dir(self.tree(0)), self.import_dir(self.tree(step.index))
        inherited = os.environ.get("PYTHONPATH", "")
        env_args: list[str] = []
        for flag, tree in (("--ab-switch-env-a", side_a), ("--ab-switch-env", side_b)):
            path = os.pathsep.join(p for p in (str(tree), inherited) if p)
            # PYTHONSAFEPATH: a cell's current folder (maybe the user's checkout) must not come before its tree.
            env_args += [flag, f"PYTHONPATH={path}", flag, "PYTHONSAFEPATH=1"]
        where = ["--ab-resume", str(step.root)] if step.root.exists() else ["--ab-root", str(step.root)]
        label = f"bisect {self.commits[0][0][:12]}..{self.commits[-1][0][:12]} {step.short}"
        argv = [sys.executable, "-m", "pytest", *o.pytest_args, *where, "--ab-rounds", str(rounds),
                "--ab-allow-no-ir-diff", *env_args,
                "--ab-history", str(o.history) if o.history is not None else HISTORY_OFF,
                "--ab-history-label", label]
        self.say(f"abbench bisect: {step.short} {step.subject[:60]!r}: {rounds} rounds into {step.root}")
        log = step.root.with_name(step.root.name + ".log")
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            # The session dies with this process (SIGTERM from the kernel where this one is killed): an orphaned
            # step would hold the GPU for the next session.
            child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     preexec_fn=lambda: parent_death_signal(signal.SIGTERM))
            try:
                return child.wait()
            except BaseException as exc:
                step.answer = ""  # stopped in its session: run() names it so, whatever an earlier look said
                end_session(child, forward=isinstance(exc, Stopped))
                raise

    def build(self, index: int, tree: Path) -> tuple[float, bool] | None:
        """Run the build command in ``tree``: (seconds, succeeded); None without a build command."""
        if not self.options.build:
            return None
        started = time.monotonic()
        with open(self.build_log(index), "w", encoding="utf-8") as log:
            try:
                done = subprocess.run(self.options.build, shell=True, cwd=tree, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, timeout=BUILD_TIMEOUT_S)
                ok = done.returncode == 0
            except subprocess.TimeoutExpired:
                log.write(f"\n[abbench bisect] build stopped after {BUILD_TIMEOUT_S:g} s\n")
                ok = False
        return time.monotonic() - started, ok

    def build_log(self, index: int) -> Path:
        return self.work / f"build-{self.commits[index][0][:12]}.log"

    # -- worktrees --------------------------------------------------------------------
    def tree(self, index: int) -> Path:
        """A clean detached worktree of commit ``index``, made once, outside the user's checkout."""
        sha = self.commits[index][0]
        if sha not in self.trees:
            if self.tree_dir is None:
                self.tree_dir = Path(tempfile.mkdtemp(prefix="abbench-bisect-"))
            path = self.tree_dir / sha[:12]
            git.git(self.repo, "worktree", "add", "--detach", "--quiet", str(path), sha)
            self.trees[sha] = path
        return self.trees[sha]

    def import_dir(self, tree: Path) -> Path:
        return (tree / self.options.import_path).resolve()

    def remove_trees(self) -> None:
        """Remove the worktrees and git's notes of them: the repository is left as it was found."""
        for path in self.trees.values():
            try:
                git.git(self.repo, "worktree", "remove", "--force", str(path))
            except git.GitError:
                shutil.rmtree(path, ignore_errors=True)
        if self.tree_dir is not None:
            shutil.rmtree(self.tree_dir, ignore_errors=True)
            try:
                git.git(self.repo, "worktree", "prune")
            except git.GitError:
                pass
