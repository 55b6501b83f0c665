"""Which kernel of an op moved: the kernels one call launches on each side, matched across the sides.

A cell's profiling pass (``child/kernelprofile.py``, untimed, after the timed windows) lists the kernels one call of
each shape launches, in launch order, with their device time per call.  Here the two sides' lists are matched:

1. by name and occurrence: the second launch of ``_layer_norm_bwd`` on side A with the second on side B (a kernel
   launched several times per call is matched launch by launch);
2. what is left, by launch order among the leftovers and the same grid: a kernel renamed by the switch (another
   cuBLAS kernel for the same GEMM, a Triton kernel's specialization suffix);
3. the rest is ``added`` (side B only) or ``missing`` (side A only), and said so.

Each row has both sides' time per call, its share of the op's kernel time on each side, and its own delta where both
sides have it.  The split's sum is checked against the cells' own time per call: the gap is what the profiler saw
outside the kernels (launch gaps, host work under a direct timer) or missed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pytest_abbench.core.fileio import CorruptFileError, numbered_jsonl
from pytest_abbench.core.kernellaunch import Launch, average_common
from pytest_abbench.core.layout import KERNELS_FILE

MATCHED, RENAMED, ADDED, MISSING = "matched", "renamed", "added", "missing"


@dataclass
class KernelRow:
    """One kernel of the op, on one side or both."""

    status: str  # MATCHED, RENAMED, ADDED, MISSING
    name_a: str | None
    name_b: str | None
    grid_a: tuple[int, ...] | None
    grid_b: tuple[int, ...] | None
    a_us: float | None
    b_us: float | None
    share_a_pct: float | None = None  # of side A's summed kernel time per call
    share_b_pct: float | None = None

    @property
    def delta_pct(self) -> float | None:
        if self.a_us is None or self.b_us is None or self.a_us <= 0:
            return None
        return (self.b_us / self.a_us - 1.0) * 100.0

    @property
    def label(self) -> str:
        if self.status == RENAMED:
            return f"{short_name(str(self.name_a))} -> {short_name(str(self.name_b))}"
        return short_name(str(self.name_a if self.name_a is not None else self.name_b))


def short_name(name: str, width: int = 90) -> str:
    """A kernel's name as a person reads it: a demangled C++ name without its return type, ``(anonymous
    namespace)::`` and argument list, at most ``width`` characters (report.json keeps the whole name)."""
    text = name.replace("(anonymous namespace)::", "").removeprefix("void ")
    depth = 0
    for i, ch in enumerate(text):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == "(" and depth == 0:
            text = text[:i]
            break
    return text if len(text) <= width else text[:width - 3] + "..."


@dataclass
class Split:
    """The kernels of one shape on both sides, and how their sums compare with the cells' time per call."""

    rows: list[KernelRow] = field(default_factory=list)
    sum_a_us: float = 0.0
    sum_b_us: float = 0.0
    gap_a_pct: float | None = None  # (kernel sum / the cell's time per call - 1): what the split leaves out
    gap_b_pct: float | None = None

    def unmatched(self) -> list[KernelRow]:
        return [r for r in self.rows if r.status in (ADDED, MISSING)]


def _occurrences(launches: Sequence[Launch]) -> list[tuple[str, int]]:
    """Each launch's (name, how many launches of that name came before it)."""
    seen: dict[str, int] = {}
    keys = []
    for launch in launches:
        keys.append((launch.name, seen.get(launch.name, 0)))
        seen[launch.name] = seen.get(launch.name, 0) + 1
    return keys


def match(a: Sequence[Launch], b: Sequence[Launch], a_call_us: float | None = None,
          b_call_us: float | None = None) -> Split:
    """Match side A's launches of one call with side B's; ``*_call_us``: the cells' own time per call."""
    b_index = {key: i for i, key in enumerate(_occurrences(b))}
    paired_b: set[int] = set()
    rows_at: list[tuple[float, KernelRow]] = []  # (launch position, row): rows in launch order
    left_a: list[int] = []
    for i, key in enumerate(_occurrences(a)):
        j = b_index.get(key)
        if j is None:
            left_a.append(i)
            continue
        paired_b.add(j)
        rows_at.append((i, KernelRow(MATCHED, a[i].name, b[j].name, a[i].grid, b[j].grid, a[i].us, b[j].us)))
    left_b = [j for j in range(len(b)) if j not in paired_b]
    for i in left_a:
        j = next((j for j in left_b if b[j].grid == a[i].grid), None)
        if j is None:
            rows_at.append((i, KernelRow(MISSING, a[i].name, None, a[i].grid, None, a[i].us, None)))
            continue
        left_b.remove(j)
        rows_at.append((i, KernelRow(RENAMED, a[i].name, b[j].name, a[i].grid, b[j].grid, a[i].us, b[j].us)))
    for j in left_b:
        rows_at.append((j + 0.5, KernelRow(ADDED, None, b[j].name, None, b[j].grid, None, b[j].us)))
    split = Split(rows=[row for _, row in sorted(rows_at, key=lambda item: item[0])])
    split.sum_a_us = sum(launch.us for launch in a)
    split.sum_b_us = sum(launch.us for launch in b)
    for row in split.rows:
        row.share_a_pct = _share(row.a_us, split.sum_a_us)
        row.share_b_pct = _share(row.b_us, split.sum_b_us)
    split.gap_a_pct = _gap(split.sum_a_us, a_call_us)
    split.gap_b_pct = _gap(split.sum_b_us, b_call_us)
    return split


