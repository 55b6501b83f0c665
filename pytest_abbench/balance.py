"""Which op an xdist worker takes next: the most expensive first (longest processing time first).

Every cell of an op runs on one worker, so an op is the unit of work.  Handing
out the longest ops first keeps one GPU from idling while another finishes a
big op that happened to be collected last.

An op's cost is an estimate of the time its cells still need:

- a resumed root that holds the op's measured round-1 cells (``status.tsv``
  ``elapsed_s``): their mean per cell, times the cells still to run;
- otherwise its shape count at the session's level, times the cells to run
  (rounds x roles when nothing is deselected or finished).  When some ops are
  timed and others are not, shapes are converted to seconds by the timed ops'
  median seconds per shape, so the two kinds compare.

An op whose shapes cannot be read here (a hand-written ``@pytest.mark.abbench``
test, whose scope does not name its op) costs the median cell of the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean, median
from typing import Callable, Iterable, Mapping, Sequence

from pytest_abbench.layout import ROLES, CellKey
from pytest_abbench.outcome import OK, CellOutcome


@dataclass(frozen=True)
class OpWork:
    """What the controller knows of one op (an xdist scope) before handing it out."""

    scope: str
    cells: int  # cells this session will run: collected, less those a resumed root already finished
    shapes: int | None  # shapes at the session's level; None when the op's campaign is unknown here
    round1_s: tuple[float, ...] = ()  # measured round-1 cell times of a resumed root


def op_work(scope: str, keys: Sequence[CellKey], shapes: int | None,
            finished: Callable[[CellKey], CellOutcome | None]) -> OpWork:
    """The op's work from its collected cells and ``finished`` (``CampaignRoot.finished``: None unless resumed)."""
    todo = [key for key in keys if finished(key) is None]
    # Every round-1 role the root holds, collected or not: -k may select only later rounds.
    round1 = tuple(outcome.elapsed_s for op in dict.fromkeys(key.op for key in keys) for role in ROLES
                   if (outcome := finished(CellKey(1, op, role))) is not None and outcome.status == OK)
    return OpWork(scope, len(todo), shapes, round1)


def op_costs(work: Iterable[OpWork]) -> dict[str, float]:
    """Estimated seconds (or shape-cells, when nothing was timed) each op still needs, by scope."""
    work = list(work)
    timed = {w.scope: mean(w.round1_s) for w in work if w.round1_s}
    per_shape = [timed[w.scope] / w.shapes for w in work if w.scope in timed and w.shapes]
    rate = median(per_shape) if per_shape else 1.0
    per_cell: dict[str, float] = {}
    for w in work:
        if w.scope in timed:
            per_cell[w.scope] = timed[w.scope]
        elif w.shapes is not None:
            per_cell[w.scope] = w.shapes * rate
    fallback = median(per_cell.values()) if per_cell else rate
    return {w.scope: w.cells * per_cell.get(w.scope, fallback) for w in work}


def order_ops(scopes: Sequence[str], costs: Mapping[str, float]) -> list[str]:
    """``scopes`` with the costed ones most expensive first; equal costs and uncosted scopes keep their place."""
    ranked = iter(sorted((s for s in scopes if s in costs), key=lambda s: -costs[s]))
    return [next(ranked) if s in costs else s for s in scopes]
