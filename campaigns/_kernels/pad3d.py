"""replication_pad3d: out[n, c, d, h, w] = x[n, c, clamp(d - front), clamp(h - top), clamp(w - left)]."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def replication_pad3d_kernel(x_ptr, out_ptr, total, D, H, W, OD, OH, OW, front, top, left, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < total
    ow = offs % OW
    t = offs // OW
    oh = t % OH
    t = t // OH
    od = t % OD
    nc = t // OD
    iw = tl.minimum(tl.maximum(ow - left, 0), W - 1)
    ih = tl.minimum(tl.maximum(oh - top, 0), H - 1)
    id = tl.minimum(tl.maximum(od - front, 0), D - 1)
    src = ((nc * D + id) * H + ih) * W + iw
    tl.store(out_ptr + offs, tl.load(x_ptr + src, mask=m), mask=m)


def replication_pad3d(x: torch.Tensor, pads: tuple[int, int, int, int, int, int]) -> torch.Tensor:
    """``pads`` in torch's order: (left, right, top, bottom, front, back)."""
    left, right, top, bottom, front, back = pads
    N, C, D, H, W = x.shape
    OD, OH, OW = D + front + back, H + top + bottom, W + left + right
    out = torch.empty((N, C, OD, OH, OW), device=x.device, dtype=x.dtype)
    total = out.numel()
    block = 1024
    replication_pad3d_kernel[(triton.cdiv(total, block),)](x.contiguous(), out, total, D, H, W, OD, OH, OW,
                                                            front, top, left, BLOCK=block, num_warps=4)
    return out
