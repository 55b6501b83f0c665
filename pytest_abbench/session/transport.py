"""A finished cell on the wire: what the process that ran it sends to the process that writes the root.

A cell measures into the root of the process that runs it: the campaign
root itself in a serial session, a private scratch root on an xdist worker
(its own host, its own disk; never the controller's root).  Everything the
report needs travels on the cell's test report as one JSON payload
(``ShippedCell``): the outcome (the status row), the cell folder's small
files (``results.jsonl``, ``run_identity.json``, ``cell_timing.json``), the
end of ``run.log``, the IR fingerprint, and for round 1 side A the op's
autotune and tuner records (for round 1 side B its side's supplement).  The controller, or the serial session itself,
*lands* it: the files into the cell folder, ``origin.json`` naming the host
and folder where the full log and the TTGIR stay, then the status row.
One path for one host and many.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from pytest_abbench.core.cellconfig import autotune_mode_for, side_record_mode_for
from pytest_abbench.core.cellfiles import KERNEL_COUNTS_FILE, Origin, write_origin
from pytest_abbench.core.fileio import SCHEMA_FIELD, Fields, FormatError
from pytest_abbench.core.identity import file_hash
from pytest_abbench.core.layout import (AUTOTUNE_DIR, GATE_DIR, IDENTITY_FILE, RESULTS_FILE, SCRATCH_DIR, TIMING_FILE,
                                        TUNER_RECORD_DIR, CellKey, RootLayout, ir_dir, log_tail_file, origin_file, run_log)
from pytest_abbench.core.outcome import CellOutcome
from pytest_abbench.core.tunercache import CONFIG_DIR
from pytest_abbench.core.private import private_folder

if TYPE_CHECKING:
    from pytest_abbench.session.root import CampaignRoot

SHIPPED_SCHEMA = 1  # the payload's format version: a worker may run another pytest-abbench than its controller
SHIPPED_ATTR = "abbench_shipped"  # the payload's attribute on a test report (xdist serialises report attributes)
CELL_FILES = (RESULTS_FILE, IDENTITY_FILE, TIMING_FILE, KERNEL_COUNTS_FILE)  # the cell folder files the report reads
LOG_TAIL_BYTES = 4000
SERIAL_WORKER = "main"  # the worker name of a session without xdist: it is its own controller

Blob = dict[str, str]  # {"text": ...} for UTF-8 files, {"b64": ...} for any other bytes


def to_blob(data: bytes) -> Blob:
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(data).decode("ascii")}


def from_blob(blob: Blob) -> bytes:
    return blob["text"].encode("utf-8") if "text" in blob else base64.b64decode(blob["b64"])


def read_blobs(base: Path, paths: Iterable[Path]) -> dict[str, Blob]:
    """Each existing file as a blob, keyed by its path relative to ``base``."""
    return {p.relative_to(base).as_posix(): to_blob(p.read_bytes()) for p in paths if p.is_file()}


def write_blobs(base: Path, blobs: dict[str, Blob]) -> None:
    """Write each blob under ``base``; a name that would leave ``base`` is refused."""
    for name, blob in blobs.items():
        target = base / name
        if ".." in Path(name).parts or Path(name).is_absolute():
            raise ValueError(f"refusing to write {name!r} outside {base}")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.landing")
        tmp.write_bytes(from_blob(blob))
        os.replace(tmp, target)  # a reader sees the old file or the new one


def record_files(layout: RootLayout, key: CellKey) -> list[Path]:
    """The records cell ``key`` writes and later cells replay: round 1 side A the op's autotune and library tuner
    records, round 1 side B its side's supplement; none for any other cell."""
    def tuner_files(tuner: Path) -> list[Path]:
        return sorted(p for p in tuner.rglob("*") if p.is_file()) if tuner.is_dir() else []

    files = []
    if autotune_mode_for(key.round, key.role) == "record":
        # The op's library tuner record (tuner/<op>/config_cache/...); the sides' own lie beside it, not under it.
        files += [layout.autotune_record(key.op), *tuner_files(layout.tuner_record(key.op) / CONFIG_DIR)]
    if side_record_mode_for(key.round, key.role) == "record":
        files += [layout.autotune_side_record(key.op, key.side),
                  *tuner_files(layout.tuner_side_record(key.op, key.side))]
    return files


