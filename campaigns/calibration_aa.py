"""Calibration, A/A: side B is side A.  Every verdict other than 'same' or 'inconclusive' is a false one.

The switch sets a variable nothing reads, so the generated code is identical
and the IR gate would (rightly) skip rounds 2..N: run it with
``--ab-allow-no-ir-diff`` to measure the verdict machinery itself::

    pytest campaigns/calibration_aa.py --ab-rounds 6 --ab-allow-no-ir-diff

Shapes span a launch-bound copy of a few microseconds to a bf16 matrix
product of milliseconds.
"""

from __future__ import annotations

from pytest_abbench import Case, Op, Shape, Switch


def build(shape: Shape, device: str) -> Case:
    import torch

    if shape["kind"] == "copy":
        from _kernels.copy import copy_prefix

        n = shape["n"]
        src = torch.arange(n, dtype=torch.float32, device=device)
        dst = torch.empty_like(src)
        return Case(run=lambda: copy_prefix(src, dst, n), expected=lambda: src)

    from _kernels.gemm import mm
    from _kernels.inputs import randn

    dtype = getattr(torch, shape.params.get("dtype", "bfloat16"))
    a = randn(shape["M"], shape["K"], seed=5, device=device, dtype=dtype)
    b = randn(shape["K"], shape["N"], seed=50, device=device, dtype=dtype)
    return Case(run=lambda: mm(a, b), expected=lambda: (a.float() @ b.float()).to(dtype), atol=0.5, rtol=2e-2)


OPS = [
    Op("aa", build=build, shapes={
        "smoke": [{"kind": "copy", "n": 256}, {"kind": "mm", "M": 32, "N": 32, "K": 32, "dtype": "float16"}],
        "core": [{"kind": "copy", "n": 1 << p} for p in (12, 18, 22, 25, 28)]
                + [{"kind": "mm", "M": s, "N": s, "K": s} for s in (512, 8192)],
    }),
]

SWITCH = Switch(env_b={"ABBENCH_CALIBRATION_NOOP": "1"})
