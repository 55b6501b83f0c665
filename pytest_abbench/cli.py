"""``abbench``: re-read a finished root (or two separate runs) with the plugin's own checks; the history of runs.

    abbench summary ROOT
    abbench gate ROOT
    abbench comment ROOT
    abbench summary --ab ROOT_A ROOT_B
    abbench summary --ab CELL_A CELL_B
    abbench history [--history FILE] [--op OP [--shape S]] [--html FILE]
    abbench bisect GOOD BAD [--repo PATH] [--build CMD] [--rounds N] [--max-rounds N] [--share F] -- PYTEST_ARGS
    abbench kernels export ROOT --side A|B -o FILE [--campaign NAME]

``ROOT`` is a campaign root (a session's ``--ab-root``): its report, its plan
from campaign.json, every round on disk.  ``--ab`` compares two separate runs:
two roots, each cell of ROOT_A against the cell of the same round, side and op
in ROOT_B (reported as op ``<op>@<side>``, ROOT_A's cell as side A), or two cell
folders ``<root>/r<k>_<side>/<op>``, as one pair.  Each cell keeps its own
run's autotune record; the two records must hold the same choices.

Exit codes are the plugin's (one rule, ``exitcodes.session_exit_code``): 0 clean,
1 a cell failed or planned cells never ran, 4 caliber mismatch, 7 regression
gate, 2 bad arguments or an unusable root.  ``gate`` exits with the same codes,
judged from ROOT/report.json alone, and 2 for a root without a report (the
session stopped before it: a mistyped option, a bad environment variable);
``comment`` exits 0, or 2 as ``gate``.  ``history`` exits 0, or 2 for an
unusable history file; ``bisect``'s codes are in ``history/bisect.py``
(docs/guide/history.md).  ``kernels export`` writes the kernel cache folder a
side's cells of ROOT used (``origin.json`` names it) into one file that a
session's ``--ab-kernel-import`` seeds a cache from; it exits 0, or 2 when
there is nothing it can export.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

from pytest_abbench import report
from pytest_abbench.core import envnames
from pytest_abbench.core.fileio import CorruptFileError
from pytest_abbench.checks import irgate
from pytest_abbench.core.layout import (ABBENCH_DIR, BISECT_DIR, HISTORY_FILE, RESULTS_FILE, SIDES, CellKey,
                                        RootLayout, results_file)
from pytest_abbench.core.outcome import NO_IR_DIFF, OK, CellOutcome
from pytest_abbench.core.settings import (GATE_SHAPES, HISTORY_OFF, add_report_options, history_file, history_path,
                                          output_file_problem, rounds_count)
from pytest_abbench.history.bisect import DEFAULT_MAX_ROUNDS, DEFAULT_SHARE
from pytest_abbench.history.bisect import DEFAULT_ROUNDS as DEFAULT_BISECT_ROUNDS
from pytest_abbench.core.plan import CampaignPlan
from pytest_abbench.core.status import read_status
from pytest_abbench.report.build import disagreements, discover

EXIT_USAGE = 2


class _Runs:
    """The cells of the roots named by ``--ab``, with the status their own status.tsv gives them."""

    def __init__(self) -> None:
        self.cells: dict[Path, dict[CellKey, CellOutcome]] = {}
        self.problems: list[str] = []

    def of_root(self, root: Path) -> dict[CellKey, CellOutcome]:
        root = root.resolve()
        if root not in self.cells:
            layout = RootLayout(root)
            self.cells[root] = {o.key: o for o in discover(layout, self.problems)} if layout.status.exists() else {}
        return self.cells[root]

    def outcome(self, folder: Path, key: CellKey) -> CellOutcome:
        """``folder``'s cell as side ``key.role`` of pseudo-op ``key.op``: its status row, else what is on disk."""
        found = RootLayout(folder.parent.parent).key_of(folder)
        own = self.of_root(folder.parent.parent).get(found) if found is not None else None
        if own is not None:
            return dataclasses.replace(own, key=key, cell_dir=folder)
        status = OK if results_file(folder).exists() else f"missing {RESULTS_FILE}" if folder.is_dir() else "missing"
        return CellOutcome(key, folder, status)


