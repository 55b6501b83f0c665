"""router_gemm: MoE router logits (bf16 x bf16 -> fp32) and router softmax.  Switch: DISABLE_MMA_V3=1.

router_softmax has no tl.dot, so the switch leaves its TTGIR unchanged: the
IR gate skips its later rounds instead of reporting noise as "no difference".
"""

from __future__ import annotations

from pytest_abbench import Case, Op, Shape, Switch

LEVELS = {
    "smoke": [(4, 64, 8)],
    "core": [(t, h, e) for (t, h, e) in [(1, 4096, 8), (16, 4096, 64), (256, 4096, 128), (2048, 7168, 256),
                                            (16384, 4096, 64), (16384, 7168, 256)]],
    "comprehensive": [(t, h, e) for t in (1, 16, 128, 1024, 4096, 16384) for h in (2048, 4096, 7168)
                      for e in (8, 64, 128, 256)],
}


def _inputs(shape: Shape, device: str):  # type: ignore[no-untyped-def]
    import torch

    from _kernels.inputs import randn

    dtype = getattr(torch, shape.params.get("dtype", "bfloat16"))
    x = randn(shape["tokens"], shape["hidden"], seed=1, device=device, dtype=dtype, scale=0.1)
    w = randn(shape["hidden"], shape["experts"], seed=10, device=device, dtype=dtype, scale=0.1)
    return x, w


def build_router_gemm(shape: Shape, device: str) -> Case:
    from _kernels.gemm import router_gemm

    x, w = _inputs(shape, device)
    return Case(run=lambda: router_gemm(x, w), expected=lambda: x.float() @ w.float(), atol=2e-2, rtol=2e-2)


def build_router_softmax(shape: Shape, device: str) -> Case:
    import torch

    from _kernels.gemm import bias_softmax
    from _kernels.inputs import randn

    logits = randn(shape["tokens"], shape["experts"], seed=2, device=device)
    bias = randn(shape["experts"], seed=20, device=device)
    return Case(run=lambda: bias_softmax(logits, bias), expected=lambda: torch.softmax(logits + bias, dim=1),
                atol=1e-5, rtol=1e-4)


def _shapes(keys: tuple[str, ...]) -> dict:
    # Triton 3.6's interpreter misreads bf16 CPU tensors: the smoke level (CI) runs fp16.
    return {level: [{**dict(zip(keys, s)), **({"dtype": "float16"} if level == "smoke" else {})} for s in shapes]
            for level, shapes in LEVELS.items()}


OPS = [
    Op("router_gemm", build=build_router_gemm, shapes=_shapes(("tokens", "hidden", "experts"))),
    Op("router_softmax", build=build_router_softmax, shapes={
        level: [{"tokens": t, "experts": e} for (t, e) in dict.fromkeys((t, e) for (t, _, e) in shapes)]
        for level, shapes in LEVELS.items()}),
]

SWITCH = Switch(env_b={"DISABLE_MMA_V3": "1"})
