"""reference.jsonl: the in-process reference of ``--ab-reference``, beside the cells' verdicts.

For each op whose switch allows it (``campaign/inprocess.py``) one process
builds side A's and side B's case on the same inputs and times them
interleaved in pairs (``child/reference.py``); it appends one ``shape`` record
per shape and regime as each finishes, so a crash keeps the rows written.  The
session appends one ``process`` record when that process ends (its exit code,
a timeout, a crash) and one ``not_applicable`` record per op whose switch
needs a process per side.  The report reads them (``report/reference.py``);
nothing here changes a verdict.  The spec the session hands the process is
here too: one owner for both ends of the file.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from pytest_abbench.core.fileio import (SCHEMA_FIELD, CorruptFileError, Fields, append_jsonl, numbered_jsonl,
                                        read_object, write_bytes_atomic, write_json_atomic)

REFERENCE_SCHEMA = 1
SHAPE, PROCESS, NOT_APPLICABLE = "shape", "process", "not_applicable"  # the records' kinds
OK, ERROR = "ok", "error"  # a shape record's status


@dataclass
class ReferenceSpec:
    """What one reference process is told: the campaign and op, the cells' measurement settings, where to write."""

    campaign: str  # the campaign file
    module: str  # the module name its cells import it under
    adapter: str | None  # how a file that is no campaign file is read (campaign/adapters.py)
    op: str
    level: str
    backend: str  # cuda | interpreter
    timer: str  # the cells' timer (cudagraph, direct, wall)
    pairs: int  # A/B pairs per shape and regime: the cells' timed samples per shape
    direct_rep_ms: int
    direct_warmup_ms: int
    regime: str  # the session's --ab-regime (both: burst, then steady)
    rows: str  # reference.jsonl
    # Each side's value of the switch's variables while it is built (None: unset), ``inprocess.build_env``.
    build_env: dict[str, dict[str, str | None]] = field(default_factory=dict)
    autotune_record: str | None = None  # the op's autotune record (round 1 side A's), replayed
    autotune_side_record: str | None = None  # side B's supplement for keys side A never met, replayed
    seed: int = 0  # torch's seed before each side's build: both sides get the same random inputs

    def write(self, path: Path) -> None:
        write_json_atomic(path, {SCHEMA_FIELD: REFERENCE_SCHEMA, **asdict(self)})

    @classmethod
    def read(cls, path: Path) -> "ReferenceSpec":
        data = read_object(path)
        data.version(REFERENCE_SCHEMA)
        return cls(**{k: v for k, v in data.data.items() if k != SCHEMA_FIELD})


def append_shape(rows: Path, op: str, shape: str, regime: str, timers: Mapping[str, str],
                 pairs: list[tuple[float, float]] | None = None, error: str | None = None,
                 clocks_mhz: Mapping[str, float] | None = None, settled_alone: tuple[int, int] | None = None
                 ) -> None:
    """One shape's pairs under one regime, ``(A ms, B ms)`` each in the order timed (and each side's median SM
    clock while its windows ran, where NVML gave one; ``settled_alone``: at the power cap, each side's windows
    followed its own side's settling, (met, settlings)); or why it has none."""
    record: dict[str, Any] = {SCHEMA_FIELD: REFERENCE_SCHEMA, "kind": SHAPE, "op": op, "shape": shape,
                              "regime": regime, "status": ERROR if error else OK, "timers": dict(timers)}
    if error:
        record["error"] = error[:500]
    else:
        record["pairs"] = [[a, b] for a, b in pairs or []]
    if clocks_mhz:
        record["clocks_mhz"] = dict(clocks_mhz)
    if settled_alone is not None:
        record["settled_alone"] = {"met": settled_alone[0], "settlings": settled_alone[1]}
    append_jsonl(rows, record)


def append_process(rows: Path, op: str, rc: int, status: str, elapsed_s: float, log: str) -> None:
    """How the reference process of ``op`` ended: ``status`` is the exit code's word (ok, TIMEOUT, SEGFAULT...)."""
    append_jsonl(rows, {SCHEMA_FIELD: REFERENCE_SCHEMA, "kind": PROCESS, "op": op, "rc": rc, "status": status,
                        "elapsed_s": round(elapsed_s, 3), "log": log})