def _share(us: float | None, total: float) -> float | None:
    return us / total * 100.0 if us is not None and total > 0 else None


def _gap(kernel_sum_us: float, call_us: float | None) -> float | None:
    return (kernel_sum_us / call_us - 1.0) * 100.0 if call_us and kernel_sum_us > 0 else None


def render(split: Split, shape: str) -> list[str]:
    """The split as report lines: one per kernel, then the sums against the cells' time per call."""
    if not split.rows:
        return [f"kernels of {shape}: the profiling pass saw no kernel launch on either side"]
    lines = [f"kernels of {shape} (one call, launch order; shares of each side's kernel time):"]
    for row in split.rows:
        a = f"{row.a_us:.1f} us ({row.share_a_pct:.0f}%)" if row.a_us is not None and row.share_a_pct is not None \
            else "-"
        b = f"{row.b_us:.1f} us ({row.share_b_pct:.0f}%)" if row.b_us is not None and row.share_b_pct is not None \
            else "-"
        delta = f"{row.delta_pct:+.1f}%" if row.delta_pct is not None else row.status
        tag = "" if row.status == MATCHED else f" [{row.status}]"
        lines.append(f"  {row.label}{tag}: A {a}, B {b}, {delta}")
    gaps = [f"side {side} {gap:+.1f}%" for side, gap in (("A", split.gap_a_pct), ("B", split.gap_b_pct))
            if gap is not None]
    lines.append(f"  kernel sum A {split.sum_a_us:.1f} us, B {split.sum_b_us:.1f} us"
                 + (f"; against the cells' time per call: {', '.join(gaps)}" if gaps else ""))
    return lines


def _side_launches(cell_dirs: Sequence[Path], notes: list[str]) -> dict[str, list[Launch]]:
    """Shape -> one call's launches on one side, averaged position by position over the rounds that launched the
    most common sequence of kernel names; a record that cannot be read is named in ``notes`` and left out."""
    rounds: dict[str, list[list[Launch]]] = {}
    for folder in cell_dirs:
        path = folder / KERNELS_FILE
        if not path.is_file():
            continue
        try:
            for number, record in numbered_jsonl(path):
                where = f"{path}:{number}"
                launches = [Launch.from_json(k, where) for k in record.get("kernels", [])]
                rounds.setdefault(str(record.get("shape")), []).append(launches)
        except (CorruptFileError, ValueError) as exc:
            notes.append(f"kernel split: {exc}")
    return {shape: average_common(lists)[0] for shape, lists in rounds.items()}


def op_splits(a_dirs: Sequence[Path], b_dirs: Sequence[Path], call_ms: dict[str, tuple[float, float]]
              ) -> tuple[dict[str, Any], list[str]]:
    """Each shape's split (``match``) as report.json keeps it, from the sides' cells' profiling passes, checked
    against ``call_ms`` (shape -> the sides' time per call); and notes on what could not be read."""
    notes: list[str] = []
    a, b = _side_launches(a_dirs, notes), _side_launches(b_dirs, notes)
    out: dict[str, Any] = {}
    for shape in [s for s in a if s in b]:
        a_ms, b_ms = call_ms.get(shape, (0.0, 0.0))
        out[shape] = asdict(match(a[shape], b[shape], a_ms * 1e3 or None, b_ms * 1e3 or None))
    one_side = sorted(set(a) ^ set(b))
    if one_side:
        notes.append(f"kernel split: only one side profiled {', '.join(one_side)}")
    return out, notes


def split_from_json(data: dict[str, Any]) -> Split:
    rows = [KernelRow(**{**row, "grid_a": _grid(row.get("grid_a")), "grid_b": _grid(row.get("grid_b"))})
            for row in data.get("rows", [])]
    return Split(rows=rows, sum_a_us=data.get("sum_a_us", 0.0), sum_b_us=data.get("sum_b_us", 0.0),
                 gap_a_pct=data.get("gap_a_pct"), gap_b_pct=data.get("gap_b_pct"))


def _grid(value: Any) -> tuple[int, ...] | None:
    return tuple(value) if value is not None else None


def report_lines(splits: dict[str, Any]) -> list[str]:
    """An op's kernel splits as report lines (``render``), shape by shape."""
    return [line for shape, data in splits.items() for line in render(split_from_json(data), shape)]


def movers(splits: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Per shape, the kernel that moved most: (shape, kernel, its delta or ``added``/``missing``); a kernel on one
    side only counts as the largest move."""
    out = []
    for shape, data in splits.items():
        rows = split_from_json(data).rows
        if not rows:
            continue
        one_sided = [r for r in rows if r.delta_pct is None]
        row = one_sided[0] if one_sided else max(rows, key=lambda r: abs(r.delta_pct or 0.0))
        out.append((shape, row.label, f"{row.delta_pct:+.1f}%" if row.delta_pct is not None else row.status))
    return out
