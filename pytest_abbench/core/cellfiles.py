"""A cell folder's small JSON files besides its identity and results: cell_timing.json, shares.json, origin.json.

``cell_timing.json``: where the cell's wall time went, written by the cell
process (``child/measure.py``), completed by the parent
(``spawn/runner.add_parent_timing``), read by the report (``report/cost.py``).
``shares.json``: a compile-only cell's forked shares, written by the cell,
read by the parent's precompile.  ``kernel_counts.json``: the kernels a
compile-only process loaded from Triton's cache and compiled
(``child/compilecount.py``), read by the cell that started it, the parent's
precompile and the report.  ``origin.json``: where a cell landed from
(``session/transport.py``).  ``workers.json`` (in the root, not a cell folder): an
xdist session's per-worker busy time, written by ``session/xdist_hooks.py``,
read by ``benchmarks/scale_check.py``.  Each carries the format version; a file without
one is the layout from before versions (version 1, the same fields).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from pytest_abbench.core.fileio import SCHEMA_FIELD, CorruptFileError, read_object, write_json_atomic
from pytest_abbench.core.layout import TIMING_FILE

TIMING_SCHEMA = 1
KERNEL_COUNTS_SCHEMA = 1
KERNEL_COUNTS_FILE = "kernel_counts.json"
SHARES_SCHEMA = 1
ORIGIN_SCHEMA = 1
WORKERS_SCHEMA = 1


class CellTiming(TypedDict, total=False):
    """Seconds per part of one cell (``report/cost.py`` PARTS names them); every field may be absent."""

    schema: int
    startup_s: float  # from the parent's spawn stamp to the cell being ready to build its first shape
    build_s: float  # the op's inputs
    first_call_s: float  # each shape's first call: compilation, and the autotuner's benchmarking
    autotune_bench_calls: int
    autotune_s: float  # part of first_call_s
    timing_s: float
    check_s: float
    ir_variants: int
    ir_capture_s: float  # an interpreter cell compiling its kernels again for the IR target
    total_s: float  # the child's own time, to its last stamp
    spawned_at: float  # the parent's spawn stamp (time.time())
    precompile_s: float  # added by the parent: the op's parallel compile before round 1
    precompile_wait_s: float  # added by the parent: the part of precompile_s before its jobs could start
    kernels_loaded: int  # kernels this cell's processes (its IR capture included) loaded from Triton's cache
    kernels_compiled: int  # and those they compiled
    precompile_kernels: dict[str, dict[str, int]]  # added by the parent: the precompile's counts, by side
    exit_s: float  # added by the parent: from the child's last stamp to seeing it end


def write_timing(path: Path, timing: CellTiming | dict[str, float]) -> None:
    write_json_atomic(path, {**timing, SCHEMA_FIELD: TIMING_SCHEMA})


def read_timing(path: Path) -> dict[str, Any]:
    """The timing file; a CorruptFileError (FormatError) names the file and the field when it is not one."""
    data = read_object(path)
    data.version(TIMING_SCHEMA)
    return data.declared(CellTiming)


class KernelCounts(TypedDict):
    """Kernels one process (or a cell's shares together) loaded from Triton's cache, and compiled."""

    loaded: int
    compiled: int


def write_kernel_counts(folder: Path, counts: KernelCounts) -> None:
    write_json_atomic(folder / KERNEL_COUNTS_FILE, {SCHEMA_FIELD: KERNEL_COUNTS_SCHEMA, **counts})


def read_kernel_counts(folder: Path) -> KernelCounts:
    data = read_object(folder / KERNEL_COUNTS_FILE)
    data.version(KERNEL_COUNTS_SCHEMA)
    return KernelCounts(loaded=data.whole("loaded"), compiled=data.whole("compiled"))


def kernel_counts_in(folder: Path) -> KernelCounts | None:
    """The counts a compile-only process left in ``folder``; None where it left none, or an unreadable file."""
    try:
        return read_kernel_counts(folder)
    except (CorruptFileError, OSError):
        return None


def cell_kernel_counts(folder: Path) -> KernelCounts | None:
    """The kernels a cell's own processes loaded and compiled: a compile-only cell's count file, else the counts
    a timed cell (on a GPU) keeps in its timing file; None where the cell left neither."""
    counts = kernel_counts_in(folder)
    if counts is not None:
        return counts
    try:
        timing = read_timing(folder / TIMING_FILE)
    except (CorruptFileError, OSError):
        return None
    loaded, compiled = timing.get("kernels_loaded"), timing.get("kernels_compiled")
    if isinstance(loaded, int) and isinstance(compiled, int):
        return KernelCounts(loaded=loaded, compiled=compiled)
    return None


def add_counts(*counts: KernelCounts | None) -> KernelCounts:
    """The sum of ``counts``, those missing left out."""
    return KernelCounts(loaded=sum(c["loaded"] for c in counts if c), compiled=sum(c["compiled"] for c in counts if c))


def timing_kernel_counts(timing: dict[str, Any]) -> dict[str, KernelCounts]:
    """A read timing's precompile counts by side; a field that is not the shape written is left out."""
    found: dict[str, KernelCounts] = {}
    value = timing.get("precompile_kernels")
    if isinstance(value, dict):
        for side, counts in value.items():
            if isinstance(counts, dict) and all(isinstance(counts.get(k), int) for k in ("loaded", "compiled")):
                found[str(side)] = KernelCounts(loaded=counts["loaded"], compiled=counts["compiled"])
    return found


class Shares(TypedDict):
    """A compile-only cell's forked shares: each one's seconds, and those that failed (``<name> rc <n>``)."""

    seconds: dict[str, float]
    failed: list[str]


def write_shares(path: Path, shares: Shares) -> None:
    write_json_atomic(path, {SCHEMA_FIELD: SHARES_SCHEMA, **shares})


def read_shares(path: Path) -> Shares:
    data = read_object(path)
    data.version(SHARES_SCHEMA)
    return Shares(seconds=data.number_map("seconds", {}), failed=list(data.texts("failed", [])))


class Origin(TypedDict, total=False):
    """Where a landed cell ran, and where its full run.log and TTGIR stay."""

    schema: int
    host: str
    worker: str
    pid: int
    cell_dir: str
    run_log: str
    run_log_bytes: int
    ir_dir: str
    ir_fingerprint: str | None
    campaign: str
    campaign_hash: str | None
    kernel_cache: str  # the Triton cache folder of the cell's side on ``host`` (``abbench kernels export`` reads it)


ORIGIN_REQUIRED = ("host", "worker", "cell_dir")


def write_origin(path: Path, origin: Origin) -> None:
    write_json_atomic(path, {**origin, SCHEMA_FIELD: ORIGIN_SCHEMA})


def read_origin(path: Path) -> dict[str, Any]:
    data = read_object(path)
    data.version(ORIGIN_SCHEMA)
    return data.declared(Origin, ORIGIN_REQUIRED)


class WorkerLoad(TypedDict):
    """One xdist worker's session: the GPU it pinned, its cells' child time and count, its ops in order."""

    gpu: str | None
    busy_s: float
    cells: int
    ops: list[str]


class Workers(TypedDict):
    """``workers.json``: the session's wall time and each worker's load."""

    wall_s: float
    workers: dict[str, WorkerLoad]


def write_workers(path: Path, workers: Workers) -> None:
    write_json_atomic(path, {SCHEMA_FIELD: WORKERS_SCHEMA, **workers})


def read_workers(path: Path) -> dict[str, Any]:
    """The root's workers.json; a CorruptFileError (FormatError) names the file and the field when it is not one."""
    data = read_object(path)
    data.version(WORKERS_SCHEMA)
    return data.declared(Workers, ("wall_s", "workers"))
