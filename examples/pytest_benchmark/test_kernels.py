"""pytest-benchmark tests of two Triton kernels, as a kernel repository keeps them; run as a campaign with

    pytest examples/pytest_benchmark --ab-pytest-benchmark --ab-switch-env DISABLE_MMA_V3=1

(and as pytest-benchmark runs them, with `pytest examples/pytest_benchmark -p no:abbench`).
"""

import pytest
import torch

import triton
import triton.language as tl

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


def matmul(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    matmul_kernel[(M // 128, N // 128)](a, b, c, M, N, K, BM=128, BN=128, BK=64, num_warps=8, num_stages=3)
    return c


@pytest.mark.parametrize("n", [2**20, 2**24] if GPU else [2**10, 2**12])
def test_add(benchmark, n):
    x = torch.rand(n, device=DEVICE)
    y = torch.rand(n, device=DEVICE)
    out = benchmark(add, x, y)
    torch.testing.assert_close(out, x + y)


@pytest.mark.parametrize("size", [1024, 2048, 4096] if GPU else [128])
def test_matmul(benchmark, size):
    a = torch.randn(size, size, device=DEVICE, dtype=torch.float16)
    b = torch.randn(size, size, device=DEVICE, dtype=torch.float16)
    out = benchmark.pedantic(matmul, args=(a, b), rounds=20, iterations=5)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=1.0, rtol=5e-2)
