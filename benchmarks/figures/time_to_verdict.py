"""Two sessions of one campaign side by side (a cold run and a re-run, or an older tree and this one): their wall
time, where the cells' time went, and whether they reached the same IR-gate decisions and verdicts.

    python benchmarks/figures/time_to_verdict.py ROOT_1 WALL_1 ROOT_2 WALL_2 [--before S]

Each ROOT is a finished session's root (its report.json); WALL is that session's wall time in seconds, measured
by the driver around pytest.  ``--before S``: a wall time to compare the first run with (a figure from an earlier
measurement, quoted as such).  Prints one line per run, then the ratios, then each op's decisions on both runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

PARTS = ("startup_s", "inputs_s", "compile_s", "autotune_s", "timing_s", "checks_s", "exit_s", "other_s")


def read_report(root: Path) -> dict[str, Any]:
    path = root / "report.json"
    try:
        report: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{path}: {exc}") from None
    return report


def decisions(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Op -> (its IR gate's state, its verdicts by shape in order)."""
    out = {}
    for op in report["ops"]:
        gate = (op.get("gate") or {}).get("state", "-")
        verdicts = op.get("verdicts") or {}
        out[op["op"]] = (gate, json.dumps(verdicts, sort_keys=True))
    return out


def shares(spent: dict[str, Any]) -> str:
    cells = spent["cells_s"] or 1.0
    return ", ".join(f"{part[:-2]} {100 * spent[part] / cells:.0f}%" for part in PARTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root_1", type=Path)
    parser.add_argument("wall_1", type=float)
    parser.add_argument("root_2", type=Path)
    parser.add_argument("wall_2", type=float)
    parser.add_argument("--before", type=float, help="an earlier wall time of the first run's kind, in seconds")
    args = parser.parse_args()
    reports = [read_report(args.root_1), read_report(args.root_2)]
    for name, root, wall, report in (("run 1", args.root_1, args.wall_1, reports[0]),
                                     ("run 2", args.root_2, args.wall_2, reports[1])):
        spent = report["time_spent"]
        print(f"{name} ({root}): wall {wall:.1f} s; cells {spent['cells_s']:.1f} s: {shares(spent)}; "
              f"timing {100 * spent['timing_s'] / (spent['cells_s'] or 1.0):.1f}% of the cells' time")
    print(f"run 2 / run 1 wall: {args.wall_2 / args.wall_1:.3f}")
    if args.before:
        print(f"run 1 / {args.before:g} s before: {args.wall_1 / args.before:.3f}")
    first, second = decisions(reports[0]), decisions(reports[1])
    same = True
    for op in sorted(set(first) | set(second)):
        a, b = first.get(op), second.get(op)
        same &= a == b
        print(f"  {op}: gate {a[0] if a else 'absent'} / {b[0] if b else 'absent'}; verdicts "
              f"{a[1] if a else 'absent'} / {b[1] if b else 'absent'}{'' if a == b else '  DIFFERENT'}")
    print("gate decisions and verdicts: " + ("the same on both runs" if same else "DIFFERENT (above)"))


if __name__ == "__main__":
    main()