def _pair_outcomes(dir_a: Path, dir_b: Path, runs: _Runs) -> tuple[list[CellOutcome], CampaignPlan] | str:
    """Cells to compare for ``--ab``: two cell folders, or the same cells of two roots, as side A and side B.

    A str says why the two folders cannot be compared.
    """
    cell_a, cell_b = RootLayout(dir_a.parent).key_of(dir_a), RootLayout(dir_b.parent).key_of(dir_b)
    if cell_a is not None and cell_b is not None:
        op = dir_a.name if dir_a.name == dir_b.name else f"{dir_a.name}-vs-{dir_b.name}"
        pair = [runs.outcome(d, CellKey(1, op, side)) for d, side in ((dir_a, "A"), (dir_b, "B"))]
        return pair, CampaignPlan(1)
    if (cell_a is None) != (cell_b is None):
        cell, other = (dir_a, dir_b) if cell_a is not None else (dir_b, dir_a)
        return f"{cell} is a cell folder but {other} is not: give two cell folders or two roots"
    layouts = RootLayout(dir_a), RootLayout(dir_b)
    # Rounds the IR gate skipped have no folder, only a row: they count as done, as in the run itself.
    keys = sorted({key for layout in layouts for key, _ in layout.cell_folders()}
                  | {key for layout in layouts for key, cell in runs.of_root(layout.root).items()
                     if cell.status == NO_IR_DIFF})
    outcomes: list[CellOutcome] = []
    for key in keys:
        op = f"{key.op}@{key.role}"
        outcomes += [runs.outcome(layout.cell(key), CellKey(key.round, op, side))
                     for layout, side in zip(layouts, SIDES)]
    return outcomes, CampaignPlan(max((o.key.round for o in outcomes), default=1))


def _gate_of_two_runs(dir_a: Path, dir_b: Path) -> Callable[[str], irgate.GateDecision | None]:
    """The IR gate of ``<op>@<side>`` when two roots are compared: the runs' own decisions for ``op`` when both
    found that the switch changed no code (then both skipped the same rounds); otherwise none."""
    def gate_of(pseudo_op: str) -> irgate.GateDecision | None:
        op = pseudo_op.rpartition("@")[0]
        decisions = [irgate.load_decision(d, op) for d in (dir_a, dir_b)] if op else []
        if decisions and all(d is not None and d.state == "no_diff" for d in decisions):
            return decisions[0]
        return None
    return gate_of


