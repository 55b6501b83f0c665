"""Progress while a campaign runs: after each round, rounds done of planned, elapsed time and time left.

Campaigns run for hours on real shape sets.  A round is done when every cell
of it the session selected has reported (run, failed or skipped).  The time
left is the sum, over the cells left, of what a cell of that op costs: ops
differ (a FlagGems mm cell took 25 s where its layer norm took 7), and an op
the IR gate skips from now on costs nothing.  Round 1 compiles every kernel
(and precompiles, on a GPU) and can take ten times as long as a round that
loads them from the cache, so an op's cost is the mean of its cells since
round 1 where it has some, else of its round-1 cells without the seconds
they reported compiling and tuning (``report.cost``; round 1 side A tunes, and
side B tunes the keys only it has): the line then says the estimate is rough.
The sum is shared among the workers and scaled by the session's wall time per
second of cell time (pytest and the plugin between cells).

Under ``--ab-rounds auto`` an op's rounds after the first look (``auto_min``)
run only while a shape is unsettled: the line gives the time for the rounds
every op runs, and, apart, the most it can take if ops need every round.  An op
auto rounds stopped (its cells skipped as settled or over budget) costs nothing
from then on, as a gated op does.  A round whose every cell was skipped so
(a 10-round plan whose ops settled at round 3) prints no line of its own; the
last round's line counts it.
"""

from __future__ import annotations

import time
from typing import Collection, Iterable

from pytest_abbench.core.layout import CellKey


# A cell's cost before any of it ran, measured on the H200 under steady (docs/explanation/cost.md): a shape's
# settling, its ten 50 ms windows and its first call took about 1.5 s; a cell's start from a fork server about 2 s.
# Round 1's compiling and tuning come on top; after round 1 the progress line measures instead of assuming.
STEADY_SHAPE_S = 1.5
CELL_START_S = 2.0


def estimate_before_round_1(shapes: Iterable[tuple[CellKey, int]], auto_min: int | None, workers: int) -> str:
    """The line printed before round 1 on a GPU under steady: what the planned cells (each with its shape count)
    should take, for the rounds every op runs and, under auto rounds, at the cap."""
    sure = most = 0.0
    for key, count in shapes:
        cost = CELL_START_S + count * STEADY_SHAPE_S
        most += cost
        if auto_min is None or key.round <= auto_min:
            sure += cost
    workers = max(1, workers)
    basis = (f"(from about {STEADY_SHAPE_S:g} s per shape and {CELL_START_S:g} s per cell under steady, as measured "
             "on the H200; round 1's compiling and tuning come on top)")
    if auto_min is None or most == sure:
        return f"abbench: estimate before round 1: about {duration(sure / workers)} {basis}"
    return (f"abbench: estimate before round 1: about {duration(sure / workers)} for the {auto_min} rounds every op "
            f"runs, at most {duration(most / workers)} if every op needs every round {basis}")


def duration(seconds: float) -> str:
    """``45s``, ``3m05s``, ``2h07m``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class RoundProgress:
    """The selected cells of a session, and one line each time a round's last cell reports."""

    def __init__(self, cells: Iterable[CellKey], rounds: int, started: float | None = None, workers: int = 1,
                 auto_min: int | None = None) -> None:
        self.expected = set(cells)
        self.rounds = rounds
        self.auto_min = auto_min  # --ab-rounds auto: the rounds every op runs; None: every planned round runs
        self.started = time.monotonic() if started is None else started
        self.workers = max(1, workers)  # cells running at once (xdist workers)
        self.done: set[CellKey] = set()
        self.rounds_done: set[int] = set()
        self.first_compile_s = 0.0  # compiling and tuning seconds of the cells done before the first round ended
        self.first_costs: dict[str, list[float]] = {}  # op -> its cells' seconds before that, without those
        self.later_costs: dict[str, list[float]] = {}  # op -> its cells' seconds since
        self.cells_s = 0.0  # the seconds of every cell with a known cost
        self.live_rounds: set[int] = set()  # rounds with a cell of an op not skipped (gated, stopped) when it ended

    def cell_done(self, key: CellKey, now: float | None = None, elapsed_s: float | None = None,
                  compile_s: float = 0.0, gated: Collection[str] = ()) -> str | None:
        """Record ``key`` as done; the progress line when that finished its round, else None.

        ``elapsed_s``: the cell's seconds (None: not run by this session, a resumed cell; its cost says nothing);
        ``compile_s``: how many of them compiled or tuned.  ``gated``: ops skipped from now on (the IR gate's,
        and those auto rounds stopped)."""
        if key not in self.expected or key in self.done:
            return None
        self.done.add(key)
        if key.op not in gated:
            self.live_rounds.add(key.round)
        if elapsed_s is not None:
            self.cells_s += elapsed_s
            if self.rounds_done:  # after the first round: its cells load what round 1 compiled
                self.later_costs.setdefault(key.op, []).append(elapsed_s)
            else:
                self.first_compile_s += compile_s
                self.first_costs.setdefault(key.op, []).append(max(0.0, elapsed_s - compile_s))
        round_cells = {k for k in self.expected if k.round == key.round}
        if not round_cells <= self.done:
            return None
        self.rounds_done.add(key.round)
        last = len(self.done) == len(self.expected)
        if key.round not in self.live_rounds and not last:
            return None  # every cell skipped at once (the IR gate, auto rounds): the session's last line says it
        now = time.monotonic() if now is None else now
        elapsed = now - self.started
        eta = "" if last else self.eta([k for k in self.expected - self.done if k.op not in gated], elapsed)
        return (f"abbench: round {key.round} done, {len(self.rounds_done)} of {len({k.round for k in self.expected})} "
                f"rounds ({len(self.done)} of {len(self.expected)} cells), {duration(elapsed)} elapsed{eta}")

    def eta(self, left: Collection[CellKey], elapsed: float) -> str:
        """The line's words for the time the cells ``left`` take: under auto rounds, what the rounds every op runs
        take, then the most the rest can."""
        seconds, rough = self.time_left(left, elapsed)
        sure = [k for k in left if self.auto_min is None or k.round <= self.auto_min]
        if len(sure) == len(left):
            return f", about {duration(seconds)} left{rough}"
        most = f"up to {duration(seconds)}{' left' if not sure else ''} if ops need all {self.rounds} rounds " \
               "(--ab-rounds auto)"
        if not sure:
            return f", {most}{rough}"
        sure_s, sure_rough = self.time_left(sure, elapsed)
        return f", about {duration(sure_s)} left{sure_rough}, {most}"

    def time_left(self, left: Collection[CellKey], elapsed: float) -> tuple[float, str]:
        """Seconds for the cells ``left``, and the words that say when that rests on round 1's cells."""
        known = [c for costs in (*self.later_costs.values(), *self.first_costs.values()) for c in costs]
        if not known:  # no cell's cost is known (every one resumed): the wall time's pace per cell
            return elapsed / len(self.done) * len(left), " (rough: from the wall time per cell)"
        from_first = False
        total = 0.0
        for key in left:
            costs = self.later_costs.get(key.op)
            if not costs:
                costs = self.first_costs.get(key.op) or known
                from_first = True
            total += sum(costs) / len(costs)
        between_cells = max(1.0, elapsed * self.workers / self.cells_s) if self.cells_s > 0 else 1.0
        rough = ""
        if from_first:
            rough = f" (rough: round 1 without its {duration(self.first_compile_s)} of compiling and tuning)" \
                if self.first_compile_s else " (rough: from round 1)"
        return total / self.workers * between_cells, rough
