"""Every folder and file name under a campaign root, built and parsed in one place.

A root holds one folder per cell, ``r<round>_<role>/<op>/``, next to the
session's shared files (``status.tsv``, ``campaign.json``, the autotune and
tuner records, the IR-gate decisions, one Triton cache per side, the report).
Nothing else in the package spells these names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

SIDES = ("A", "B")
CONTROL = "A2"  # the A/A control cell: side A's configuration timed again in the same round
ROLES = (*SIDES, CONTROL)

ABBENCH_DIR = ".abbench"  # under the rootdir: the default roots, the history file, bisections
HISTORY_FILE = "history.sqlite"  # under ABBENCH_DIR: every finished root by commit (history/store.py)
BISECT_DIR = "bisect"  # under ABBENCH_DIR: one folder per `abbench bisect` (its steps' roots)

# Root files and folders.
STATUS_FILE = "status.tsv"
LOCK_FILE = ".lock"
MANIFEST_FILE = "campaign.json"
ATTEMPTS_DIR = "attempts"  # earlier tries of cells a resumed session runs again
AUTOTUNE_DIR = "autotune"
OUTPUTS_DIR = "outputs"  # each side's checked outputs per op (child/outputcheck.py)
TUNER_RECORD_DIR = "tuner"
GATE_DIR = "irgate"
TRITON_CACHE_DIR = "cache"
REPORT_MD = "report.md"
REPORT_JSON = "report.json"
REPORT_HTML = "report.html"  # the report as one self-contained page
WORKERS_FILE = "workers.json"  # an xdist session's per-worker busy time and GPU
PRECOMPILE_DIR = "precompile"  # --ab-precompile: each op's compile-only processes (logs, TTGIR)
SERVERS_DIR = "servers"  # --ab-spawn fork: each fork server's log (its imports' warnings, its death)
SCRATCH_DIR = "abbench-scratch"  # in the temporary folder: each xdist worker's own root on its host
REFERENCE_FILE = "reference.jsonl"  # --ab-reference: each shape's in-process A/B pairs, each process's end
REFERENCE_DIR = "reference"  # --ab-reference: each op's reference process: what it was told, its log

# Cell folder files.
RUN_LOG = "run.log"
MARKERS_LOG = "markers.log"  # the marker lines the plugin's own code wrote, apart from what a campaign prints
RESULTS_FILE = "results.jsonl"
KERNELS_FILE = "kernels.jsonl"  # ABBENCH_KERNEL_SPLIT: each shape's kernels per call (child/kernelprofile.py)
IDENTITY_FILE = "run_identity.json"
TIMING_FILE = "cell_timing.json"
IR_DIR = "ir"
ORIGIN_FILE = "origin.json"  # where a cell ran: host, worker, its folder there (full run.log, TTGIR)
LOG_TAIL_FILE = "run_tail.log"  # the end of run.log, for a cell whose full log stayed on its worker's host
CELL_TUNER_CACHE_DIR = "tuner_cache"
SHARES_FILE = "shares.json"  # a compile-only cell's forked shares: each one's seconds and failures

_ROUND_DIR = re.compile(r"^r(\d+)_(A|B|A2)$")
# A cell test's node id ends in its cell id (``topk[r3-B]``), with xdist's ``@group`` suffix under loadgroup.
CELL_NODEID = re.compile(r"\[r(\d+)-([AB]\d?)\](@\S+)?$")


@dataclass(frozen=True, order=True)
class CellKey:
    """One cell of a campaign: (round, op, role).

    ``role`` is A, B or A2 (the A/A control, configured as side A); ``side``
    is the switch configuration the cell runs.
    """

    round: int
    op: str
    role: str

    @property
    def side(self) -> str:
        return self.role[0]

    @property
    def cell_id(self) -> str:
        """The id in test names and messages: ``r3-B``."""
        return f"r{self.round}-{self.role}"

    @property
    def round_dir(self) -> str:
        return f"r{self.round}_{self.role}"

    def __str__(self) -> str:
        return f"{self.op}[{self.cell_id}]"


class RootLayout:
    """The paths of one campaign root."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __repr__(self) -> str:
        return f"RootLayout({str(self.root)!r})"

    @property
    def status(self) -> Path:
        return self.root / STATUS_FILE

    @property
    def lock(self) -> Path:
        return self.root / LOCK_FILE

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST_FILE

    @property
    def attempts(self) -> Path:
        return self.root / ATTEMPTS_DIR

    @property
    def report_md(self) -> Path:
        return self.root / REPORT_MD

    @property
    def report_json(self) -> Path:
        return self.root / REPORT_JSON

    @property
    def report_html(self) -> Path:
        return self.root / REPORT_HTML

    @property
    def workers(self) -> Path:
        return self.root / WORKERS_FILE

    @property
    def reference(self) -> Path:
        """The in-process reference's rows (``core/reference.py``)."""
        return self.root / REFERENCE_FILE

    def reference_spec(self, op: str) -> Path:
        """What the reference process of ``op`` is told (``core/reference.ReferenceSpec``)."""
        return self.root / REFERENCE_DIR / f"{op}.json"

    def reference_log(self, op: str) -> Path:
        return self.root / REFERENCE_DIR / f"{op}.log"

    def reference_tuner_cache(self, op: str) -> Path:
        """The reference process's library tuner cache, seeded from the op's record as a replay cell's is."""
        return self.root / REFERENCE_DIR / f"{op}_tuner_cache"

    def precompile(self, op: str) -> Path:
        return self.root / PRECOMPILE_DIR / op

    @property
    def servers(self) -> Path:
        return self.root / SERVERS_DIR

    def autotune_record(self, op: str) -> Path:
        """Round 1 side A's autotune choices, replayed by every other cell of the op."""
        return self.root / AUTOTUNE_DIR / f"{op}.json"

    def autotune_side_record(self, op: str, side: str) -> Path:
        """Side ``side``'s autotune choices for the keys the op's record lacks (kernels only that side calls):
        written by that side's first cell, replayed by its later ones.  A folder per side: no op name collides."""
        return self.root / AUTOTUNE_DIR / f"side-{side}" / f"{op}.json"

    def output_record(self, op: str, side: str) -> Path:
        """The fingerprints of side ``side``'s outputs that passed the reference check, kept by its first cell:
        its later cells compare theirs and skip the reference (``child/outputcheck.py``)."""
        return self.root / OUTPUTS_DIR / f"side-{side}" / f"{op}.json"

    def tuner_record(self, op: str) -> Path:
        """Round 1 side A's library tuner cache (FlagGems' LibTuner), seeding the op's other cells."""
        return self.root / TUNER_RECORD_DIR / op

    def tuner_side_record(self, op: str, side: str) -> Path:
        """Side ``side``'s library tuner cache as its first cell left it: the op's record and the keys only that
        side tuned, seeding that side's later cells."""
        return self.root / TUNER_RECORD_DIR / f"side-{side}" / op

    def gate_decision(self, op: str) -> Path:
        return self.root / GATE_DIR / f"{op}.json"

    def triton_cache(self, side: str) -> Path:
        """One Triton cache per side: many switches are not in Triton's cache key."""
        return self.root / TRITON_CACHE_DIR / f"triton_{side}"

    def cell(self, key: CellKey) -> Path:
        return self.root / key.round_dir / key.op

    def attempt(self, key: CellKey, stamp: int) -> Path:
        """Where a crashed or failed try of a cell is set aside when a resumed session runs it again."""
        return self.attempts / f"{key.round_dir}_{key.op}_{stamp}"

    def op_attempt(self, op: str, stamp: int) -> Path:
        """Where a resumed session sets aside every file of an op whose definition changed (a root of its own)."""
        return self.attempts / f"{op}_{stamp}"

    def key_of(self, folder: Path) -> CellKey | None:
        """The cell a folder ``<root>/r<k>_<role>/<op>`` holds; None for anything else."""
        match = _ROUND_DIR.match(folder.parent.name)
        if not match:
            return None
        return CellKey(int(match.group(1)), folder.name, match.group(2))

    def cell_folders(self) -> Iterator[tuple[CellKey, Path]]:
        """Every cell folder present on disk, in name order."""
        if not self.root.is_dir():
            return
        for round_dir in sorted(self.root.iterdir()):
            if not round_dir.is_dir() or not _ROUND_DIR.match(round_dir.name):
                continue
            for folder in sorted(p for p in round_dir.iterdir() if p.is_dir()):
                key = self.key_of(folder)
                if key is not None:
                    yield key, folder


