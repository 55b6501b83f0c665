"""``<root>/plots/<op>.png``: each round's delta as a dot, the interval as a bar, the A/A interval as a band.

Written only when matplotlib is installed (``pip install pytest-abbench[plot]``);
the report never depends on it.
"""

from __future__ import annotations

from pathlib import Path

from pytest_abbench.core.layout import RootLayout
from pytest_abbench.report.model import OpReport, Report

def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def caption(op: OpReport, report: Report) -> str:
    """What a plot's numbers hold under, drawn under it and kept in the PNG's Description: a plot copied out of
    its report must still say which switch, where and with which timer, and that off-GPU numbers are no GPU's."""
    setup = report.setup
    text = (f"switch (side B): {op.switch or setup.get('switch', 'unknown')}; device {setup.get('device', 'unknown')}; "
            f"backend {setup.get('backend', 'unknown')}; timer {setup.get('timer', 'unknown')}")
    if not report.gpu_timed:
        text += "\nNOT GPU TIMINGS: interpreter or wall-clock numbers say nothing about GPU speed"
    return text


def plot_op(op: OpReport, path: Path, note: str = "") -> None:
    """``op``'s plot at ``path``; ``note`` (its caption) is drawn under the axes and kept in the PNG's metadata."""
    # The object API without pyplot: no global figure state, no display backend, and no
    # pyplot import (half a second at session end).
    from matplotlib.figure import Figure

    shapes = op.shapes
    fig = Figure(figsize=(max(6.0, 0.45 * len(shapes) + 2), 4.5))
    ax = fig.subplots()
    for x, s in enumerate(shapes):
        if s.aa_ci_pct is not None:
            ax.fill_between([x - 0.4, x + 0.4], s.aa_ci_pct[0], s.aa_ci_pct[1], color="0.85", zorder=0,
                            label="A/A interval (95% CI)" if x == 0 else None)
        if s.ci_pct is not None:
            ax.plot([x, x], list(s.ci_pct), color="tab:blue", linewidth=3, alpha=0.6, zorder=1,
                    label="B/A 95% CI" if x == 0 else None)
        color = "tab:red" if s.sign_flip else "black"
        ax.scatter([x] * len(s.per_round_pct), s.per_round_pct, s=14, color=color, zorder=2,
                   label=("round delta (sign changed)" if s.sign_flip else "round delta") if x == 0 else None)
        if s.sign_flip:
            ax.annotate("sign flip", (x, max(s.per_round_pct)), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=7, color="tab:red")
    ax.axhline(0.0, color="0.4", linewidth=0.8)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([s.shape[:24] for s in shapes], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("B/A - 1 (%)")
    geo = f"{op.geomean_pct:+.1f}%" if op.geomean_pct is not None else "-"
    ax.set_title(f"{op.op}: geomean {geo}, {op.rounds_completed} rounds, {op.sign_flips} sign flips", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    if note:
        fig.text(0.01, 0.01, note, fontsize=6, color="tab:red" if "NOT GPU" in note else "0.3", va="bottom")
    fig.subplots_adjust(left=0.12, right=0.98, top=0.92, bottom=0.36)  # fixed margins: tight_layout costs 40 ms
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Description": note} if note else None)


def write_plots(root: Path, report: Report) -> list[Path]:
    """One PNG per op that has a verdict table; nothing (and no error) without matplotlib."""
    if not matplotlib_available():
        return []
    written = []
    for op in report.ops:
        if op.state == "verdict" and op.shapes:
            path = RootLayout(root).plots / f"{op.op}.png"
            plot_op(op, path, caption(op, report))
            written.append(path)
    return written
