"""Row-wise top-k values: one program per row, a bitonic sort of the (padded) row."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def topk_rows_kernel(x_ptr, out_ptr, n_cols, x_stride, out_stride, K: tl.constexpr, BLOCK: tl.constexpr,
                     K_BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    vals = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=float("-inf"))
    ordered = tl.sort(vals, descending=True)
    # Positions >= K become -inf; folding the row into (BLOCK/K_BLOCK, K_BLOCK)
    # and taking the column max leaves sorted position j in column j.
    head = tl.arange(0, K_BLOCK)
    keep = tl.where(cols < K, ordered, float("-inf"))
    top = tl.max(tl.reshape(keep, (BLOCK // K_BLOCK, K_BLOCK)), axis=0)
    tl.store(out_ptr + row * out_stride + head, top, mask=head < K)


def topk_values(x: torch.Tensor, k: int, num_warps: int = 4) -> torch.Tensor:
    rows, cols = x.shape
    block = triton.next_power_of_2(cols)
    k_block = triton.next_power_of_2(k)
    out = torch.empty((rows, k), device=x.device, dtype=x.dtype)
    topk_rows_kernel[(rows,)](x, out, cols, x.stride(0), out.stride(0), K=k, BLOCK=block, K_BLOCK=k_block,
                              num_warps=num_warps)
    return out
