"""Building run_identity.json in the cell process: everything that decides what its latency numbers mean.

The file's name and the axes the parent compares live in ``pytest_abbench.identity``.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from pytest_abbench.fileio import write_json_atomic
from pytest_abbench.identity import IDENTITY_FILE, file_hash

SCHEMA = 1


def _nvidia_smi(query: str) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader", "-i", "0"],
            capture_output=True, text=True, timeout=20, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def device_facts(backend: str) -> dict[str, Any]:
    """Device name, driver and GPU UUID of the device this process times on."""
    import torch

    if backend == "cuda":
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        uuid = str(getattr(props, "uuid", "")) or None
        if uuid and not uuid.startswith("GPU-"):
            uuid = f"GPU-{uuid}"
        return {
            "device": torch.cuda.get_device_name(index),
            "gpu_uuid": uuid,
            "driver": _nvidia_smi("driver_version"),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }
    return {"device": f"cpu:{platform.machine()}", "gpu_uuid": None, "driver": None,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def build_identity(
    *, backend: str, timer: str, bench_level: str, shape_mode: str, tuner_cache: str, direct_repeat: str,
    autotune_mode: str, autotune_record: str | None, campaign: Path, switch: str, side: str, role: str,
    round_no: int, op: str,
) -> dict[str, Any]:
    import torch
    import triton

    identity: dict[str, Any] = {
        "schema": SCHEMA,
        "backend": backend,
        "timer": timer,
        "bench_level": bench_level,
        "shape_mode": shape_mode,
        "tuner_cache": tuner_cache,
        "direct_repeat": direct_repeat,
        "autotune_mode": autotune_mode,
        "autotune_record": autotune_record,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "host": socket.gethostname(),
        "campaign": str(campaign),
        "campaign_hash": file_hash(campaign),
        "switch": switch,
        "side": side,
        "role": role,
        "round": round_no,
        "op": op,
    }
    identity.update(device_facts(backend))
    return identity


def write_identity(cell_dir: Path, identity: dict[str, Any]) -> Path:
    path = cell_dir / IDENTITY_FILE
    write_json_atomic(path, identity)
    return path
