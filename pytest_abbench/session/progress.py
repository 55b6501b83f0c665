"""Progress while a campaign runs: after each round, rounds done of planned, elapsed time and time left.

Campaigns run for hours on real shape sets.  A round is done when every cell
of it the session selected has reported (run, failed or skipped).  The
estimate is the time per finished cell times the cells still to come, counted
from the end of the first round once a later cell has finished: round 1
compiles every kernel (and precompiles, on a GPU) and can take ten times as
long as a round that loads them from the cache.
"""

from __future__ import annotations

import time
from typing import Iterable

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

    def __init__(self, cells: Iterable[CellKey], rounds: int, started: float | None = None) -> None:
        self.expected = set(cells)
        self.rounds = rounds
        self.started = time.monotonic() if started is None else started
        self.done: set[CellKey] = set()
        self.rounds_done: set[int] = set()
        self.after_first: tuple[float, int] | None = None  # (when, cells done) as the first round completed

    def cell_done(self, key: CellKey, now: float | None = None) -> str | None:
        """Record ``key`` as done; the progress line when that finished its round, else None."""
        if key not in self.expected or key in self.done:
            return None
        self.done.add(key)
        round_cells = {k for k in self.expected if k.round == key.round}
        if not round_cells <= self.done:
            return None
        self.rounds_done.add(key.round)
        now = time.monotonic() if now is None else now
        elapsed = now - self.started
        left = len(self.expected) - len(self.done)
        since, cells_then = self.after_first or (self.started, 0)
        per_cell = (now - since) / (len(self.done) - cells_then)
        if self.after_first is None:
            self.after_first = (now, len(self.done))
        eta = f", about {duration(per_cell * left)} left" if left else ""
        return (f"abbench: round {key.round} done, {len(self.rounds_done)} of {len({k.round for k in self.expected})} "
                f"rounds ({len(self.done)} of {len(self.expected)} cells), {duration(elapsed)} elapsed{eta}")
