"""``abbench``: re-read a finished root (or one pair of cells) with the plugin's own checks.

    abbench summary ROOT --ab-rounds
    abbench summary --ab DIR_A DIR_B

Exit codes are the plugin's: 0 clean, 4 caliber mismatch or missing
identity, 7 regression gate, 2 bad arguments or an unusable root.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from pytest_abbench import report
from pytest_abbench.exitcodes import EXIT_CALIBER, EXIT_SLOWER
from pytest_abbench.identity import IDENTITY_FILE
from pytest_abbench.options import add_report_options

EXIT_USAGE = 2


def _is_cell(folder: Path) -> bool:
    return (folder / IDENTITY_FILE).exists() or (folder / "results.jsonl").exists() or (folder / "run.log").exists()


def _pair_records(dir_a: Path, dir_b: Path) -> list[dict[str, object]]:
    """Cells to compare for ``--ab``: two cell folders, or the same cells of two roots."""
    def status(folder: Path) -> str:
        return "ok" if (folder / "results.jsonl").exists() else "missing results.jsonl"

    if _is_cell(dir_a) and _is_cell(dir_b):
        op = dir_a.name if dir_a.name == dir_b.name else f"{dir_a.name}-vs-{dir_b.name}"
        return [{"round": 1, "op": op, "side": "A", "cell_dir": str(dir_a), "status": status(dir_a)},
                {"round": 1, "op": op, "side": "B", "cell_dir": str(dir_b), "status": status(dir_b)}]
    records: list[dict[str, object]] = []
    for cell in sorted(p for p in dir_a.glob("r*_*/*") if p.is_dir()):
        rel = cell.relative_to(dir_a)
        rnd = int(rel.parts[0].split("_")[0][1:])
        other = dir_b / rel
        records.append({"round": rnd, "op": f"{rel.parts[1]}@{rel.parts[0].split('_', 1)[1]}", "side": "A", "cell_dir": str(cell),
                        "status": status(cell)})
        records.append({"round": rnd, "op": f"{rel.parts[1]}@{rel.parts[0].split('_', 1)[1]}", "side": "B",
                        "cell_dir": str(other), "status": status(other) if other.is_dir() else "missing"})
    return records


def summary(args: argparse.Namespace) -> int:
    if args.ab:
        dir_a, dir_b = (Path(p) for p in args.ab)
        for d in (dir_a, dir_b):
            if not d.is_dir():
                print(f"abbench summary: {d} does not exist or is not a folder", file=sys.stderr)
                return EXIT_USAGE
        records = _pair_records(dir_a, dir_b)
        if not records:
            print(f"abbench summary: {dir_a} holds no cell folders (r<k>_<side>/<op>/)", file=sys.stderr)
            return EXIT_USAGE
        built = report.build_report(dir_a, expected=records, margin_pct=args.ab_margin,
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
        if not any(root.glob(f"r*_*/*/{IDENTITY_FILE}")):
            has_cells = any(p.is_dir() for p in root.glob("r*_*/*"))
            what = "holds cell folders but no run_identity.json" if has_cells else "is empty (no r<k>_<side>/<op>/ cells)"
            print(f"abbench summary: root {root} {what}", file=sys.stderr)
            if has_cells:
                print(f"!!! [caliber] root={root}: no identity file to compare: refusing to read latencies")
                return EXIT_CALIBER if not args.allow_caliber_mismatch else EXIT_USAGE
            return EXIT_USAGE
        built = report.build_report(root, margin_pct=args.ab_margin, fail_if_slower_pct=args.ab_fail_if_slower,
                                    allow_caliber_mismatch=args.allow_caliber_mismatch)
    print(report.render_text(built))
    if built.caliber_mismatch and not args.allow_caliber_mismatch:
        return EXIT_CALIBER
    if built.slower_ops:
        return EXIT_SLOWER
    return 0


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
