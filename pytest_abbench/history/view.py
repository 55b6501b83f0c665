"""``abbench history``'s tables: the runs, and an op's delta with its interval across commits."""

from __future__ import annotations

import time
from dataclasses import dataclass

from pytest_abbench.history.store import RunRecord, ShapeRecord


@dataclass
class Point:
    """One run's result for one shape, with the run it came from."""

    run: RunRecord
    shape: ShapeRecord

    @property
    def commit(self) -> str:
        return run_commit(self.run)

    @property
    def when(self) -> float:
        """Commit time where known, else the time it was recorded."""
        tree = self.run.subject_tree
        return float(tree.commit_time) if tree is not None and tree.commit_time is not None else self.run.recorded_at

    def order(self) -> tuple[float, int, int]:
        """The series' order: commit time, then the commit's depth (commits made within one second), then the run."""
        tree = self.run.subject_tree
        return self.when, (tree.depth or 0) if tree is not None else 0, self.run.id or 0


def run_commit(run: RunRecord) -> str:
    """The commit a run is filed under, shortened, ``*`` when its tree was dirty; ``-`` outside git."""
    tree = run.subject_tree
    if tree is None or tree.commit is None:
        return "-"
    return tree.commit[:12] + ("*" if tree.dirty else "")


def stamp(seconds: float) -> str:
    """A time as the history shows it: local, to the minute."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


def verdict_counts(run: RunRecord) -> str:
    """``same 1, slower 1``: the run's shapes per verdict, or ``no verdict``."""
    counts: dict[str, int] = {}
    for s in run.shapes:
        counts[s.verdict] = counts.get(s.verdict, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no verdict"


def _ci(ci: tuple[float, float] | None) -> str:
    return f"[{ci[0]:+.1f} ~ {ci[1]:+.1f}]" if ci else "-"


def run_lines(runs: list[RunRecord]) -> list[str]:
    """One line per run, oldest first: id, when, commit (``*``: dirty), exit code, verdict counts, label, root."""
    if not runs:
        return ["no runs recorded"]
    lines = [f"{'run':>4}  {'recorded':16}  {'commit':13}  {'exit':>4}  {'verdicts':28}  label / root"]
    for run in runs:
        verdicts, commit = verdict_counts(run), run_commit(run)
        where = f"{run.label}: {run.root}" if run.label else run.root
        exit_code = "-" if run.exit_code is None else str(run.exit_code)
        lines.append(f"{run.id:>4}  {stamp(run.recorded_at):16}  {commit:13}  {exit_code:>4}  {verdicts:28}  "
                     f"{where}")
    return lines


def series(runs: list[RunRecord], op: str, shape: str | None = None) -> dict[str, list[Point]]:
    """Shape -> its points across runs for ``op`` (one shape when given), ordered by commit time.

    A burst delta and a steady one are different quantities: where the op was recorded under several timing
    regimes (--ab-regime), each shape has one series per regime, keyed ``shape (regime)``.
    """
    chosen = [(run, s) for run in runs for s in run.shapes if s.op == op and (shape is None or s.shape == shape)]
    several = len({s.regime for _, s in chosen}) > 1
    found: dict[str, list[Point]] = {}
    for run, s in chosen:
        key = f"{s.shape} ({s.regime or 'regime not recorded'})" if several else s.shape
        found.setdefault(key, []).append(Point(run, s))
    for points in found.values():
        points.sort(key=Point.order)
    return found


def verdict_change(before: Point | None, after: Point) -> str:
    """``same -> slower`` where ``after``'s verdict differs from that of the point before it in the series, else ""."""
    if before is None or before.shape.verdict == after.shape.verdict:
        return ""
    return f"{before.shape.verdict} -> {after.shape.verdict}"


def series_lines(op: str, found: dict[str, list[Point]]) -> list[str]:
    """The table of each shape's delta across commits; ``<- verdict changed`` where it differs from the row before."""
    lines: list[str] = []
    for shape, points in found.items():
        lines.append(f"== {op}[{shape}]: {len(points)} run(s), ordered by commit time")
        lines.append(f"   {'run':>4}  {'commit':13}  {'committed':16}  {'delta':>9}  {'95% CI':22}  {'verdict':13}  "
                     "label / switch")
        previous: Point | None = None
        for p in points:
            s = p.shape
            change = verdict_change(previous, p)
            mark = f"  <- verdict changed: {change} (after {previous.commit})" if change and previous else ""
            lines.append(f"   {p.run.id:>4}  {p.commit:13}  {stamp(p.when):16}  {s.delta_pct:>+8.1f}%  "
                         f"{_ci(s.ci_pct):22}  {s.verdict:13}  {(p.run.label or p.run.switch)[:48]}{mark}")
            previous = p
    return lines
