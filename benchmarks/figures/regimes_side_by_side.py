"""Each op's delta per timing regime, side by side, from roots run with ``--ab-regime both``; with ``--aa``, the A/A
check: no direction in either regime (every verdict 'same' or 'inconclusive') and the same verdict per shape
under burst and steady.

    python benchmarks/figures/regimes_side_by_side.py ROOT [ROOT...]
    python benchmarks/figures/regimes_side_by_side.py --aa AA_ROOT

Reads each root's report.json (rebuild it with ``abbench summary ROOT`` if it is missing).  Exit 1 when the A/A
check fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_abbench.report.model import REPORT_JSON, OpReport, read_report

DIRECTIONS = ("faster", "slower")


def _ci(ci: tuple[float, float] | None) -> str:
    return "-" if ci is None else f"[{ci[0]:+.1f} ~ {ci[1]:+.1f}]"


def _gpu(o: OpReport, side: str) -> str:
    s = o.gpu_state.get(side) or {}
    clock, power = s.get("sm_clock_mhz"), s.get("power_w")
    cap = (s.get("reason_share") or {}).get("sw_power_cap", 0.0)
    return f"{'-' if clock is None else f'{clock:.0f}'} MHz {'-' if power is None else f'{power:.0f}'} W cap {cap:.0%}"


def side_by_side(root: Path) -> None:
    report = read_report(root / REPORT_JSON)
    print(f"# {root} (regime {report.setup.get('regime', 'unknown')}, device {report.setup.get('device')})")
    by_op: dict[str, dict[str, OpReport]] = {}
    for o in report.ops:
        by_op.setdefault(o.op, {})[o.regime or "-"] = o
    for op, regimes in by_op.items():
        print(f"== {op}")
        for regime, o in regimes.items():
            if o.state != "verdict":
                print(f"   {regime:<7} {o.state}: {o.reason}")
                continue
            energy = ("" if o.energy_geomean_pct is None else
                      f"; energy/call {o.energy_geomean_pct:+.1f}% {_ci(o.energy_geomean_ci_pct)}")
            print(f"   {regime:<7} geomean {o.geomean_pct:+.1f}% {_ci(o.geomean_ci_pct)}; A {_gpu(o, 'A')}, "
                  f"B {_gpu(o, 'B')}{energy}")
        note = next((o.regimes_note for o in regimes.values() if o.regimes_note), "")
        if note:
            print(f"   {note}")
        names = list(dict.fromkeys(s.shape for o in regimes.values() for s in o.shapes))
        width = max([len(n) for n in names] + [5])
        print(f"   {'shape':<{width}}  " + "  ".join(f"{r:>38}" for r in regimes))
        for name in names:
            cells = []
            for o in regimes.values():
                s = next((s for s in o.shapes if s.shape == name), None)
                cells.append("-" if s is None else
                             f"{s.delta_pct:+.1f}% {_ci(s.ci_pct)} {s.verdict}" + (f" [{','.join(s.flags)}]"
                                                                                   if s.flags else ""))
            print(f"   {name:<{width}}  " + "  ".join(f"{c:>38}" for c in cells))


def aa_check(root: Path) -> bool:
    """No direction in either regime, and each shape's verdict the same under burst and steady."""
    report = read_report(root / REPORT_JSON)
    verdicts: dict[tuple[str, str], dict[str, str]] = {}
    false = 0
    for o in report.ops:
        for s in o.shapes:
            verdicts.setdefault((o.op, s.shape), {})[o.regime or "-"] = s.verdict
            false += s.verdict in DIRECTIONS
    differ = {key: v for key, v in verdicts.items() if len(set(v.values())) > 1}
    both = sum(1 for v in verdicts.values() if len(v) > 1)  # one regime run (--ab-regime steady): nothing to compare
    compared = (f"{len(differ)} of {both} shapes with another verdict under burst than under steady" if both
                else "one regime only: no burst/steady comparison")
    print(f"# A/A {root}: {false} false direction(s) over {sum(len(v) for v in verdicts.values())} shape-regimes; "
          f"{compared}")
    for (op, shape), v in differ.items():
        print(f"   {op}[{shape}]: " + ", ".join(f"{r} {verdict}" for r, verdict in v.items()))
    return false == 0 and not any(set(v.values()) & set(DIRECTIONS) for v in differ.values())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--aa", action="store_true", help="the roots are A/A runs: check them")
    args = parser.parse_args(argv)
    ok = True
    for root in args.roots:
        side_by_side(root)
        if args.aa:
            ok = aa_check(root) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
