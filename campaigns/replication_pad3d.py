"""replication_pad3d: 5-D replicate padding.  Switch: remove-layout-conversions pass skipped on side B.

Paddings come from a seeded generator, so both sides (and every round) see
the same shapes.
"""

from __future__ import annotations

import random

from pytest_abbench import Case, Op, Shape, Switch

from _kernels.switches import skip_remove_layout_conversions


def _level(seed: int, sizes: list[tuple[int, int, int, int, int]]) -> list[dict]:
    rng = random.Random(seed)
    shapes = []
    for n, c, d, h, w in sizes:
        pads = [rng.randint(0, 3) for _ in range(6)]
        shapes.append({"N": n, "C": c, "D": d, "H": h, "W": w, "pads": "-".join(map(str, pads))})
    return shapes


def build_pad3d(shape: Shape, device: str) -> Case:
    import torch

    from _kernels.inputs import randn
    from _kernels.pad3d import replication_pad3d

    pads = tuple(int(p) for p in shape["pads"].split("-"))
    x = randn(shape["N"], shape["C"], shape["D"], shape["H"], shape["W"], seed=4, device=device)
    return Case(run=lambda: replication_pad3d(x, pads),  # type: ignore[arg-type]
                expected=lambda: torch.nn.functional.pad(x, pads, mode="replicate"), atol=0, rtol=0)


OPS = [
    Op("replication_pad3d", build=build_pad3d, shapes={
        "smoke": _level(7, [(1, 2, 3, 4, 5)]),
        "core": _level(7, [(1, 16, 16, 32, 32), (2, 32, 32, 64, 64), (4, 64, 16, 64, 64), (1, 3, 64, 128, 128),
                           (8, 32, 8, 128, 128)]),
        "comprehensive": _level(7, [(n, c, d, 64, 64) for n in (1, 4) for c in (3, 32, 64) for d in (8, 32)]),
    }),
]

SWITCH = Switch(setup_b=skip_remove_layout_conversions)
