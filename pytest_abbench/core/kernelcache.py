"""The persistent per-side kernel cache (``--ab-kernel-cache``): where it lives and what its key holds.

A root used to keep one Triton cache per side for its own session only, so
every run of a campaign compiled everything again.  The persistent cache
keeps a side's compiled kernels across runs, in a folder per key under
``$XDG_CACHE_HOME/pytest-abbench/kernels`` (``~/.cache`` without it).  The
key holds everything that can change the code a side compiles and that
Triton's own cache key may leave out: the side's name (so the two sides of a
switch never share a folder, even if the rest of their keys were equal), its
interpreter and Triton build (version, location, the library's size and
time), every variable its switch sets, the Triton/MLIR/LLVM variables it
inherits, the campaign's source (the campaign file and its helpers: a setup
hook that edits the pipeline is not in Triton's key on 3.6), and the device.

Two sessions may use one folder at once: Triton writes each cache file
through a temporary file and ``os.replace``, and a kernel's group file last,
so a reader sees a whole kernel or none and compiles it itself.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pytest_abbench.core import envnames
from pytest_abbench.core.fileio import SCHEMA_FIELD, write_json_atomic
from pytest_abbench.core.usercache import user_cache

OFF = "off"
AUTO = "auto"
KEY_SCHEMA = 1
KEY_FILE = "abbench-key.json"  # in each key's folder: what the key was made of, for a person to read
# In side A's key folder, beside the kernels (a file, not a folder: no kernel count takes it for one), the autotune
# record the last round 1 on this key wrote per op (``kept_tuning``); `abbench kernels export` carries it too.
KEPT_TUNING_PREFIX = "abbench-autotune-"
# Inherited variables that may change what Triton compiles (its knobs, MLIR's and LLVM's); the cache folder
# itself and the per-pass dump path are where things go, not what is compiled.
KEYED_PREFIXES = ("TRITON_", "MLIR_", "LLVM_")
UNKEYED = frozenset({envnames.TRITON_CACHE_DIR, envnames.MLIR_DUMP_PATH})


def kernel_cache_option(text: str) -> str:
    """argparse type for --ab-kernel-cache: ``auto`` (the user's cache folder), ``off``, or a folder."""
    if text in (AUTO, OFF):
        return text
    if not text.strip():
        raise argparse.ArgumentTypeError("expected auto, off or a folder, got an empty value")
    return os.path.abspath(os.path.expanduser(text))


def kernel_file_option(text: str) -> Path:
    """argparse type for --ab-kernel-import: a kernel file ``abbench kernels export`` wrote (read at resolution)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a kernel file, got an empty value")
    path = Path(os.path.abspath(os.path.expanduser(text)))
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r}: no such file")
    return path


def default_base(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/pytest-abbench/kernels``, ``~/.cache/pytest-abbench/kernels`` without it."""
    return user_cache(environ) / "kernels"


def resolve_base(option: str) -> Path | None:
    """The folder holding the key folders for a resolved option value; None for ``off``."""
    if option == OFF:
        return None
    return default_base() if option == AUTO else Path(option)


def keyed_env(env: Mapping[str, str]) -> dict[str, str]:
    """The inherited variables of a side's environment that go into its key (KEYED_PREFIXES)."""
    return {k: v for k, v in env.items() if k.startswith(KEYED_PREFIXES) and k not in UNKEYED}


@dataclass(frozen=True)
class KernelCacheKey:
    """Everything that names one side's compiled code; ``folder_name`` is its folder under the base."""

    campaign: str  # the campaign file's stem: a person can tell the folders apart
    side: str
    triton: Mapping[str, str]  # python, version, location, build (``spawn.kernelcache.probe_triton``)
    switch_env: Mapping[str, str]
    env: Mapping[str, str]  # inherited KEYED_PREFIXES variables
    campaign_source: str  # campaign.model.source_hash
    device: str  # "interpreter", or "<GPU name> cuda:<capability>"

    def to_json(self) -> dict[str, Any]:
        return {"campaign": self.campaign, "side": self.side, "triton": dict(self.triton),
                "switch_env": dict(self.switch_env), "env": dict(self.env),
                "campaign_source": self.campaign_source, "device": self.device}

    @property
    def digest(self) -> str:
        blob = json.dumps(self.to_json(), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]

    @property
    def folder_name(self) -> str:
        stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.campaign)[:60]
        return f"{stem}-{self.side}-{self.digest}"


def key_folder(base: Path, key: KernelCacheKey) -> Path:
    """The key's folder under ``base``, created, with its key written beside the kernels (atomically: two
    sessions may write it at once, with the same content)."""
    folder = base / key.folder_name
    folder.mkdir(parents=True, exist_ok=True)
    record = folder / KEY_FILE
    if not record.exists():
        write_json_atomic(record, {SCHEMA_FIELD: KEY_SCHEMA, **key.to_json()})
    return folder


def kept_tuning(folder: Path, op: str) -> Path:
    """Where side A's key folder keeps ``op``'s autotune record from the last round 1 on this key: a later
    session's round 1 side A carries those configs instead of tuning them again (``--ab-retune``: it tunes).

    The key holds what changes the code side A compiles on this device; a key the record lacks, or a config the
    kernel no longer has, is tuned as ever (``child.autotune_pin``)."""
    return folder / f"{KEPT_TUNING_PREFIX}{op}.json"
