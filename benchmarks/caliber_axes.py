"""Compare one op's side-A cells from sessions that differ in one caliber axis.

    python benchmarks/caliber_axes.py AXES_ROOT      # written by benchmarks/gpu_caliber_axes.sh
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_abbench.report.build import read_results  # noqa: E402


def medians(root: Path, op: str) -> dict[str, float]:
    return {shape: r["median_ms"] for shape, r in read_results(root / "r1_A" / op).items()}


def compare(title: str, base: Path, other: Path, op: str) -> list[str]:
    a, b = medians(base, op), medians(other, op)
    lines = [title, f"  {'shape':<34} {base.name:>10} {other.name:>10} {'moved':>8}"]
    for shape in sorted(a.keys() & b.keys()):
        lines.append(f"  {shape:<34} {a[shape] * 1000:>8.2f}us {b[shape] * 1000:>8.2f}us "
                     f"{100 * (b[shape] / a[shape] - 1):>+7.1f}%")
    return lines


def records(root: Path, op: str) -> dict[str, object]:
    data = json.loads((root / "autotune" / f"{op}.json").read_text())
    return {" ".join(e["key"]): e["config"] for e in data["entries"]}


def main(axes: Path) -> None:
    lines = compare("direct_repeat: do_bench rep 100 ms vs 20 ms (A/A campaign, side A, direct timer)",
                    axes / "rep100", axes / "rep20", "aa")
    lines += [""] + compare("autotune record/record: mm round 1 side A tuned in two sessions",
                            axes / "tune1", axes / "tune2", "mm")
    r1, r2 = records(axes / "tune1", "mm"), records(axes / "tune2", "mm")
    differ = [k for k in r1 if r1[k] != r2.get(k)]
    lines.append(f"  configs chosen differently: {len(differ)} of {len(r1)} keys")
    for key in differ:
        lines.append(f"    key {key}: {r1[key]} vs {r2.get(key)}")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
