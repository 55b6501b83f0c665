"""topk: row-wise top-k values.  Switch: Triton's remove-layout-conversions pass skipped on side B."""

from __future__ import annotations

from typing import Any

from pytest_abbench import Case, Op, Shape, Switch

from _kernels.switches import skip_remove_layout_conversions


def build_topk(shape: Shape, device: str) -> Case:
    import torch

    from _kernels.inputs import randn
    from _kernels.topk import topk_values

    x = randn(shape["rows"], shape["cols"], seed=0, device=device)
    k = shape["k"]

    def check(actual: Any, expected: Any) -> None:
        torch.testing.assert_close(actual, expected, atol=0, rtol=0)

    return Case(run=lambda: topk_values(x, k), expected=lambda: torch.topk(x, k, dim=1).values, check=check)


OPS = [
    Op("topk", build=build_topk, shapes={
        "smoke": [{"rows": 4, "cols": 64, "k": 8}],
        "core": [{"rows": r, "cols": c, "k": k} for (r, c, k) in [
            # Rows of 32000 (one program sorting 32768 values) did not finish
            # compiling within 75 s on the H200: they live in "comprehensive".
            (64, 1024, 8), (256, 4096, 16), (64, 8192, 64), (16, 8192, 256), (1024, 2048, 128),
        ]],
        "comprehensive": [{"rows": r, "cols": c, "k": k} for r in (16, 256, 2048) for c in (1024, 8192, 32000)
                          for k in (8, 64, 256) if k < c],
    }),
]

SWITCH = Switch(setup_b=skip_remove_layout_conversions)
