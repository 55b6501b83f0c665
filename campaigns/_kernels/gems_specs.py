"""FlagGems operators as specs: inputs, FlagGems' call, torch's reference and ATen's own call.

Shared by ``campaigns/flaggems.py`` (FlagGems under a compiler switch) and
``campaigns/flaggems_aten.py`` (FlagGems against ATen).  Imports nothing heavy at
module level: collection imports this file.
"""

from __future__ import annotations

from typing import Any

from pytest_abbench import Shape
from pytest_abbench.campaign.flaggems import GemsOp


def topk_inputs(shape: Shape, device: str) -> tuple[Any, int]:
    import torch

    from _kernels.inputs import randn

    x = randn(shape["rows"], shape["cols"], seed=1, device=device, dtype=torch.bfloat16)
    return x, shape["k"]


def topk_values_match(actual: Any, expected: Any) -> None:
    import torch

    # Indices may differ under ties; the values may not.
    torch.testing.assert_close(actual[0], expected[0], atol=0, rtol=0)


def mm_inputs(shape: Shape, device: str) -> tuple[Any, Any]:
    import torch

    from _kernels.inputs import randn

    a = randn(shape["M"], shape["K"], seed=2, device=device, dtype=torch.bfloat16)
    b = randn(shape["K"], shape["N"], seed=20, device=device, dtype=torch.bfloat16)
    return a, b


def pad3d_inputs(shape: Shape, device: str) -> tuple[Any, list[int]]:
    import random

    from _kernels.inputs import randn

    # Paddings from a generator seeded by the shape: the same on both sides and in every round.
    rng = random.Random(shape["seed"])
    pads = [rng.randint(0, 3) for _ in range(6)]
    x = randn(*shape["dims"], seed=3, device=device)
    return x, pads


def rows_inputs(shape: Shape, device: str) -> tuple[Any]:
    import torch

    from _kernels.inputs import randn

    return (randn(shape["rows"], shape["cols"], seed=4, device=device, dtype=torch.bfloat16),)


def torch_layer_norm(x: Any) -> Any:
    import torch

    return torch.nn.functional.layer_norm(x, (x.shape[-1],))


def torch_pad3d(x: Any, pads: list[int]) -> Any:
    import torch

    return torch.nn.functional.pad(x, pads, mode="replicate")


SPECS = [
    GemsOp("topk", inputs=topk_inputs, call=lambda g, x, k: g.topk(x, k),
           reference=lambda x, k: x.topk(k), aten=lambda x, k: x.topk(k), check=topk_values_match,
           shapes={"smoke": [{"rows": 4, "cols": 256, "k": 8}],
                   "core": [{"rows": r, "cols": c, "k": k} for r, c, k in
                            [(4096, 1024, 8), (1024, 4096, 64), (64, 32000, 256)]]}),
    GemsOp("mm", inputs=mm_inputs, call=lambda g, a, b: g.mm(a, b),
           reference=lambda a, b: (a.float() @ b.float()).to(a.dtype), aten=lambda a, b: a @ b, atol=0.5, rtol=2e-2,
           shapes={"smoke": [{"M": 64, "N": 64, "K": 64}],
                   "core": [{"M": m, "N": n, "K": k} for m, n, k in [(1024, 1024, 1024), (4096, 4096, 4096)]]}),
    GemsOp("replication_pad3d", inputs=pad3d_inputs, call=lambda g, x, p: g.replication_pad3d(x, p),
           reference=torch_pad3d, aten=torch_pad3d,
           shapes={"smoke": [{"dims": [1, 2, 4, 4, 4], "seed": 0}],
                   "core": [{"dims": d, "seed": i}
                            for i, d in enumerate([[2, 16, 32, 64, 64], [1, 4, 64, 128, 128]])]}),
    GemsOp("softmax", inputs=rows_inputs, call=lambda g, x: g.softmax(x, -1),
           reference=lambda x: x.float().softmax(-1).to(x.dtype), aten=lambda x: x.softmax(-1),
           atol=1e-2, rtol=1e-2,
           shapes={"smoke": [{"rows": 4, "cols": 128}],
                   "core": [{"rows": r, "cols": c} for r, c in [(4096, 4096), (32768, 1024)]]}),
    GemsOp("layer_norm", inputs=rows_inputs, call=lambda g, x: g.layer_norm(x, (x.shape[-1],))[0],
           reference=lambda x: torch_layer_norm(x.float()).to(x.dtype), aten=torch_layer_norm,
           atol=2e-2, rtol=2e-2,
           shapes={"smoke": [{"rows": 4, "cols": 128}],
                   "core": [{"rows": r, "cols": c} for r, c in [(4096, 4096), (16384, 1024), (8192, 4096)]]}),
]