def summary(args: argparse.Namespace) -> int:
    if args.ab_rounds is not None:
        print("abbench summary: --ab-rounds is not a summary option: the summary reads every round in ROOT and "
              "judges it against the plan in ROOT/campaign.json (--ab-rounds N sets the rounds a pytest session "
              "runs); drop it", file=sys.stderr)
        return EXIT_USAGE
    if args.ab:
        dir_a, dir_b = (Path(p) for p in args.ab)
        for d in (dir_a, dir_b):
            if not d.is_dir():
                print(f"abbench summary: {d} does not exist or is not a folder", file=sys.stderr)
                return EXIT_USAGE
        if args.root is not None:
            print(f"abbench summary: give ROOT or --ab A B, not both ({args.root} and --ab)", file=sys.stderr)
            return EXIT_USAGE
        runs = _Runs()
        paired = _pair_outcomes(dir_a, dir_b, runs)
        if isinstance(paired, str):
            print(f"abbench summary: {paired}", file=sys.stderr)
            return EXIT_USAGE
        outcomes, plan = paired
        for problem in runs.problems:
            print(f"abbench summary: {problem}", file=sys.stderr)
        if not outcomes:
            print(f"abbench summary: neither {dir_a} nor {dir_b} holds cell folders (r<k>_<side>/<op>/)",
                  file=sys.stderr)
            return EXIT_USAGE
        built = report.build_report(dir_a, outcomes, plan, margin_pct=args.ab_margin,
                                    fail_if_slower_pct=args.ab_fail_if_slower,
                                    allow_caliber_mismatch=args.allow_caliber_mismatch,
                                    gate=args.ab_gate or GATE_SHAPES, gate_of=_gate_of_two_runs(dir_a, dir_b))
    else:
        if args.root is None:
            print("abbench summary: give ROOT, or --ab A B (two roots or two cell folders)", file=sys.stderr)
            return EXIT_USAGE
        root = Path(args.root)
        if not root.is_dir():
            print(f"abbench summary: root {root} does not exist or is not a folder", file=sys.stderr)
            return EXIT_USAGE
        if not any(RootLayout(root).cell_folders()):
            print(f"abbench summary: root {root} is empty (no r<k>_<side>/<op>/ cells)", file=sys.stderr)
            return EXIT_USAGE
        if args.ab_no_fail_if_slower and args.ab_fail_if_slower is not None:
            print("abbench summary: --ab-no-fail-if-slower and --ab-fail-if-slower contradict each other",
                  file=sys.stderr)
            return EXIT_USAGE
        kept = _session_choices(root, SessionChoices(args.ab_margin, args.allow_caliber_mismatch,
                                                     args.ab_fail_if_slower, args.ab_gate),
                                keep_gate=not args.ab_no_fail_if_slower)
        if isinstance(kept, str):
            print(f"abbench summary: {kept}", file=sys.stderr)
            return EXIT_USAGE
        built = report.build_report(root, margin_pct=kept.margin_pct, fail_if_slower_pct=kept.fail_if_slower_pct,
                                    allow_caliber_mismatch=kept.allow_caliber_mismatch,
                                    gate=kept.gate or GATE_SHAPES)
    if args.ab_fail_if_slower is not None and not built.gpu_timed:
        print(f"abbench summary: --ab-fail-if-slower gates on GPU timings; these cells were timed with "
              f"{built.setup.get('backend')} / {built.setup.get('timer')}, which says nothing about GPU speed",
              file=sys.stderr)
        return EXIT_USAGE
    code = built.offline_exit()  # the live session's rule: a failed or never-run cell is 1, then 4 and 7
    if not args.ab:
        report.write_report(root, built)  # the files the live session writes, from the same code
    print(report.render_text(built))
    print(built.exit_line())
    return code


class SessionChoices(NamedTuple):
    """The report options ``abbench summary`` rebuilds a root with; ``gate`` None: --ab-gate not given."""

    margin_pct: float | None
    allow_caliber_mismatch: bool
    fail_if_slower_pct: float | None
    gate: str | None


def _session_choices(root: Path, given: SessionChoices, keep_gate: bool = True) -> SessionChoices | str:
    """The options to rebuild ``root``'s report with: those given here, else those of the session whose report.json
    is there, said on stderr (rebuilt without them, the report it replaces would change verdicts or exit code though
    no cell did: a gated session's exit 7 would turn into 0).  A string: why the report cannot be rebuilt without
    an option (a gated report written before it kept its threshold).  ``keep_gate`` False
    (``--ab-no-fail-if-slower``): the session's regression gate is dropped, not kept."""
    try:
        before = report.read_report(RootLayout(root).report_json)
    except (OSError, CorruptFileError):
        return given  # no readable report: nothing to keep
    margin, allow, threshold, gate = given
    kept = []
    if margin is None and before.margin_source == "--ab-margin":
        margin = before.margin_pct
        kept.append(f"--ab-margin {before.margin_pct:g}")
    if not allow and before.allow_caliber_mismatch:
        allow = True
        kept.append("--allow-caliber-mismatch")
    keep_threshold = keep_gate and threshold is None  # dropped (--ab-no-fail-if-slower) or given here: not kept
    if keep_threshold and before.fail_if_slower_pct is not None:
        threshold = before.fail_if_slower_pct
        kept.append(f"--ab-fail-if-slower {threshold:g}")
        if gate is None and before.gate_scope != GATE_SHAPES:
            gate = before.gate_scope
            kept.append(f"--ab-gate {gate}")
    elif keep_threshold and before.slower_ops:
        return (f"{RootLayout(root).report_json} was gated by --ab-fail-if-slower (slower: "
                f"{', '.join(before.slower_ops)}) but does not say its threshold: give --ab-fail-if-slower PCT (and "
                f"--ab-gate {before.gate_scope}) to keep it, or --ab-no-fail-if-slower to drop it")
    if kept:
        print(f"abbench summary: {' and '.join(kept)} kept from the session that wrote {RootLayout(root).report_json}",
              file=sys.stderr)
    return SessionChoices(margin, allow, threshold, gate)


