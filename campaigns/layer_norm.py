"""layer_norm: a row-wise layer norm, ATen's (side A) against a Triton kernel (side B).

A kernel-variant switch: side B's cells run ``_kernels/layer_norm.py`` where side A's call
``torch.nn.functional.layer_norm``; the campaign reads ``LAYER_NORM_IMPL`` when it builds a case.
A memory-bound op that reaches the H200's power cap in long windows (8192 x 4096 bf16 under steady: 698-699 W,
A 1920 MHz, B 1875 MHz; docs/explanation/regimes.md, "The report against the reference"), so its delta is one
to hold against the timing regime.

    pytest campaigns/layer_norm.py --ab-rounds 3 --ab-regime both
"""

from __future__ import annotations

import os

from pytest_abbench import Case, Op, Shape, Switch, Work

IMPL = "LAYER_NORM_IMPL"  # "triton" on side B; ATen otherwise


def build_layer_norm(shape: Shape, device: str) -> Case:
    import torch

    from _kernels.inputs import randn

    # Triton 3.6's interpreter misreads bf16 CPU tensors: the smoke level runs fp16 (same kernel and code paths).
    dtype = getattr(torch, shape.params.get("dtype", "bfloat16"))
    rows, cols = shape["rows"], shape["cols"]
    x = randn(rows, cols, seed=5, device=device, dtype=dtype)
    w = randn(cols, seed=6, device=device, scale=0.1).add(1.0).to(dtype)
    b = randn(cols, seed=7, device=device, scale=0.1, dtype=dtype)

    def aten() -> object:
        return torch.nn.functional.layer_norm(x, (cols,), w, b, 1e-5)

    def expected() -> object:
        return torch.nn.functional.layer_norm(x.float(), (cols,), w.float(), b.float(), 1e-5).to(dtype)

    if os.environ.get(IMPL) == "triton":
        from _kernels.layer_norm import layer_norm

        return Case(run=lambda: layer_norm(x, w, b, 1e-5), expected=expected, atol=2e-2, rtol=2e-2)
    return Case(run=aten, expected=expected, atol=2e-2, rtol=2e-2)


def layer_norm_work(shape: Shape) -> Work:
    """x read and y written once (2 bytes an element), weight and bias once; about 8 FLOPs an element."""
    rows, cols = shape["rows"], shape["cols"]
    dtype = {"bfloat16": "bf16", "float16": "fp16"}[shape.params.get("dtype", "bfloat16")]
    return Work(flops=8.0 * rows * cols, bytes=2.0 * (2 * rows * cols + 2 * cols), dtype=dtype)


OPS = [
    Op("layer_norm", build=build_layer_norm, work=layer_norm_work, shapes={
        "smoke": [{"rows": 4, "cols": 64, "dtype": "float16"}],
        "core": [{"rows": r, "cols": c} for (r, c) in [(1024, 1024), (4096, 4096), (8192, 4096), (16384, 8192)]],
    }),
]

# Only build_layer_norm reads IMPL: both sides can be built in one process (--ab-reference).
SWITCH = Switch(env_b={IMPL: "triton"}, build_only_env=(IMPL,))