def cell_key(nodeid: str) -> CellKey | None:
    """The cell a test runs, read from its node id (an xdist controller collects nothing): its op is the test's name."""
    match = CELL_NODEID.search(nodeid)
    if match is None:
        return None
    return CellKey(int(match.group(1)), nodeid[: match.start()].rsplit("::", 1)[-1], match.group(2))


def run_log(cell_dir: Path) -> Path:
    return cell_dir / RUN_LOG


def markers_log(cell_dir: Path) -> Path:
    return cell_dir / MARKERS_LOG


def results_file(cell_dir: Path) -> Path:
    return cell_dir / RESULTS_FILE


def identity_file(cell_dir: Path) -> Path:
    return cell_dir / IDENTITY_FILE


def ir_dir(cell_dir: Path) -> Path:
    return cell_dir / IR_DIR


def share_dir(cell_dir: Path, index: int, count: int) -> Path:
    """Where share ``index`` (from 0) of ``count`` compiles; its IR is moved into the cell's ``ir/`` after."""
    return cell_dir / f"share-{index + 1}of{count}"


def origin_file(cell_dir: Path) -> Path:
    return cell_dir / ORIGIN_FILE


def log_tail_file(cell_dir: Path) -> Path:
    return cell_dir / LOG_TAIL_FILE