def read_log_tail(log: Path, max_bytes: int = LOG_TAIL_BYTES) -> tuple[bytes, int]:
    """The last ``max_bytes`` of a log (whole lines where it can) and the log's size; (b"", 0) when missing."""
    try:
        with open(log, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except FileNotFoundError:
        return b"", 0
    if size > max_bytes and b"\n" in data:
        data = data[data.index(b"\n") + 1:]
    return data, size


@dataclass
class ShippedCell:
    """One finished cell as it travels: its outcome, its small files, and where the large ones stay."""

    outcome: CellOutcome
    host: str
    worker: str
    pid: int
    root: str  # the root the cell measured into (a worker's scratch root, or the campaign root itself)
    campaign_name: str = ""  # the campaign file as the test's node id names it (relative to the worker's rootdir)
    campaign_hash: str | None = None
    files: dict[str, Blob] = field(default_factory=dict)  # cell folder files by name
    root_files: dict[str, Blob] = field(default_factory=dict)  # the op's records, relative to the root
    log_tail: Blob = field(default_factory=lambda: {"text": ""})
    log_bytes: int = 0
    ir_fingerprint: str | None = None
    kernel_cache: str | None = None  # the Triton cache folder of the cell's side, on its host

    @property
    def ran(self) -> bool:
        """The child started: there is a folder, a log, files to land."""
        return bool(self.files or self.log_bytes)

    def to_json(self) -> str:
        return json.dumps({SCHEMA_FIELD: SHIPPED_SCHEMA, "outcome": json.loads(self.outcome.to_json()),
                           "host": self.host, "worker": self.worker,
                           "pid": self.pid, "root": self.root, "campaign_name": self.campaign_name,
                           "campaign_hash": self.campaign_hash, "files": self.files, "root_files": self.root_files,
                           "log_tail": self.log_tail, "log_bytes": self.log_bytes,
                           "ir_fingerprint": self.ir_fingerprint, "kernel_cache": self.kernel_cache})

    @classmethod
    def from_json(cls, text: str, where: str = "shipped cell") -> "ShippedCell":
        """The payload ``to_json`` made (a worker of another version may have made it): a FormatError names
        ``where``, the field and what it expected."""
        try:
            d = Fields(where, json.loads(text))
        except ValueError as exc:
            raise FormatError(f"{where}: not valid JSON ({exc})") from None
        d.version(SHIPPED_SCHEMA)

        def blobs(name: str) -> dict[str, Blob]:
            files = d.nested(name)
            return {path: _blob(files, path) for path in files.data}

        return cls(CellOutcome.from_fields(d.nested("outcome")), d.text("host"), d.text("worker"), d.whole("pid"),
                   d.text("root"), d.text("campaign_name"), d.text_or_none("campaign_hash"), blobs("files"),
                   blobs("root_files"), _blob(d, "log_tail"), d.whole("log_bytes"), d.text_or_none("ir_fingerprint"),
                   d.text_or_none("kernel_cache"))

    def origin(self) -> Origin:
        """``origin.json``: where the cell ran and where its full log, TTGIR and its side's kernel cache stay."""
        origin = Origin(host=self.host, worker=self.worker, pid=self.pid, cell_dir=str(self.outcome.cell_dir),
                        run_log=str(run_log(self.outcome.cell_dir)), run_log_bytes=self.log_bytes,
                        ir_dir=str(ir_dir(self.outcome.cell_dir)), ir_fingerprint=self.ir_fingerprint,
                        campaign=self.campaign_name, campaign_hash=self.campaign_hash)
        if self.kernel_cache:
            origin["kernel_cache"] = self.kernel_cache
        return origin


def _blob(fields: Fields, name: str) -> Blob:
    """A file's content as it travels: ``{"text": ...}`` or ``{"b64": ...}``."""
    blob = fields.nested(name)
    if "text" in blob.data:
        return {"text": blob.text("text")}
    return {"b64": blob.text("b64")}


def pack(outcome: CellOutcome, layout: RootLayout, worker: str, campaign_name: str = "",
         records: bool = False, kernel_cache: Path | None = None) -> ShippedCell:
    """What a cell the process just ran (or skipped) sends; ``records``: it measured, so the records it writes
    (``record_files``) go along; ``kernel_cache``: its side's Triton cache folder."""
    from pytest_abbench.checks.irgate import fingerprint_ttgir

    folder = outcome.cell_dir
    if outcome.resumed:  # finished in an earlier session: the root holds its files already
        return ShippedCell(outcome, socket.gethostname(), worker, os.getpid(), str(layout.root), campaign_name)
    tail, size = read_log_tail(run_log(folder))
    campaign = Path(outcome.campaign) if outcome.campaign else None
    return ShippedCell(
        outcome, socket.gethostname(), worker, os.getpid(), str(layout.root), campaign_name,
        file_hash(campaign) if campaign is not None and campaign.is_file() else None,
        read_blobs(folder, (folder / name for name in CELL_FILES)),
        read_blobs(layout.root, record_files(layout, outcome.key)) if records else {},
        to_blob(tail), size, fingerprint_ttgir(ir_dir(folder)) if folder.is_dir() else None,
        str(kernel_cache) if kernel_cache is not None else None)


def _rewrite_identity(identity: bytes, measured_root: str, root: Path) -> bytes:
    """The identity as the root holds it: its autotune record named under this root, where a copy is kept.

    Two cells of one op may have run on two workers (a resumed campaign);
    each replayed a copy of the same record, and the caliber check compares
    the record's path between sides.
    """
    try:
        data = json.loads(identity)
    except ValueError:
        return identity  # a corrupt identity lands as written: the caliber check names it
    record = data.get("autotune_record") if isinstance(data, dict) else None
    if not isinstance(record, str) or not record.startswith(measured_root.rstrip("/") + "/"):
        return identity
    data["autotune_record"] = str(root / record[len(measured_root.rstrip("/")) + 1:])
    return json.dumps(data, indent=1, sort_keys=True).encode() + b"\n"


def land(shipped: ShippedCell, root: "CampaignRoot", campaign: str | None = None) -> CellOutcome:
    """Write a shipped cell into ``root``: its files, ``origin.json``, then its status row (a row means a whole folder).

    Returns the outcome as the root holds it (its folder there, ``campaign``
    the controller's own path of the campaign file when it has one).
    """
    outcome = shipped.outcome
    folder = root.layout.cell(outcome.key)
    landed = replace(outcome, cell_dir=folder, campaign=campaign or outcome.campaign)
    if outcome.resumed:
        return landed  # read from this root's status.tsv: landed by the session that ran it
    in_place = Path(shipped.root).resolve() == root.path.resolve()  # a serial session measured into the root
    if shipped.ran:
        try:
            if not root.layout.lock.exists():  # writing would make the folders again, a root without its rows
                raise FileNotFoundError(root.layout.lock)
            if not in_place:
                root.set_aside(outcome.key)  # a resumed root: an earlier try is kept aside, never mixed in
                files = dict(shipped.files)
                if IDENTITY_FILE in files:
                    files[IDENTITY_FILE] = to_blob(_rewrite_identity(from_blob(files[IDENTITY_FILE]),
                                                                     shipped.root, root.path))
                files[log_tail_file(Path()).name] = shipped.log_tail
                write_blobs(folder, files)
                write_blobs(root.path, shipped.root_files)
            write_origin(origin_file(folder), shipped.origin())
        except (OSError, ValueError) as exc:
            from pytest_abbench.session.root import RootStop

            why = "the root vanished" if not root.layout.lock.exists() else str(exc)
            raise RootStop(f"cannot write cell {outcome.key} into {folder}: {why}") from None
    root.append(landed)
    return landed


# -- the worker's own root ------------------------------------------------------
def scratch_root(worker: str) -> tuple[Path, str | None]:
    """A worker's private root on its host, ``<tmp>/abbench-scratch-<uid>/<time>-<worker>-<pid>``, new per session,
    and a line where that folder could not be used.

    ``<tmp>`` is the host's temporary folder (``TMPDIR``; ``--tx ...//env:TMPDIR=DIR`` for a remote worker).  The
    scratch folder must be this user's alone (``core.private``): one another user made or can write (a pre-created
    0777 folder, a link) would let them swap the root under the session.  Then the root goes into a new private
    folder of the temporary folder, and the line says why.
    """
    folder = scratch_base()
    note = None
    try:
        private_folder(folder)
    except OSError as exc:
        folder = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_DIR}-{os.getuid()}-"))
        note = f"abbench: worker scratch {exc.strerror or exc}; this worker's root is in {folder} instead"
    return folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{worker}-{os.getpid()}", note


