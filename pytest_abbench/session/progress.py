"""Progress while a campaign runs: after each round, rounds done of planned, elapsed time and time left.

Campaigns run for hours on real shape sets.  A round is done when every cell
of it the session selected has reported (run, failed or skipped).  Round 1
compiles every kernel (and precompiles, on a GPU) and can take ten times as
long as a round that loads them from the cache, so its pace says little about
the rounds after it: after round 1 the estimate is round 1's wall time without
the compile seconds its cells reported (``report.cost``), shared among the
workers, and says it is rough; from round 2 on it is the pace of the cells
finished since round 1, which compile nothing.
"""

from __future__ import annotations

import time
from typing import Collection, Iterable

from pytest_abbench.core.layout import CellKey


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

    def __init__(self, cells: Iterable[CellKey], rounds: int, started: float | None = None, workers: int = 1) -> None:
        self.expected = set(cells)
        self.rounds = rounds
        self.started = time.monotonic() if started is None else started
        self.workers = max(1, workers)  # cells running at once (xdist workers): compile seconds overlap
        self.done: set[CellKey] = set()
        self.rounds_done: set[int] = set()
        self.after_first: tuple[float, int] | None = None  # (when, cells done) as the first round completed
        self.first_compile_s = 0.0  # compile seconds reported by the cells done before the first round completed

    def cell_done(self, key: CellKey, now: float | None = None, compile_s: float = 0.0,
                  gated: Collection[str] = ()) -> str | None:
        """Record ``key`` as done (``compile_s``: its compile seconds); the progress line when that finished its
        round, else None.  ``gated``: ops the IR gate skips from now on: their cells left cost nothing."""
        if key not in self.expected or key in self.done:
            return None
        self.done.add(key)
        if self.after_first is None:
            self.first_compile_s += compile_s
        round_cells = {k for k in self.expected if k.round == key.round}
        if not round_cells <= self.done:
            return None
        self.rounds_done.add(key.round)
        now = time.monotonic() if now is None else now
        elapsed = now - self.started
        left = len(self.expected) - len(self.done)
        to_run = sum(1 for k in self.expected - self.done if k.op not in gated)
        rough = ""
        if self.after_first is None:
            self.after_first = (now, len(self.done))
            # The later rounds load round 1's kernels: its pace without the compiling is theirs.
            compile_wall = min(self.first_compile_s / self.workers, elapsed)
            per_cell = (elapsed - compile_wall) / len(self.done)
            rough = f" (rough: round 1 without its {duration(self.first_compile_s)} of compile)" \
                if self.first_compile_s else " (rough: from round 1)"
        else:
            since, cells_then = self.after_first
            per_cell = (now - since) / (len(self.done) - cells_then)
        eta = f", about {duration(per_cell * to_run)} left{rough}" if left else ""
        return (f"abbench: round {key.round} done, {len(self.rounds_done)} of {len({k.round for k in self.expected})} "
                f"rounds ({len(self.done)} of {len(self.expected)} cells), {duration(elapsed)} elapsed{eta}")
