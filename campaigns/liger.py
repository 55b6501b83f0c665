"""Liger-Kernel operators (Triton kernels for LLM training), A/B under DISABLE_MMA_V3=1.

Each cell calls liger-kernel's own forward (the op's ``torch.autograd.Function``,
inputs without ``requires_grad`` so nothing is written back into them) and
checks it against torch eager.  Core shapes are Llama-sized: hidden 4096/8192,
MLP width 11008/14336, vocabulary 32000/128256, 32 query and 8 KV heads of 128.
Only ``swiglu_mlp`` (liger's fused gate/up projection: two ``tl.dot`` per tile)
contains a matrix multiply; the others are element-wise or row reductions.
Fused linear cross entropy is left out: its kernels are ``cross_entropy``'s,
and its matmuls are torch's (on the CPU, where IR triage builds the inputs,
one forward at a 128256-word vocabulary is 4 TFLOP).

Skipped at collection without liger-kernel; timed cells need a GPU, but IR
triage compiles for a GPU on any machine (tensors stay on the CPU, nothing is
launched):

    pytest campaigns/liger.py --ab-rounds 2                       # on a GPU
    pytest campaigns/liger.py --ab-ir-only --ab-ir-target cuda:90   # anywhere
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable

from pytest_abbench import Case, Op, Shape, Switch
from pytest_abbench.core.settings import detect_backend

SKIP = None if importlib.util.find_spec("liger_kernel") else (
    "liger-kernel is not installed (pip install liger-kernel; or its wheel with --no-deps)")
SKIP_TIMED = None if detect_backend("auto") == "cuda" else (
    "no GPU: liger-kernel's ops are timed on a GPU only")

BF16_TOL = {"atol": 2e-2, "rtol": 2e-2}

# Imported once by each side's fork server, not in every cell: liger_kernel.ops imports every op module, and on
# the H200 that took 6.6-10.3 s of each cell's first build (benchmarks/input_cost.py; the draws took milliseconds).
SERVER_IMPORTS = ("liger_kernel.ops",) if SKIP is None else ()
# liger_kernel.utils tries `import peft` at import, and peft imports transformers and scikit-learn: 12-16 s of every
# interpreter on the H200 host where they are installed (benchmarks/server_import_probe.py), each side's fork
# server included.  Only liger's Hugging Face model patching reads it; these ops never do.
UNUSED_IMPORTS = ("peft",)


def _bf16(seed: int, device: str, *size: int, scale: float = 1.0, shift: float = 0.0) -> Any:
    """Seeded normal bf16 values drawn on the device (the same on both sides, in every round).

    On the CPU these draws took 10 to 30 s of every H200 cell (LLM-sized inputs).
    """
    import torch

    # Drawn in bf16 directly: an fp32 draw of a 128256-word vocabulary's logits would be 2 GB more.
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(*size, generator=gen, dtype=torch.bfloat16, device=device)
    return x * scale + shift if scale != 1.0 or shift else x


def _case(run: Callable[[], Any], expected: Callable[[], Any], **tol: float) -> Case:
    return Case(run=run, expected=expected, **{**BF16_TOL, **tol})


def build_rms_norm(shape: Shape, device: str) -> Case:
    import torch
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    x = _bf16(1, device, shape["tokens"], shape["hidden"])
    w = _bf16(2, device, shape["hidden"], scale=0.1, shift=1.0)

    def reference() -> Any:
        # Llama's casting: statistics in fp32, normalized x cast back before the weight.
        xf = x.float()
        normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
        return normed * w

    return _case(lambda: LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False), reference)


def build_layer_norm(shape: Shape, device: str) -> Case:
    import torch
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    x = _bf16(3, device, shape["tokens"], shape["hidden"])
    w = _bf16(4, device, shape["hidden"], scale=0.1, shift=1.0)
    b = _bf16(5, device, shape["hidden"], scale=0.1)
    return _case(lambda: LigerLayerNormFunction.apply(x, w, b, 1e-5),
                 lambda: torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(),
                                                        1e-5).to(x.dtype))


def build_swiglu(shape: Shape, device: str) -> Case:
    import torch
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    a = _bf16(6, device, shape["tokens"], shape["hidden"])
    b = _bf16(7, device, shape["tokens"], shape["hidden"])
    return _case(lambda: LigerSiLUMulFunction.apply(a, b),
                 lambda: (torch.nn.functional.silu(a.float()) * b.float()).to(a.dtype))


def build_geglu(shape: Shape, device: str) -> Case:
    import torch
    from liger_kernel.ops.geglu import LigerGELUMulFunction

    a = _bf16(8, device, shape["tokens"], shape["hidden"])
    b = _bf16(9, device, shape["tokens"], shape["hidden"])
    return _case(lambda: LigerGELUMulFunction.apply(a, b),  # liger's GeGLU is the tanh approximation
                 lambda: (torch.nn.functional.gelu(a.float(), approximate="tanh") * b.float()).to(a.dtype))


def build_rope(shape: Shape, device: str) -> Case:
    import torch
    from liger_kernel.ops.rope import LigerRopeFunction

    batch, seq, dim = shape["batch"], shape["seq"], shape["head_dim"]
    q = _bf16(10, device, batch, shape["q_heads"], seq, dim)
    k = _bf16(11, device, batch, shape["kv_heads"], seq, dim)
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, dim, 2).float() / dim))
    angles = torch.outer(torch.arange(seq).float(), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)[None]  # (1, seq, head_dim), as Hugging Face's Llama builds it
    cos, sin = emb.cos().to(torch.bfloat16).to(device), emb.sin().to(torch.bfloat16).to(device)

    def reference() -> Any:
        def rotate_half(t: Any) -> Any:
            return torch.cat((-t[..., dim // 2:], t[..., :dim // 2]), dim=-1)

        c, s = cos.float()[:, None], sin.float()[:, None]
        return tuple((t.float() * c + rotate_half(t.float()) * s).to(t.dtype) for t in (q, k))

    return _case(lambda: LigerRopeFunction.apply(q, k, cos, sin), reference)


def _targets(seed: int, tokens: int, vocab: int, device: str) -> Any:
    import torch

    return torch.randint(0, vocab, (tokens,), generator=torch.Generator(device=device).manual_seed(seed),
                         device=device)


def build_cross_entropy(shape: Shape, device: str) -> Case:
    import torch
    from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

    logits = _bf16(12, device, shape["tokens"], shape["vocab"])
    target = _targets(13, shape["tokens"], shape["vocab"], device)
    return _case(lambda: LigerCrossEntropyFunction.apply(logits, target, None)[0],
                 lambda: torch.nn.functional.cross_entropy(logits.float(), target).to(logits.dtype),
                 atol=0.1, rtol=1e-2)


def build_swiglu_mlp(shape: Shape, device: str) -> Case:
    import torch

    try:
        from liger_kernel.ops.mlp import gemm_swiglu
    except ModuleNotFoundError as exc:  # liger-kernel before 0.8.5 has no ops.mlp: say so, not just the module
        from importlib.metadata import version

        raise RuntimeError(f"liger-kernel {version('liger-kernel')} has no liger_kernel.ops.mlp (gemm_swiglu); "
                           f"swiglu_mlp needs liger-kernel 0.8.5 or later") from exc

    # gemm_swiglu is what LigerMLPFunction's training forward runs before its down projection (a torch
    # matmul), called directly: the Function refuses CPU tensors, and IR triage builds its inputs on the CPU.
    # store_preact=True is the training kernel (BLOCK_M 64 or 128); it returns [A | G | U] in one buffer.
    dim, hidden = shape["dim"], shape["hidden"]
    x = _bf16(17, device, shape["batch"], shape["seq"], dim)
    wg = _bf16(18, device, hidden, dim, scale=dim ** -0.5)
    wu = _bf16(19, device, hidden, dim, scale=dim ** -0.5)

    def reference() -> Any:
        xf = x.float()
        return (torch.nn.functional.silu(xf @ wg.float().T) * (xf @ wu.float().T)).to(x.dtype)

    return _case(lambda: gemm_swiglu(x, wg, wu, 1.0)[0][..., :hidden], reference, atol=5e-2, rtol=5e-2)


def _rows(*pairs: tuple[int, int]) -> list[dict[str, int]]:
    return [{"tokens": t, "hidden": h} for t, h in pairs]


OPS = [
    Op("rms_norm", build=build_rms_norm, shapes={"smoke": _rows((4, 256)), "core": _rows((8192, 4096), (4096, 8192))}),
    Op("layer_norm", build=build_layer_norm,
       shapes={"smoke": _rows((4, 256)), "core": _rows((8192, 4096), (4096, 8192))}),
    Op("swiglu", build=build_swiglu, shapes={"smoke": _rows((4, 256)), "core": _rows((4096, 14336), (8192, 11008))}),
    Op("geglu", build=build_geglu, shapes={"smoke": _rows((4, 256)), "core": _rows((4096, 16384), (8192, 11008))}),
    Op("rope", build=build_rope, shapes={
        "smoke": [{"batch": 1, "seq": 8, "q_heads": 4, "kv_heads": 2, "head_dim": 64}],
        "core": [{"batch": 1, "seq": 4096, "q_heads": 32, "kv_heads": 8, "head_dim": 128},
                 {"batch": 4, "seq": 2048, "q_heads": 64, "kv_heads": 8, "head_dim": 128}]}),
    Op("cross_entropy", build=build_cross_entropy, shapes={
        "smoke": [{"tokens": 4, "vocab": 512}],
        "core": [{"tokens": 4096, "vocab": 128256}, {"tokens": 8192, "vocab": 32000}]}),
    Op("swiglu_mlp", build=build_swiglu_mlp, shapes={
        "smoke": [{"batch": 1, "seq": 64, "dim": 128, "hidden": 256}],
        "core": [{"batch": 1, "seq": 4096, "dim": 4096, "hidden": 14336},
                 {"batch": 4, "seq": 1024, "dim": 8192, "hidden": 28672}]}),
]
SWITCH = Switch(env_b={"DISABLE_MMA_V3": "1"})
