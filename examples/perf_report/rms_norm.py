"""RMSNorm benchmarks shaped like a kernel repository's: several providers, (M, N) points, a dtype among the
Benchmark's args, `from triton.testing import do_bench` with return_mode, GB/s, and two perf_report functions
(the plain norm and the one fused with a residual add), each an op of its own.

    pytest examples/perf_report/rms_norm.py --ab-providers torch,triton
    pytest examples/perf_report/rms_norm.py --ab-providers triton,triton-two-pass
"""

import torch

import triton
import triton.language as tl
from triton.testing import do_bench

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
EPS = 1e-6


@triton.jit
def rms_norm_kernel(x_ptr, res_ptr, w_ptr, y_ptr, stride, N, eps, HAS_RESIDUAL: tl.constexpr,
                    BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        x += tl.load(res_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def sum_of_squares_kernel(x_ptr, res_ptr, ss_ptr, stride, N, HAS_RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        x += tl.load(res_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(ss_ptr + row, tl.sum(x * x, axis=0))


@triton.jit
def scale_kernel(x_ptr, res_ptr, w_ptr, ss_ptr, y_ptr, stride, N, eps, HAS_RESIDUAL: tl.constexpr,
                 BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        x += tl.load(res_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.load(ss_ptr + row) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm(x, weight, residual=None):
    y = torch.empty_like(x)
    M, N = x.shape
    rms_norm_kernel[(M, )](x, residual if residual is not None else x, weight, y, x.stride(0), N, EPS,
                           HAS_RESIDUAL=residual is not None, BLOCK_N=triton.next_power_of_2(N))
    return y


def rms_norm_two_pass(x, weight, residual=None):
    y = torch.empty_like(x)
    M, N = x.shape
    ss = torch.empty(M, device=x.device, dtype=torch.float32)
    res = residual if residual is not None else x
    block = triton.next_power_of_2(N)
    sum_of_squares_kernel[(M, )](x, res, ss, x.stride(0), N, HAS_RESIDUAL=residual is not None, BLOCK_N=block)
    scale_kernel[(M, )](x, res, weight, ss, y, x.stride(0), N, EPS, HAS_RESIDUAL=residual is not None,
                        BLOCK_N=block)
    return y


def rms_norm_torch(x, weight, residual=None):
    if residual is not None:
        x = x + residual
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * weight.float()).to(x.dtype)


PROVIDERS = {"triton": rms_norm, "triton-two-pass": rms_norm_two_pass, "torch": rms_norm_torch}
POINTS = [(1024, 512), (2048, 1024), (4096, 2048), (4096, 4096), (8192, 4096), (8192, 8192)]


def _bench(M, N, dtype, provider, residual):
    x = torch.randn(M, N, device=DEVICE, dtype=dtype)
    res = torch.randn(M, N, device=DEVICE, dtype=dtype) if residual else None
    weight = torch.rand(N, device=DEVICE, dtype=dtype)
    fn = PROVIDERS[provider]
    ms = do_bench(lambda: fn(x, weight, res), return_mode="median")
    moved = (3 if residual else 2) * x.numel() * x.element_size()  # read x (and the residual), write y
    return moved * 1e-9 / (ms * 1e-3)


@triton.testing.perf_report([
    triton.testing.Benchmark(x_names=["M", "N"], x_vals=POINTS, line_arg="provider", line_vals=list(PROVIDERS),
                             line_names=["Triton", "Triton (two passes)", "Torch"], ylabel="GB/s",
                             plot_name="rms_norm-bf16", args={"dtype": torch.bfloat16}),
])
def bench_rms_norm(M, N, dtype, provider):
    return _bench(M, N, dtype, provider, residual=False)


@triton.testing.perf_report(
    triton.testing.Benchmark(x_names=["M", "N"], x_vals=POINTS, line_arg="provider", line_vals=list(PROVIDERS),
                             line_names=["Triton", "Triton (two passes)", "Torch"], ylabel="GB/s",
                             plot_name="add_rms_norm-bf16", args={"dtype": torch.bfloat16}))
def bench_add_rms_norm(M, N, dtype, provider):
    return _bench(M, N, dtype, provider, residual=True)


if __name__ == "__main__":
    bench_rms_norm.run(print_data=True)
    bench_add_rms_norm.run(print_data=True)
