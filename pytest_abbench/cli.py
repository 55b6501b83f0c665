"""``abbench``: re-read a finished root (or one pair of cells) with the plugin's own checks.

    abbench summary ROOT --ab-rounds
    abbench summary --ab DIR_A DIR_B

Exit codes are the plugin's (one rule, ``exitcodes.session_exit_code``): 0 clean,
1 a cell failed or planned cells never ran, 4 caliber mismatch, 7 regression
gate, 2 bad arguments or an unusable root.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from pytest_abbench import report
from pytest_abbench.exitcodes import EXIT_CELL_FAILED
from pytest_abbench.layout import RESULTS_FILE, CellKey, RootLayout, identity_file, results_file, run_log
from pytest_abbench.outcome import OK, CellOutcome
from pytest_abbench.options import add_report_options
from pytest_abbench.plan import CampaignPlan

EXIT_USAGE = 2


def _is_cell(folder: Path) -> bool:
    return any(f.exists() for f in (identity_file(folder), results_file(folder), run_log(folder)))


def _pair_outcomes(dir_a: Path, dir_b: Path) -> tuple[list[CellOutcome], CampaignPlan]:
    """Cells to compare for ``--ab``: two cell folders, or the same cells of two roots, as side A and side B."""
    def outcome(rnd: int, op: str, role: str, folder: Path) -> CellOutcome:
        status = OK if results_file(folder).exists() else f"missing {RESULTS_FILE}" if folder.is_dir() else "missing"
        return CellOutcome(CellKey(rnd, op, role), folder, status)

    if _is_cell(dir_a) and _is_cell(dir_b):
        op = dir_a.name if dir_a.name == dir_b.name else f"{dir_a.name}-vs-{dir_b.name}"
        return [outcome(1, op, "A", dir_a), outcome(1, op, "B", dir_b)], CampaignPlan(1)
    outcomes: list[CellOutcome] = []
    layout_b = RootLayout(dir_b)
    for key, cell in RootLayout(dir_a).cell_folders():
        op = f"{key.op}@{key.role}"
        outcomes += [outcome(key.round, op, "A", cell), outcome(key.round, op, "B", layout_b.cell(key))]
    return outcomes, CampaignPlan(max((o.key.round for o in outcomes), default=1))


def summary(args: argparse.Namespace) -> int:
    if args.ab:
        dir_a, dir_b = (Path(p) for p in args.ab)
        for d in (dir_a, dir_b):
            if not d.is_dir():
                print(f"abbench summary: {d} does not exist or is not a folder", file=sys.stderr)
                return EXIT_USAGE
        outcomes, plan = _pair_outcomes(dir_a, dir_b)
        if not outcomes:
            print(f"abbench summary: {dir_a} holds no cell folders (r<k>_<side>/<op>/)", file=sys.stderr)
            return EXIT_USAGE
        built = report.build_report(dir_a, outcomes, plan, margin_pct=args.ab_margin,
                                    fail_if_slower_pct=args.ab_fail_if_slower,
                                    allow_caliber_mismatch=args.allow_caliber_mismatch)
    else:
        if args.root is None:
            print("abbench summary: give ROOT or --ab DIR_A DIR_B", file=sys.stderr)
            return EXIT_USAGE
        root = Path(args.root)
        if not root.is_dir():
            print(f"abbench summary: root {root} does not exist or is not a folder", file=sys.stderr)
            return EXIT_USAGE
        if not any(RootLayout(root).cell_folders()):
            print(f"abbench summary: root {root} is empty (no r<k>_<side>/<op>/ cells)", file=sys.stderr)
            return EXIT_USAGE
        built = report.build_report(root, margin_pct=args.ab_margin, fail_if_slower_pct=args.ab_fail_if_slower,
                                    allow_caliber_mismatch=args.allow_caliber_mismatch)
    if args.ab_fail_if_slower is not None and not built.gpu_timed:
        print(f"abbench summary: --ab-fail-if-slower gates on GPU timings; these cells were timed with "
              f"{built.setup.get('backend')} / {built.setup.get('timer')}, which says nothing about GPU speed",
              file=sys.stderr)
        return EXIT_USAGE
    # The live session's rule: a failed or never-run cell is pytest's 1, then caliber (4) and the gate (7).
    cells_status = EXIT_CELL_FAILED if built.failed_cells or not built.complete else 0
    code = built.decide_exit(cells_status, args.allow_caliber_mismatch)
    if not args.ab:
        report.write_report(root, built)  # the files the live session writes, from the same code
    print(report.render_text(built))
    print(built.exit_line())
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="abbench", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summary", help="the round-delta report of a finished root, with caliber checks")
    s.add_argument("root", nargs="?", help="a campaign root (the --ab-root of a session)")
    s.add_argument("--ab-rounds", action="store_true", help="aggregate every round present in ROOT (the default)")
    s.add_argument("--ab", nargs=2, metavar=("DIR_A", "DIR_B"), help="compare one pair of cell folders or two roots")
    add_report_options(s.add_argument)
    s.set_defaults(func=summary)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
