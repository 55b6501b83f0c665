"""Layout shift: each cell moves where its buffers land, so a layout effect becomes noise the rounds can see.

Every process of a campaign allocates its inputs in the same order and sizes,
so without a shift each cell lays them out the same way: an effect of that
layout (alignment against cache sets, DRAM channels, pages) repeats in every
round, and no number of rounds averages it out.  Before each shape's build the
cell allocates two pads whose sizes derive from (op, round, role, shape): one
from PyTorch's small-block pool and one from its large pool (a fresh segment of
a pseudo-random size), and holds them until the shape is timed.  Buffers
allocated next then start at different offsets and in different segments
across rounds and sides.  The sizes are recorded per shape in results.jsonl.
"""

from __future__ import annotations

import hashlib
from typing import Any

SMALL_UNIT = 512  # the caching allocator's rounding: smaller steps would not move anything
SMALL_STEPS = 2047  # < 1 MiB: served from the small-block pool
LARGE_UNIT = 2 << 20  # a large segment's granularity
LARGE_STEPS = 32  # up to 64 MiB: a fresh segment ahead of the large inputs


def pad_sizes(op: str, round_no: int, role: str, shape_index: int) -> tuple[int, int]:
    """(small, large) pad bytes for one shape of one cell: stable for a cell, different between cells."""
    digest = hashlib.sha256(f"{op}|{round_no}|{role}|{shape_index}".encode()).digest()
    small = SMALL_UNIT * (int.from_bytes(digest[:4], "little") % (SMALL_STEPS + 1))
    large_steps = int.from_bytes(digest[4:8], "little") % (LARGE_STEPS + 1)
    # An odd number of small units on top keeps the large pad from landing on a segment boundary.
    large = LARGE_UNIT * large_steps + SMALL_UNIT * (1 + 2 * (int.from_bytes(digest[8:12], "little") % 1024))
    return small, large


def hold_pads(device: str, sizes: tuple[int, int]) -> list[Any]:
    """Allocate the pads on ``device``; the caller keeps the list alive while the shape is built and timed."""
    import torch

    return [torch.empty(n, dtype=torch.uint8, device=device) for n in sizes if n > 0]
