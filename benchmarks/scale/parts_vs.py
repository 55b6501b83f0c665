"""Two roots of the same campaign, part by part: where one spent more time than the other.

    python benchmarks/scale/parts_vs.py ROOT_A ROOT_B

For each part of the report's ``time:`` line (``pytest_abbench.report.cost``),
the seconds summed over each root's cells, B minus A and B over A; then the
same per op (all parts together).  Used to find what makes cells longer when
something else runs on the host (``benchmarks/gpu/gpu_contention.sh``) or on two
workers (``benchmarks/gpu/gpu_scale.sh``).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pytest_abbench.core.layout import CellKey, RootLayout  # noqa: E402
from pytest_abbench.report.cost import PARTS, cell_parts, read_timing  # noqa: E402
from pytest_abbench.core.status import read_status  # noqa: E402


def parts_by_op(root: Path) -> dict[str, dict[str, float]]:
    """Per op, seconds per part over the op's cells that ran (a cell without a timing file: all other)."""
    layout = RootLayout(root)
    out: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys((key for key, _, _ in PARTS), 0.0))
    for row in read_status(root):
        if row.elapsed_s <= 0:
            continue
        timing = read_timing(layout.cell(CellKey(row.round, row.op, row.side)))
        parts = cell_parts(timing, row.elapsed_s, row.status) or {"other_s": row.elapsed_s}
        for key, seconds in parts.items():
            out[row.op][key] += seconds
    return out


def ratio(a: float, b: float) -> str:
    return f"{b / a:6.2f}x" if a > 0 else "      -"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    a, b = (parts_by_op(Path(root)) for root in argv)
    print(f"{'part':<10} {'A s':>9} {'B s':>9} {'B-A s':>8} {'B/A':>7}")
    for key, _, words in PARTS:
        sa, sb = sum(op[key] for op in a.values()), sum(op[key] for op in b.values())
        print(f"{words:<10} {sa:9.1f} {sb:9.1f} {sb - sa:+8.1f} {ratio(sa, sb)}")
    total_a = sum(sum(op.values()) for op in a.values())
    total_b = sum(sum(op.values()) for op in b.values())
    print(f"{'all':<10} {total_a:9.1f} {total_b:9.1f} {total_b - total_a:+8.1f} {ratio(total_a, total_b)}\n")
    print(f"{'op':<20} {'A s':>9} {'B s':>9} {'B-A s':>8} {'B/A':>7}")
    for op in sorted(set(a) | set(b)):
        sa, sb = sum(a.get(op, {}).values()), sum(b.get(op, {}).values())
        print(f"{op:<20} {sa:9.1f} {sb:9.1f} {sb - sa:+8.1f} {ratio(sa, sb)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
