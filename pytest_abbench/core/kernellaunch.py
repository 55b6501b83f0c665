"""A kernel launch as the kernel split records it (``kernels.jsonl``): written by the cell's profiling pass
(``child/kernelprofile.py``), read by the report (``report/kernelsplit.py``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class Launch:
    """One kernel launch of one call: its name, grid (None where the profiler did not say) and device time."""

    name: str
    grid: tuple[int, ...] | None
    us: float

    @staticmethod
    def from_json(data: Any, where: str) -> "Launch":
        try:
            grid = data.get("grid")
            return Launch(str(data["name"]), tuple(int(g) for g in grid) if grid is not None else None,
                          float(data["us"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{where}: a kernel launch needs name, us and an optional grid: {exc!r}") from None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "grid": list(self.grid) if self.grid is not None else None, "us": self.us}


def average_common(sequences: Sequence[Sequence[Launch]]) -> tuple[list[Launch], int]:
    """Several calls' (or rounds') launches as one: averaged position by position over the sequences that launched
    the most common names in the most common order; and how many those were (at least one sequence)."""
    names, count = Counter(tuple(k.name for k in seq) for seq in sequences).most_common(1)[0]
    kept = [seq for seq in sequences if tuple(k.name for k in seq) == names]
    return [Launch(k.name, k.grid, sum(seq[i].us for seq in kept) / len(kept)) for i, k in enumerate(kept[0])], count