def root_report(root: Path) -> report.Report | str:
    """The report a session left in ``root``, or why there is none: the run's own record, which ``gate`` and
    ``comment`` read and never rebuild (a root without one is a session that stopped before its end)."""
    layout = RootLayout(root)
    if not layout.root.is_dir():
        return (f"root {layout.root} does not exist or is not a folder: no session wrote it (a mistyped option or "
                "a bad environment variable stops pytest before the root is made)")
    if not layout.report_json.is_file():
        rows = len(read_status(layout.root, on_bad_line=lambda exc: None)) if layout.status.is_file() else 0
        if rows:  # cells ran: the session got past its options and collection, then ended without its report
            return (f"no {layout.report_json.name} in {layout.root}, whose {layout.status.name} holds {rows} "
                    "cell row(s): the session was killed or crashed before its report (abbench summary "
                    f"{layout.root} writes the report from its cells; --ab-resume {layout.root} runs the rest)")
        return (f"no {layout.report_json.name} in {layout.root}: the session stopped before its report (a "
                "mistyped option, a bad environment variable, a collection error: its own output says which)")
    # A later session on this root (a resume) that died after running cells left the report of an earlier one.
    if layout.status.is_file() and layout.status.stat().st_mtime_ns > layout.report_json.stat().st_mtime_ns:
        return (f"{layout.report_json} is older than {layout.status}: the last session on this root did not "
                f"finish its report (abbench summary {layout.root} writes it again from the cells)")
    try:
        found = report.read_report(layout.report_json)
    except CorruptFileError as exc:  # not JSON, another schema_version, a field of the wrong type: named
        return str(exc)
    differ = disagreements(found, layout.root)
    if differ:
        return (f"{layout.report_json} disagrees with {layout.status}: {'; '.join(differ)}. The report is not the "
                f"run's own record: abbench summary {layout.root} rebuilds it from the cells")
    return found


def gate(args: argparse.Namespace) -> int:
    """The exit code of the session that wrote ROOT, judged again from its report.json by the session's rule.

    pytest answers a mistyped option or a bad variable with its usage error, 4, before any plugin runs; a
    caliber mismatch is 4 too.  The report is the run's own record: a root without one is 2, never 4.
    """
    found = root_report(Path(args.root))
    if isinstance(found, str):
        print(f"abbench gate: exit {EXIT_USAGE}: {found}", file=sys.stderr)
        return EXIT_USAGE
    code = found.offline_exit()
    print(f"abbench gate: exit {code}: {found.exit_reason} ({RootLayout(Path(args.root)).report_json})")
    return code


def comment(args: argparse.Namespace) -> int:
    """The markdown summary of ROOT's report.json on stdout: a pull-request comment's body (the CI posts it)."""
    from pytest_abbench.report.markdown import render_markdown

    found = root_report(Path(args.root))
    if isinstance(found, str):
        print(f"abbench comment: {found}", file=sys.stderr)
        return EXIT_USAGE
    found.offline_exit()  # the title's exit line, by the rule abbench gate applies
    print(render_markdown(found), end="")
    return 0


