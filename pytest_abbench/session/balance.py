"""Which op an xdist worker takes next: the most expensive first (longest processing time first).

Every cell of an op runs on one worker, so an op is the unit of work.  Handing
out the longest ops first keeps one GPU from idling while another finishes a
big op that happened to be collected last.

An op's cost is an estimate of the seconds its cells still need.  Where an
earlier root of the campaign timed the op (the root being resumed, or
``--ab-costs-from ROOT``; ``OpTimes``), each cell this session runs costs:

- in round 1, that root's round-1 cell of the same role (else the mean of its
  round-1 cells): round 1 carries the compile and autotune;
- in a later round, the mean of that root's later-round cells (else of its
  round-1 cells), or nothing when that root's IR gate skipped the op's later
  rounds (``SWITCH_NO_IR_DIFF``): the gate skips them again for the same switch.

Cells a resumed root already finished cost nothing.  An op no earlier root
timed costs its shape count at the session's level per cell; when some ops are
timed and others are not, shapes are converted to seconds by the timed ops'
median round-1 seconds per shape, so the two kinds compare.  An op whose shapes
cannot be read here (a hand-written ``@pytest.mark.abbench`` test, whose scope
does not name its op) costs the median cell of the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean, median
from typing import Callable, Iterable, Mapping, Sequence

from pytest_abbench.core.layout import CellKey
from pytest_abbench.core.outcome import NO_IR_DIFF, OK, CellOutcome
from pytest_abbench.core.status import StatusFormatError, read_status


@dataclass(frozen=True)
class OpTimes:
    """One op's cells in an earlier root: the seconds of its ok cells, and whether the IR gate cut it to round 1."""

    round1_s: Mapping[str, float] = field(default_factory=dict)  # role -> seconds
    later_s: tuple[float, ...] = ()  # every ok cell of rounds 2 and on
    gated: bool = False

    @property
    def round1_cell_s(self) -> float:
        """A round-1 cell's mean seconds (the later rounds' when round 1 has none): the per-cell figure shapes are scaled by."""
        return mean(self.round1_s.values()) if self.round1_s else mean(self.later_s)

    def cell_s(self, key: CellKey, gate: bool) -> float:
        """Estimated seconds of ``key``; ``gate``: this session's IR gate may skip later rounds."""
        if key.round == 1:
            return self.round1_s.get(key.role, self.round1_cell_s)
        if self.gated and gate:
            return 0.0
        return mean(self.later_s) if self.later_s else self.round1_cell_s


def op_times(cells: Iterable[tuple[CellKey, str, float]]) -> dict[str, OpTimes]:
    """Per op, from each cell's (key, status, elapsed_s) in a root; the last entry of a key decides."""
    last = {key: (status, elapsed) for key, status, elapsed in cells}
    times: dict[str, OpTimes] = {}
    for op in dict.fromkeys(key.op for key in last):
        mine = {key: entry for key, entry in last.items() if key.op == op}
        round1 = {key.role: s for key, (status, s) in mine.items() if key.round == 1 and status == OK}
        later = tuple(s for key, (status, s) in mine.items() if key.round > 1 and status == OK)
        gated = any(key.round > 1 and status == NO_IR_DIFF for key, (status, _) in mine.items())
        if round1 or later:  # a gate decision without a timed cell says nothing of seconds
            times[op] = OpTimes(round1, later, gated)
    return times


def root_times(root: Path, on_bad_line: Callable[[StatusFormatError], None] | None = None) -> dict[str, OpTimes]:
    """``op_times`` of ``<root>/status.tsv`` (read as ``status.read_status`` reads it: a bad line raises unless handled)."""
    return op_times((CellKey(r.round, r.op, r.side), r.status, r.elapsed_s) for r in read_status(root, on_bad_line))


@dataclass(frozen=True)
class OpWork:
    """What the controller knows of one op (an xdist scope) before handing it out."""

    scope: str
    todo: tuple[CellKey, ...]  # cells this session will run: collected, less those a resumed root already finished
    shapes: int | None  # shapes at the session's level; None when the op's campaign is unknown here
    times: OpTimes | None = None  # the op in an earlier root; None when none timed it


def op_work(scope: str, keys: Sequence[CellKey], shapes: int | None,
            finished: Callable[[CellKey], CellOutcome | None], times: OpTimes | None = None) -> OpWork:
    """The op's work from its collected cells and ``finished`` (``CampaignRoot.finished``: None unless resumed)."""
    return OpWork(scope, tuple(key for key in keys if finished(key) is None), shapes, times)


def op_costs(work: Iterable[OpWork], gate: bool = True) -> dict[str, float]:
    """Estimated seconds (or shape-cells, when nothing was timed) each op still needs, by scope.

    ``gate``: the session's IR gate may skip later rounds (off with --ab-allow-no-ir-diff).
    """
    work = list(work)
    per_shape = [w.times.round1_cell_s / w.shapes for w in work if w.times is not None and w.shapes]
    rate = median(per_shape) if per_shape else 1.0
    per_cell: dict[str, float] = {}
    for w in work:
        if w.times is not None:
            per_cell[w.scope] = w.times.round1_cell_s
        elif w.shapes is not None:
            per_cell[w.scope] = w.shapes * rate
    fallback = median(per_cell.values()) if per_cell else rate
    return {w.scope: sum(w.times.cell_s(key, gate) for key in w.todo) if w.times is not None
            else len(w.todo) * per_cell.get(w.scope, fallback) for w in work}


def order_ops(scopes: Sequence[str], costs: Mapping[str, float]) -> list[str]:
    """``scopes`` with the costed ones most expensive first; equal costs and uncosted scopes keep their place."""
    ranked = iter(sorted((s for s in scopes if s in costs), key=lambda s: -costs[s]))
    return [next(ranked) if s in costs else s for s in scopes]
