"""The one GPU check the NVML benchmark scripts share: torch with CUDA, and a cell's NVML sampler on its device."""

from __future__ import annotations

from pytest_abbench.child.gpustate import GpuSampler, open_sampler


def cuda_sampler(script: str) -> GpuSampler | str:
    """The sampler a cell would open on this machine's CUDA device, or the one line saying why there is none
    (``script: no CUDA device``): the scripts print it and exit 2."""
    try:
        import torch
    except ImportError as exc:
        return f"{script}: torch is not installed ({exc})"
    if not torch.cuda.is_available():
        return f"{script}: no CUDA device"
    sampler = open_sampler("cuda")
    if sampler.not_recorded is not None:
        return f"{script}: {sampler.describe()}"
    return sampler
