"""What NVML says of a GPU the session runs on: its name and compute capability, and the driver's version.

A GPU is named as ``--ab-gpus`` names it, an NVML index or a ``GPU-``/``MIG-``
UUID.  ``pynvml`` is imported by these functions only: the plugin's start-up
never loads it.
"""

from __future__ import annotations

from typing import Any


def _nvml() -> Any:
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    return pynvml


def _handle(nvml: Any, gpu: str | None) -> Any:
    if gpu is None or gpu.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(gpu or 0))
    handle = nvml.nvmlDeviceGetHandleByUUID(gpu)
    if gpu.startswith("MIG-"):  # a MIG slice has its GPU's architecture
        handle = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
    return handle


def name_and_capability(gpu: str | None) -> tuple[str, int, int] | None:
    """The GPU's name and CUDA compute capability (major, minor); None where NVML cannot say (no GPU, no driver)."""
    try:
        nvml = _nvml()
    except Exception:  # ImportError, NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
    try:
        handle = _handle(nvml, gpu)
        name = nvml.nvmlDeviceGetName(handle)
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        return (name.decode() if isinstance(name, bytes) else str(name)), int(major), int(minor)
    except Exception:  # an unknown index or UUID, a query the device does not support
        return None
    finally:
        nvml.nvmlShutdown()


def driver_version() -> str | None:
    """The NVIDIA driver's version as NVML reports it; None where NVML cannot say."""
    try:
        nvml = _nvml()
    except Exception:
        return None
    try:
        version = nvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        return None
    finally:
        nvml.nvmlShutdown()
