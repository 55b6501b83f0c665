"""Building run_identity.json in the cell process: everything that decides what its latency numbers mean.

The file's name and the axes the parent compares live in ``pytest_abbench.core.identity``.
"""

from __future__ import annotations

import os
import platform
import re
import socket
import sys
from pathlib import Path

from pytest_abbench.child.gpustate import GpuSampler, open_sampler
from pytest_abbench.core import envnames, gpuinfo, tunercache
from pytest_abbench.core.cellconfig import CellConfig
from pytest_abbench.core.fileio import write_json_atomic
from pytest_abbench.core.identity import IDENTITY_FILE, IDENTITY_SCHEMA, RunIdentity, file_hash


DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")
_DRIVER_VERSION = re.compile(r"\s(\d+\.\d+(?:\.\d+)?)\s")


def driver_version(version_file: Path = DRIVER_VERSION_FILE) -> str | None:
    """The NVIDIA kernel driver's version, read from /proc (microseconds); NVML (milliseconds) where it is absent.

    The file's first line reads ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  <date>``
    (the open modules: ``... Open Kernel Module for x86_64  580.159.04  Release Build ...``).
    """
    try:
        first = version_file.read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return gpuinfo.driver_version()
    found = _DRIVER_VERSION.search(first)
    return found.group(1) if found else gpuinfo.driver_version()


def device_facts(backend: str) -> RunIdentity:
    """Device name, driver and GPU UUID of the device this process times on."""
    import torch

    if backend == "cuda":
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        uuid = str(getattr(props, "uuid", "")) or None
        if uuid and not uuid.startswith("GPU-"):
            uuid = f"GPU-{uuid}"
        return RunIdentity(device=torch.cuda.get_device_name(index), gpu_uuid=uuid, driver=driver_version(),
                           cuda_visible_devices=os.environ.get(envnames.CUDA_VISIBLE_DEVICES))
    return RunIdentity(device=f"cpu:{platform.machine()}", gpu_uuid=None, driver=None,
                       cuda_visible_devices=os.environ.get(envnames.CUDA_VISIBLE_DEVICES))


def build_identity(config: CellConfig, shape_mode: str, tuner_dir: Path | None,
                   gpu: GpuSampler | None = None) -> RunIdentity:
    """This cell's identity: its caliber axes, the versions and host it ran on, the GPU's clock and power settings,
    and what it replays.

    ``shape_mode`` is the hash of the shapes it measures; ``tuner_dir`` its
    pinned library tuner cache (None when the cache is shared or absent);
    ``gpu`` the cell's NVML sampler (opened here when not given).
    """
    import torch
    import triton

    record = config.autotune_file
    identity: RunIdentity = {
        "schema": IDENTITY_SCHEMA,
        "backend": config.backend,
        "timer": config.timer,
        "bench_level": config.level,
        "shape_mode": shape_mode,
        "tuner_cache": config.tuner_cache,
        "direct_repeat": f"rep={config.direct_rep}ms,warmup={config.direct_warmup}ms",
        "autotune_mode": config.autotune_mode,
        "layout_shift": "on",  # every cell shifts its buffers' layout (child/layout_shift.py)
        "spawn": config.spawn,
        "regime": config.regime,
        # Relative to the cell's folder: a root that is moved or copied keeps comparing its old cells' identities
        # with the new ones (core.identity.record_key reads both this and the absolute form of older roots).
        "autotune_record": os.path.relpath(record, config.out) if record else None,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "host": socket.gethostname(),
        "campaign": str(config.campaign),
        "campaign_hash": file_hash(config.campaign),
        "switch": config.switch,
        "side": config.side,
        "role": config.role,
        "round": config.round_no,
        "op": config.op,
    }
    identity.update(device_facts(config.backend))
    settings = (gpu or open_sampler(config.backend)).settings()  # read only: a cell never sets clocks or limits
    identity.update(settings)  # type: ignore[typeddict-item]
    if config.autotune_mode == "replay" and record is not None and record.exists():
        identity["autotune_record_hash"] = file_hash(record)
    side_record = config.autotune_side_file
    if config.autotune_side_mode is not None and side_record is not None:
        identity["autotune_side_mode"] = config.autotune_side_mode
        identity["autotune_side_record"] = os.path.relpath(side_record, config.out)
        if config.autotune_side_mode == "replay":
            identity["autotune_side_record_hash"] = file_hash(side_record) if side_record.exists() else "missing"
    if tuner_dir is not None:
        # Which record this cell's library tuner starts from ("fresh": it tunes from nothing).
        identity["tuner_cache_seed"] = tunercache.content_hash(tuner_dir) or "fresh"
        if config.tuner_seed_base is not None:
            # Started from its side's record: the op's record that one grew from is what side A started from.
            identity["tuner_cache_base"] = config.tuner_seed_base
    return identity


def write_side_record_hash(identity: RunIdentity, config: CellConfig) -> bool:
    """After a cell recorded its side's supplement: the hash of what it wrote (False: it wrote nothing)."""
    record = config.autotune_side_file
    if record is None or not record.exists():
        return False
    identity["autotune_side_record_hash"] = file_hash(record)
    return True


def write_identity(cell_dir: Path, identity: RunIdentity) -> Path:
    """Written atomically: a cell killed mid-write leaves no half identity for the caliber check to read."""
    path = cell_dir / IDENTITY_FILE
    write_json_atomic(path, identity)
    return path