def default_history_file() -> Path | None:
    """The history file ``history`` and ``bisect`` use without --history: $ABBENCH_HISTORY, else
    ``./.abbench/history.sqlite`` (a session's default when run from here)."""
    return history_path(os.environ.get(envnames.ABBENCH_HISTORY) or None, Path.cwd())


def history(args: argparse.Namespace) -> int:
    from pytest_abbench.history import view
    from pytest_abbench.history.store import History, HistoryError

    path = history_path(args.history, Path.cwd()) if args.history else default_history_file()
    if path is None:
        print(f"abbench history: the history is off ({envnames.ABBENCH_HISTORY}={HISTORY_OFF}); give --history FILE",
              file=sys.stderr)
        return EXIT_USAGE
    if args.shape and not args.op:
        print("abbench history: --shape needs --op", file=sys.stderr)
        return EXIT_USAGE
    problem = output_file_problem(Path(args.html)) if args.html else None
    if problem:
        print(f"abbench history: --html {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with History(path, create=False) as store:
            runs = store.runs()
    except HistoryError as exc:
        print(f"abbench history: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"history: {path}")
    found = view.series(runs, args.op, args.shape) if args.op else {}
    if not args.op:
        print("\n".join(view.run_lines(runs)))
    elif not found:
        known = sorted({f"{s.op}[{s.shape}]" for r in runs for s in r.shapes})
        print(f"abbench history: no run holds {args.op}" + (f"[{args.shape}]" if args.shape else "")
              + f" (recorded: {', '.join(known[:20]) or 'nothing'})", file=sys.stderr)
        return EXIT_USAGE
    else:
        print("\n".join(view.series_lines(args.op, found)))
    if args.html:
        from pytest_abbench.history.html import render_history_html

        try:
            Path(args.html).write_text(render_history_html(path, runs, args.op, args.shape, found), encoding="utf-8")
        except OSError as exc:
            print(f"abbench history: --html {args.html}: cannot write it ({exc.strerror or exc})", file=sys.stderr)
            return EXIT_USAGE
        print(f"html: {args.html}")
    return 0


def share_of_effect(text: str) -> float:
    """--share: a fraction strictly between 0 and 1 (0 would call noise bad, 1 only BAD itself)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (a share of BAD's slowdown, e.g. 0.5)") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not strictly between 0 and 1 (a share of BAD's slowdown)")
    return value


def bisect(args: argparse.Namespace) -> int:
    from pytest_abbench.history.bisect import BISECT_USAGE, Bisection, BisectOptions

    if not args.pytest_args:
        print("abbench bisect: give the pytest arguments that select the campaign after --, e.g. "
              "abbench bisect v1 v2 -- campaigns/mm.py -k mm", file=sys.stderr)
        return BISECT_USAGE
    path = history_path(args.history, Path.cwd()) if args.history else default_history_file()
    options = BisectOptions(args.good, args.bad, list(args.pytest_args), Path(args.repo), args.build, args.rounds,
                            args.max_rounds, path, Path(args.work) if args.work else None, args.import_path,
                            args.share)
    return Bisection(options, lambda line: print(line, flush=True)).run()


def kernels_export(args: argparse.Namespace) -> int:
    """Write the kernel cache folder side ``--side`` of ROOT used, with its key, into one file (``-o``)."""
    from pytest_abbench.core.kernelarchive import (KernelArchiveError, cache_files, key_of_folder, recorded_folders,
                                                   write_archive)

    def refuse(why: str) -> int:
        print(f"abbench kernels export: {why}", file=sys.stderr)
        return EXIT_USAGE

    layout = RootLayout(Path(args.root))
    if not layout.root.is_dir():
        return refuse(f"{layout.root} is not a campaign root (no such folder)")
    found = recorded_folders(layout, args.side)
    if args.campaign is not None:
        found = {folder: names for folder, names in found.items()
                 if any(name == args.campaign or Path(name).name == args.campaign or Path(name).stem == args.campaign
                        for name in names)}
    if not found:
        which = f" of campaign {args.campaign}" if args.campaign is not None else ""
        return refuse(f"no cell of side {args.side}{which} in {layout.root} names its kernel cache (origin.json): "
                      "none ran, or the root was written before kernel caches were recorded")
    if len(found) > 1:
        listed = "; ".join(f"{folder} ({', '.join(sorted(names))})" for folder, names in sorted(found.items()))
        return refuse(f"side {args.side}'s cells of {layout.root} used {len(found)} kernel caches: {listed}; "
                      "name one campaign with --campaign")
    (folder, _), = found.items()
    if not folder.is_dir():
        return refuse(f"side {args.side}'s kernel cache {folder} is not on this host (its cells' origin.json "
                      "names the host they ran on): export it there")
    try:
        key = key_of_folder(folder)
    except KernelArchiveError as exc:
        return refuse(f"side {args.side} compiled into {folder}, which has no kernel cache key "
                      f"(--ab-kernel-cache off keeps a root's own cache, for its run only): {exc}")
    if key.get("side") != args.side:
        return refuse(f"{folder} holds side {key.get('side')}'s key, not side {args.side}'s")
    if not cache_files(folder):
        return refuse(f"side {args.side}'s kernel cache {folder} holds no kernels: nothing written")
    out = Path(args.output)
    if out.is_dir():
        return refuse(f"-o {out} is a folder: name the file to write")
    try:
        files, kernels = write_archive(folder, out)
    except OSError as exc:
        return refuse(f"cannot write {out}: {exc}")
    print(f"abbench kernels export: wrote {out}: side {args.side}'s kernel cache {folder} "
          f"({kernels} kernel(s), {files} file(s); key {key.get('campaign')}, {key.get('device')})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="abbench", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summary", help="the round-delta report of a finished root, with caliber checks")
    s.add_argument("root", nargs="?", help="a campaign root (the --ab-root of a session): every round in it, "
                                            "judged against the plan in its campaign.json")
    # Once a do-nothing flag; kept only to refuse it with a reason (it reads like pytest's --ab-rounds N).
    s.add_argument("--ab-rounds", nargs="?", const="", default=None, help=argparse.SUPPRESS)
    s.add_argument("--ab", nargs=2, metavar=("A", "B"),
                   help="compare two separate runs: two roots (each cell of A against the same round, side and op "
                        "of B, reported as <op>@<side>) or two cell folders <root>/r<k>_<side>/<op> (one pair); "
                        "each side keeps its own run's autotune record, and the two records must hold the same "
                        "choices")
    add_report_options(s.add_argument)
    s.add_argument("--ab-no-fail-if-slower", action="store_true", default=False,
                   help="rebuild without the regression gate of the session that wrote ROOT's report (kept otherwise)")
    # --ab-gate unset reads as None, so a session's scope is kept only where the user gave none.
    s.set_defaults(func=summary, ab_gate=None)

    g = sub.add_parser("gate", help="the exit code a finished root's report.json gives, by the session's rule: 0, 1, "
                                     "4 or 7; 2 when the root has no report (the session stopped at a usage error)")
    g.add_argument("root", help="the --ab-root a session was given")
    g.set_defaults(func=gate)

    c = sub.add_parser("comment", help="print the short markdown summary of a finished root's report.json: a "
                                        "pull-request comment's body (nothing is posted)")
    c.add_argument("root", help="the --ab-root a session was given")
    c.set_defaults(func=comment)

    h = sub.add_parser("history", help="the runs the history file holds; an op's delta across commits")
    h.add_argument("--history", type=history_file, default=None, metavar="FILE",
                   help=f"the history file (default ${envnames.ABBENCH_HISTORY}, else ./{ABBENCH_DIR}/{HISTORY_FILE})")
    h.add_argument("--op", default=None, help="show this op's delta and interval per run, ordered by commit time")
    h.add_argument("--shape", default=None, help="with --op: this shape only")
    h.add_argument("--html", default=None, metavar="FILE",
                   help="also write the runs (and with --op the series, plotted) as one self-contained HTML page")
    h.set_defaults(func=history)

    b = sub.add_parser("bisect", help="the first commit that made a campaign slower, by the A/B verdict",
                       usage="abbench bisect GOOD BAD [options] -- PYTEST_ARGS")
    b.add_argument("good", metavar="GOOD", help="a commit whose code is side A of every step")
    b.add_argument("bad", metavar="BAD", help="a later commit, slower than GOOD")
    b.add_argument("--repo", default=".", help="the git repository of GOOD and BAD (default: the current folder's)")
    b.add_argument("--build", default=None, metavar="CMD",
                   help="a shell command run in each commit's worktree before it is timed; its failure skips the "
                        "commit (as git bisect skip), its time is reported")
    b.add_argument("--rounds", type=rounds_count, default=DEFAULT_BISECT_ROUNDS, metavar="N",
                   help=f"rounds of a step's first session (default {DEFAULT_BISECT_ROUNDS})")
    b.add_argument("--max-rounds", type=rounds_count, default=DEFAULT_MAX_ROUNDS, metavar="N",
                   help=f"an inconclusive step gets twice the rounds up to N, then ends the bisection as "
                        f"inconclusive (default {DEFAULT_MAX_ROUNDS})")
    b.add_argument("--share", type=share_of_effect, default=DEFAULT_SHARE, metavar="F",
                   help=f"a step is bad when a shape's slowdown is, with confidence, beyond this share of BAD's on a "
                        f"log scale, good when below it (default {DEFAULT_SHARE:g}: the geometric middle)")
    b.add_argument("--history", type=history_file, default=None, metavar=f"FILE|{HISTORY_OFF}",
                   help=f"where the steps are recorded (default ${envnames.ABBENCH_HISTORY}, else "
                        f"./{ABBENCH_DIR}/{HISTORY_FILE})")
    b.add_argument("--work", default=None, metavar="DIR",
                   help=f"the bisection's folder: each step's root and log (default ./{ABBENCH_DIR}/{BISECT_DIR}/<stamp>)")
    b.add_argument("--import-path", default=".", metavar="SUBDIR",
                   help="the folder of a commit's tree that goes on the import path (default the tree itself; "
                        "Triton's own tree: python)")
    b.set_defaults(func=bisect, pytest_args=[])

    k = sub.add_parser("kernels", help="carry a side's persistent kernel cache to another machine")
    ksub = k.add_subparsers(dest="kernels_command", required=True)
    e = ksub.add_parser("export", help="write the kernel cache a side of a finished root used, with its key, into "
                                       "one file; a session's --ab-kernel-import seeds a cache from it")
    e.add_argument("root", help="the --ab-root a session was given")
    e.add_argument("--side", required=True, choices=SIDES, help="the side whose kernel cache is written")
    e.add_argument("-o", "--output", required=True, metavar="FILE", help="the file to write (replaced atomically)")
    e.add_argument("--campaign", default=None, metavar="NAME",
                   help="a root of several campaigns: the campaign file (path, name or stem) whose cache is written")
    e.set_defaults(func=kernels_export)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # bisect's pytest arguments follow "--": they are pytest's, never parsed here.
    passed: list[str] = []
    if argv[:1] == ["bisect"] and "--" in argv:
        cut = argv.index("--")
        argv, passed = argv[:cut], argv[cut + 1:]
    args = build_parser().parse_args(argv)
    if passed:
        args.pytest_args = passed
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
