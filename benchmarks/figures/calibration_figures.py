"""Figures of the calibration campaigns from their report.json files (and the planted ground truth).

    python benchmarks/figures/calibration_figures.py --aa ROOT_AA [--aa ROOT_AA_DIRECT] --planted ROOT_P --truth truth.json

A/A: shapes called faster/slower when nothing changed (false verdicts), the
fraction called 'same'.  Planted: detection rate (called 'slower'), whether
each interval contains the ground truth.  Both: after how many rounds each
shape's verdict settled (the verdict with the first k rounds equals the final
one for every k from there on), recomputed with the report's own rules.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pytest_abbench.core.identity import read_identity  # noqa: E402
from pytest_abbench.report import REPORT_JSON  # noqa: E402
from pytest_abbench.report.stats import judge, t_test_p  # noqa: E402


def settled_after(per_round_pct: list[float], margin_pct: float) -> tuple[int, list[str]]:
    """(rounds after which the verdict stopped changing, verdict at k = 2..N).

    The shape is judged alone at each k (its own t-test, no correction across the op's shapes).
    """
    logs = [math.log1p(p / 100.0) for p in per_round_pct]
    verdicts = [judge(logs[:k], t_test_p(logs[:k]), margin_pct).verdict for k in range(2, len(logs) + 1)]
    settle = len(logs)
    for k in range(len(verdicts) - 1, -1, -1):
        if verdicts[k] != verdicts[-1]:
            break
        settle = k + 2
    return settle, verdicts


def shapes_of(root: Path, op: str) -> tuple[dict, list[dict]]:
    data = json.loads((root / REPORT_JSON).read_text())
    shapes = [s for o in data["ops"] if o["op"] == op for s in o["shapes"]]
    return data, shapes


def aa_table(root: Path) -> list[str]:
    data, shapes = shapes_of(root, "aa")
    timer = "?"
    ident = next(root.glob("r1_A/*/run_identity.json"), None)
    if ident:
        timer = read_identity(ident)["timer"]
    false = [s for s in shapes if s["verdict"] in ("faster", "slower")]
    same = [s for s in shapes if s["verdict"] == "same"]
    lines = [f"A/A ({root.name}, timer {timer}, {shapes[0]['rounds'] if shapes else 0} rounds): "
             f"{len(false)} false verdicts of {len(shapes)} shapes; {len(same)}/{len(shapes)} called same "
             f"(margin {data['margin_pct']:g}%)",
             f"  {'shape':<34} {'A ms':>9} {'delta med':>9} {'95% CI':>17} {'verdict':<12} settled  verdicts k=2..N"]
    for s in shapes:
        settle, path = settled_after(s["per_round_pct"], s["margin_pct"])
        lines.append(f"  {s['shape'][:34]:<34} {s['a_ms']:>9.4g} {s['delta_pct']:>+8.2f}% "
                     f"{s['ci_pct'][0]:>+7.2f}~{s['ci_pct'][1]:>+6.2f}% {s['verdict']:<12} r{settle:<6} {' '.join(path)}")
    return lines


def planted_table(root: Path, truth_path: Path) -> list[str]:
    _, shapes = shapes_of(root, "planted")
    truth = {t["shape"]: t for t in json.loads(truth_path.read_text())}
    lines = [f"planted ({root.name}) against {truth_path.name}:",
             f"  {'shape':<24} {'A ms':>9} {'truth':>8} {'truth CI':>15} {'campaign':>9} {'campaign CI':>15} "
             f"{'verdict':<12} {'truth in CI':<11} {'CIs overlap':<11} settled"]
    by_extra: dict[str, list[tuple[bool, bool]]] = {}
    for s in shapes:
        t = truth.get(s["shape"])
        extra = s["shape"].split("extra=")[-1]
        settle, _ = settled_after(s["per_round_pct"], s["margin_pct"])
        inside = t is not None and s["ci_pct"][0] <= t["truth_pct"] <= s["ci_pct"][1]
        overlap = t is not None and s["ci_pct"][0] <= t["truth_ci_pct"][1] and t["truth_ci_pct"][0] <= s["ci_pct"][1]
        by_extra.setdefault(extra, []).append((s["verdict"] == "slower", inside))
        tt = f"{t['truth_pct']:+.2f}%" if t else "-"
        tci = f"{t['truth_ci_pct'][0]:+.2f}~{t['truth_ci_pct'][1]:+.2f}" if t else "-"
        lines.append(f"  {s['shape']:<24} {s['a_ms']:>9.4g} {tt:>8} {tci:>15} {s['delta_pct']:>+8.2f}% "
                     f"{s['ci_pct'][0]:>+7.2f}~{s['ci_pct'][1]:>+6.2f} {s['verdict']:<12} {'yes' if inside else 'NO':<11} "
                     f"{'yes' if overlap else 'NO':<11} r{settle}")
    for extra, hits in sorted(by_extra.items()):
        lines.append(f"  planted +{float(extra) * 100:g}%: detected (slower) {sum(h for h, _ in hits)}/{len(hits)}, "
                     f"interval contains the truth {sum(i for _, i in hits)}/{len(hits)}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--aa", action="append", default=[], type=Path)
    parser.add_argument("--planted", action="append", default=[], type=Path)
    parser.add_argument("--truth", action="append", default=[], type=Path)
    args = parser.parse_args()
    lines: list[str] = []
    for root in args.aa:
        lines += aa_table(root) + [""]
    for planted in args.planted:
        for truth in args.truth:
            lines += planted_table(planted, truth) + [""]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
