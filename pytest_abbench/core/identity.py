"""run_identity.json as the parent reads it: its name, the axes compared between sides, the notes.

The cell process builds and writes the file (``pytest_abbench.child.identity``);
this module is what both sides share, so it imports neither torch nor triton.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, TypedDict

from pytest_abbench.core.fileio import read_object
from pytest_abbench.core.layout import IDENTITY_FILE as IDENTITY_FILE  # the name readers of identities import here

IDENTITY_SCHEMA = 1

# Axes that must be equal between sides (autotune_mode is judged by rule in caliber.py).
CALIBER_AXES = ("backend", "device", "timer", "bench_level", "shape_mode", "tuner_cache", "direct_repeat")
# Axes added later: compared like the others, but an identity written before them may lack them.
LATER_AXES = ("layout_shift", "spawn", "regime")
# The GPU's clock and power settings, read (never set) through NVML by the cell: a number (MHz, W) where NVML gave
# one, else ``not recorded (<why>)``.  Two sides that both recorded one must agree; one not recorded on either side
# (no GPU, no NVML, a device that does not support the query) is no mismatch.  NVML can set locked clocks but has
# no query for them: ``locked_clocks`` always says so, and never compares.
GPU_SETTING_AXES = ("app_clock_sm_mhz", "app_clock_mem_mhz", "locked_clocks", "power_limit_w")
NOT_RECORDED = "not recorded"
INFO_FIELDS = ("torch", "triton", "server_imports", "driver", "python", "host", "gpu_uuid", "campaign_hash")


def not_recorded(why: str) -> str:
    """A GPU setting's value when NVML did not give it."""
    return f"{NOT_RECORDED} ({why})"


def recorded(value: object) -> bool:
    """Whether a GPU setting holds a reading (a number); a missing field or ``not recorded (...)`` does not."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def file_hash(path: Path) -> str:
    """Short content hash naming a campaign file or an autotune record in identities."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def record_key(record: object) -> str | None:
    """Which autotune record an identity names, as its place in a root (``autotune/<op>.json``).

    Cells write the record's path relative to their folder; roots of earlier
    releases hold it absolute.  Either way two cells of one root (moved or
    not) name the same record by the same key; its content is compared by
    hash (``autotune_record_hash``).
    """
    if not isinstance(record, str) or not record:
        return None
    return "/".join(Path(record).parts[-2:])


# Every identity has these: without them nothing says what its numbers mean.
REQUIRED_FIELDS = CALIBER_AXES + ("autotune_mode",)


class RunIdentity(TypedDict, total=False):
    """run_identity.json: what one cell's numbers mean (written by ``child/identity.py``, read by the caliber check).

    Only the REQUIRED_FIELDS are in every identity; an identity from before a
    field was added lacks it.  A field not declared here is kept as it is.
    """

    schema: int
    backend: str
    device: str
    timer: str
    bench_level: str
    shape_mode: str  # the hash of the shapes measured
    tuner_cache: str
    direct_repeat: str
    autotune_mode: str
    layout_shift: str  # on | off
    spawn: str  # fork | exec
    regime: str  # burst | steady | both (core/regimes.py)
    autotune_record: str | None
    autotune_record_hash: str  # replay only: the record's content as it was read
    autotune_side_mode: str  # side B: record | replay of its supplement (the keys the op's record lacks)
    autotune_side_record: str  # the supplement, relative to the cell's folder
    autotune_side_record_hash: str  # replay: as read ("missing": none); record: as written at the cell's end
    tuner_cache_base: str  # started from its side's library tuner record: the op's record that one grew from
    tuner_cache_seed: str  # a per-cell library tuner cache: the record it started from ("fresh": none)
    torch: str
    triton: str
    server_imports: str  # the campaign's SERVER_IMPORTS as this cell ran them: "name==version ..."
    imported_by_server: str  # those its fork server had imported ("" when none: the cell imported them)
    python: str
    python_executable: str
    host: str
    campaign: str
    campaign_hash: str
    switch: str
    side: str
    role: str
    round: int
    op: str
    gpu_uuid: str | None
    driver: str | None
    cuda_visible_devices: str | None
    # GPU_SETTING_AXES: a number, or not_recorded(why)
    app_clock_sm_mhz: int | str  # the SM application clock target (nvmlDeviceGetApplicationsClock)
    app_clock_mem_mhz: int | str  # the memory application clock target
    locked_clocks: str  # NVML has no query for clocks locked with nvidia-smi -lgc / -lmc: always not_recorded(why)
    power_limit_w: float | str  # the power limit the card enforces (nvmlDeviceGetEnforcedPowerLimit)


def read_identity(path: Path) -> dict[str, Any]:
    """A cell's identity; a FormatError (a CorruptFileError) names the file and the field when it is not one.

    Each field RunIdentity declares is checked against its declared type; an
    identity without a ``schema`` is the layout from before versions (1).
    """
    data = read_object(path)
    data.version(IDENTITY_SCHEMA)
    return data.declared(RunIdentity, REQUIRED_FIELDS)
