"""bf16 matrix products: an autotuned general mm and a MoE router gemm (fp32 logits)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _tile_mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    grid_n = tl.cdiv(N, BN)
    pm = pid // grid_n
    pn = pid % grid_n
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


MM_CONFIGS = [
    triton.Config({"BM": 64, "BN": 64, "BK": 32}, num_warps=4, num_stages=3),
    triton.Config({"BM": 128, "BN": 128, "BK": 64}, num_warps=8, num_stages=3),
    triton.Config({"BM": 128, "BN": 256, "BK": 64}, num_warps=8, num_stages=3),
    triton.Config({"BM": 64, "BN": 128, "BK": 64}, num_warps=4, num_stages=4),
]


@triton.autotune(configs=MM_CONFIGS, key=["M", "N", "K"])
@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    _tile_mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, BM, BN, BK)


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)

    def grid(meta: dict) -> tuple[int]:
        return (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)

    mm_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    return c


@triton.jit
def router_gemm_kernel(x_ptr, w_ptr, out_ptr, T, E, H, sxt, sxh, swh, swe, sot, soe,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    _tile_mm(x_ptr, w_ptr, out_ptr, T, E, H, sxt, sxh, swh, swe, sot, soe, BM, BN, BK)


def router_gemm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Router logits: bf16 tokens (T, H) times bf16 weights (H, E), fp32 out (T, E)."""
    T, H = x.shape
    _, E = w.shape
    out = torch.empty((T, E), device=x.device, dtype=torch.float32)
    bn = max(16, min(256, triton.next_power_of_2(E)))
    bm = 16 if T <= 16 else 64
    grid = (triton.cdiv(T, bm) * triton.cdiv(E, bn),)
    router_gemm_kernel[grid](x, w, out, T, E, H, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                             out.stride(0), out.stride(1), BM=bm, BN=bn, BK=64, num_warps=4)
    return out


@triton.jit
def bias_softmax_kernel(x_ptr, b_ptr, out_ptr, E, sx, so, BLOCK: tl.constexpr):
    """Router probabilities: softmax over experts of logits + bias (no tl.dot: DISABLE_MMA_V3 leaves it alone)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < E
    x = tl.load(x_ptr + row * sx + cols, mask=m, other=float("-inf")) + tl.load(b_ptr + cols, mask=m, other=0.0)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * so + cols, e / tl.sum(e, axis=0), mask=m)


def bias_softmax(logits: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    T, E = logits.shape
    out = torch.empty_like(logits)
    bias_softmax_kernel[(T,)](logits, bias, out, E, logits.stride(0), out.stride(0),
                              BLOCK=triton.next_power_of_2(E), num_warps=4)
    return out
