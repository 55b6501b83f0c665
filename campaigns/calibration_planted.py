"""Calibration, planted effect: side B copies ``extra`` more data than A, a slowdown of known size.

Both sides allocate the same buffers and run the same kernel; side B's grid
covers ``n * (1 + extra)`` elements instead of ``n``.  The true slowdown is
measured independently, in one process with A and B interleaved
(``benchmarks/planted_truth.py``).  The code is identical on both sides, so
the IR gate must be overridden::

    pytest campaigns/calibration_planted.py --ab-rounds 6 --ab-allow-no-ir-diff
"""

from __future__ import annotations

import os

from pytest_abbench import Case, Op, Shape, Switch

PLANTED_ENV = "ABBENCH_PLANTED"


def planted_elements(shape: Shape, planted: bool) -> int:
    """How many elements this side copies: ``n``, or ``n * (1 + extra)`` with the effect planted.

    Rounded to a multiple of 1024 so that both sides' element counts keep
    Triton's divisible-by-16 specialization: otherwise B's kernel would be
    compiled differently (unvectorized masks) and the effect would not be
    the planted one.
    """
    work = shape["n"] * (1 + shape["extra"]) if planted else shape["n"]
    return -(-int(work) // 1024) * 1024


def build(shape: Shape, device: str) -> Case:
    import torch

    from _kernels.copy import copy_prefix

    total = planted_elements(shape, planted=True)
    work = planted_elements(shape, planted=os.environ.get(PLANTED_ENV) == "1")
    src = torch.arange(total, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    n = int(shape["n"])
    return Case(run=lambda: copy_prefix(src, dst, work)[:n], expected=lambda: src[:n])


OPS = [
    Op("planted", build=build, shapes={
        "smoke": [{"n": 2048, "extra": 0.5}],
        "core": [{"n": 1 << p, "extra": e} for e in (0.02, 0.05) for p in (24, 26, 27)],
    }),
]

SWITCH = Switch(env_b={PLANTED_ENV: "1"})
