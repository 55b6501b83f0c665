"""mm: bf16 matrix product, autotuned over several configs.  Switch: DISABLE_MMA_V3=1 (wgmma off on Hopper)."""

from __future__ import annotations

from pytest_abbench import Case, Op, Shape, Switch, Work


def build_mm(shape: Shape, device: str) -> Case:
    import torch

    from _kernels.gemm import mm
    from _kernels.inputs import randn

    dtype = getattr(torch, shape.params.get("dtype", "bfloat16"))
    a = randn(shape["M"], shape["K"], seed=3, device=device, dtype=dtype)
    b = randn(shape["K"], shape["N"], seed=30, device=device, dtype=dtype)
    return Case(run=lambda: mm(a, b), expected=lambda: (a.float() @ b.float()).to(dtype),
                atol=0.5, rtol=2e-2)


def mm_work(shape: Shape) -> Work:
    """2*M*N*K FLOPs; A and B read once and C written once (2 bytes an element in bf16 and fp16)."""
    m, n, k = shape["M"], shape["N"], shape["K"]
    dtype = {"bfloat16": "bf16", "float16": "fp16"}[shape.params.get("dtype", "bfloat16")]
    return Work(flops=2.0 * m * n * k, bytes=2.0 * (m * k + k * n + m * n), dtype=dtype)


OPS = [
    Op("mm", build=build_mm, work=mm_work, shapes={
        # Triton 3.6's interpreter misreads bf16 CPU tensors, so the smoke
        # level (run in the interpreter in CI) uses fp16: same kernel, same code paths.
        "smoke": [{"M": 32, "N": 32, "K": 64, "dtype": "float16"}],
        "core": [{"M": m, "N": n, "K": k} for (m, n, k) in [
            (256, 256, 4096), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 1024, 4096)]],
        "comprehensive": [{"M": m, "N": n, "K": k} for m in (128, 1024, 4096, 8192) for n in (256, 2048, 8192)
                          for k in (512, 4096)],
    }),
]

SWITCH = Switch(env_b={"DISABLE_MMA_V3": "1"})
