"""The campaigns' inputs: seeded normal values drawn on the device the cell runs on."""

from __future__ import annotations

from typing import Any


def randn(*size: int, seed: int, device: str, dtype: Any = None, scale: float | None = None) -> Any:
    """Standard normal values of ``size`` (times ``scale``, then cast to ``dtype``), from a generator seeded with
    ``seed`` on ``device``: the same tensor on both sides and in every round on one GPU model and torch (CUDA's
    draws need not match across GPU models: a campaign resumed on another GPU draws other values).

    Drawn where the cell runs: on the H200, a 16384 x 7168 operand drawn on the CPU and copied took 0.76 s of
    every cell that built it, 0.001 s drawn on the GPU (docs/explanation/scale.md).
    """
    import torch

    x = torch.randn(*size, generator=torch.Generator(device=device).manual_seed(seed), device=device)
    if scale is not None:
        x = x * scale
    return x if dtype is None else x.to(dtype)