def append_not_applicable(rows: Path, op: str, campaign: str, reason: str) -> None:
    """``op``'s switch needs a process per side: no reference, and why."""
    append_jsonl(rows, {SCHEMA_FIELD: REFERENCE_SCHEMA, "kind": NOT_APPLICABLE, "op": op, "campaign": campaign,
                        "reason": reason})


def drop_op(rows: Path, op: str) -> None:
    """Remove ``op``'s records (an earlier session's, on ``--ab-resume``) before its reference runs again."""
    if not rows.exists():
        return
    kept = [line for line in rows.read_bytes().splitlines(keepends=True)
            if line.strip() and _op_of(line) != op]
    write_bytes_atomic(rows, b"".join(kept))


def _op_of(line: bytes) -> str | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None  # a torn line is kept: the reader names it
    return record.get("op") if isinstance(record, dict) else None


@dataclass
class ShapeReference:
    """One shape's in-process pairs under one regime."""

    shape: str
    regime: str
    timers: dict[str, str]
    pairs: list[tuple[float, float]] = field(default_factory=list)  # (A ms, B ms), in the order timed
    error: str | None = None
    clocks_mhz: dict[str, float] = field(default_factory=dict)  # side -> median SM clock while its windows ran
    settled_alone: tuple[int, int] | None = None  # at the power cap: (settlings that met their condition, settlings)

    @property
    def timed_pairs(self) -> list[tuple[float, float]]:
        """The pairs whose two times are positive: those the delta and each side's time are read from."""
        return [(a, b) for a, b in self.pairs if a > 0 and b > 0]

    @property
    def log_ratios(self) -> list[float]:
        """Each timed pair's ln(B/A)."""
        return [math.log(b / a) for a, b in self.timed_pairs]


@dataclass
class OpReference:
    """Everything reference.jsonl says about one op."""

    shapes: dict[tuple[str, str], ShapeReference] = field(default_factory=dict)  # (shape, regime) -> its pairs
    process: dict[str, Any] | None = None  # how its process ended (the last one), None: no record of it
    not_applicable: str | None = None  # why its switch allows no reference


def read_reference(rows: Path) -> dict[str, OpReference]:
    """Op -> its reference records; an absent file is no op.  A torn or malformed line raises naming file and line
    (``CorruptFileError``)."""
    found: dict[str, OpReference] = {}
    if not rows.exists():
        return found
    for number, record in numbered_jsonl(rows):
        data = Fields(f"{rows}:{number}", record)
        data.version(REFERENCE_SCHEMA)
        op = found.setdefault(data.text("op"), OpReference())
        kind = data.text("kind")
        if kind == SHAPE:
            shape = ShapeReference(data.text("shape"), data.text("regime", ""), data.text_map("timers", {}),
                                   _pairs(data), data.text_or_none("error"),
                                   data.number_map("clocks_mhz", {}),
                                   data.or_none("settled_alone", lambda name: _alone(data, name)))
            op.shapes[(shape.shape, shape.regime)] = shape
        elif kind == PROCESS:
            op.process = {"rc": data.whole("rc"), "status": data.text("status"),
                          "elapsed_s": data.number("elapsed_s", 0.0), "log": data.text("log", "")}
        elif kind == NOT_APPLICABLE:
            op.not_applicable = data.text("reason")
        else:
            raise CorruptFileError(f"{rows}:{number}: field 'kind': expected {SHAPE}, {PROCESS} or "
                                   f"{NOT_APPLICABLE}, got {kind!r}")
    return found


def _alone(data: Fields, name: str) -> tuple[int, int]:
    """``settled_alone``'s (met, settlings): 0 <= met <= settlings.  A record from before a side's back-to-back
    windows shared one settling names the count ``windows``: each window had its own settling then."""
    alone = data.nested(name)
    count = "settlings" if alone.or_none("settlings", alone.whole) is not None else "windows"
    met, settlings = alone.whole("met"), alone.whole(count)
    if not 0 <= met <= settlings:
        raise alone.error("met", f"a count from 0 to {count} ({settlings})", met)
    return met, settlings


def _is_pair(value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 2
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value))


def _pairs(data: Fields) -> list[tuple[float, float]]:
    value = data.data.get("pairs", [])
    if not isinstance(value, list) or not all(_is_pair(p) for p in value):
        raise data.error("pairs", "a list of [A ms, B ms] pairs", value)
    return [(float(a), float(b)) for a, b in value]