def scratch_base() -> Path:
    """The folder workers' roots go into: the temporary folder's ``abbench-scratch-<uid>``."""
    return Path(tempfile.gettempdir()).resolve() / f"{SCRATCH_DIR}-{os.getuid()}"


def resume_seed(layout: RootLayout, cell_files: bool = False) -> dict[str, Blob]:
    """What a worker of a resumed campaign needs from the controller's root: the rows, gate decisions, records;
    with ``cell_files`` (``--ab-rounds auto``: the worker judges the rounds done before) each cell's small files."""
    root = layout.root
    paths = [layout.status]
    for folder in (root / GATE_DIR, root / AUTOTUNE_DIR, root / TUNER_RECORD_DIR):
        if folder.is_dir():
            paths += sorted(p for p in folder.rglob("*") if p.is_file())
    if cell_files:
        paths += [folder / name for _, folder in layout.cell_folders() for name in CELL_FILES]
    return read_blobs(root, paths)


def plant_seed(layout: RootLayout, seed: dict[str, Blob]) -> None:
    """Write a resume seed into a worker's scratch root before its first cell reads it."""
    write_blobs(layout.root, seed)


# -- campaign files both sides know -------------------------------------------
class CampaignLocator:
    """The controller's own copy of a campaign file a worker names by its node id.

    A worker's node id is relative to the worker's rootdir, which is not the
    controller's under ``--rsyncdir`` and ``--tx popen//chdir=...`` or
    ``ssh=...``: there the campaign folder arrives as ``<rootdir>/<folder
    name>/...``.  A name is looked up under each rsync'd folder (by the
    folder's name), then under the controller's rootdir (a checkout at the
    same path on every host, or ``-n N`` on one host).  The content hash each
    cell reports is compared with the copy found.
    """

    def __init__(self, rootpath: Path, rsync_roots: Iterable[Path]) -> None:
        self.rootpath = rootpath
        self.rsync_roots = [Path(r).resolve() for r in rsync_roots]
        self.found: dict[str, Path | None] = {}

    def candidates(self, name: str) -> list[Path]:
        parts = Path(name).parts
        found: list[Path] = []
        for rsynced in self.rsync_roots:
            if rsynced.name in parts:
                found.append(rsynced.joinpath(*parts[parts.index(rsynced.name) + 1:]))
            found.append(rsynced / name)
        found.append(self.rootpath / name)
        return found

    def locate(self, name: str) -> Path | None:
        if name not in self.found:
            self.found[name] = next((p.resolve() for p in self.candidates(name) if p.is_file()), None)
        return self.found[name]

    def looked_in(self, name: str) -> str:
        return ", ".join(str(p) for p in self.candidates(name))



def campaign_name(nodeid: str) -> str:
    """The campaign file part of a cell test's node id."""
    return nodeid.split("::", 1)[0]
