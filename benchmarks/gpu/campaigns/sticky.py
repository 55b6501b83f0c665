"""GPU check of sticky CUDA errors: side B writes out of bounds on one shape of three; one shape runs out of memory.

    pytest benchmarks/gpu/campaigns/sticky.py --ab-rounds 1      (benchmarks/gpu/gpu_sticky.sh)

``oob``: side B's kernel stores 2**40 elements past its buffer on the middle
shape (cudaErrorIllegalAddress, which poisons the context): that shape fails,
the other two are measured on both sides.  ``oom``: the middle shape asks for
1 TiB (a device out-of-memory error, not sticky): the shapes after it run in
the same process.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

from pytest_abbench import Case, Op, Shape, Switch


@triton.jit
def shifted_copy(src, dst, n, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs + shift, tl.load(src + offs, mask=mask), mask=mask)


def build(shape: Shape, device: str) -> Case:
    import torch

    params = dict(shape.params)
    if params.get("gib"):
        torch.empty(int(shape["gib"]) << 30, dtype=torch.uint8, device=device)  # raises: out of memory
    n = int(shape["n"])
    src = torch.arange(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    shift = (1 << 40) if params.get("bad") and os.environ.get("ABBENCH_OOB") == "1" else 0

    def run() -> torch.Tensor:
        shifted_copy[(triton.cdiv(n, 1024),)](src, dst, n, shift, BLOCK=1024)
        return dst

    return Case(run=run, expected=lambda: src)


OPS = [
    Op("oob", build=build, shapes={"core": [{"n": 1 << 20, "bad": False}, {"n": 1 << 21, "bad": True},
                                            {"n": 1 << 22, "bad": False}]}),
    Op("oom", build=build, shapes={"core": [{"n": 1 << 20, "gib": 0}, {"n": 1 << 21, "gib": 1024},
                                            {"n": 1 << 22, "gib": 0}]}),
]
SWITCH = Switch(env_b={"ABBENCH_OOB": "1"})
