"""Autotune records: the ``@triton.autotune`` choices a cell pinned, as one typed, versioned JSON file.

Two kinds live under ``<root>/autotune/``: the op's record (``<op>.json``),
written by round 1 side A and replayed by every other cell, and a side's
supplement (``side-B/<op>.json``), written by the first cell of side B for
the tuner keys the op's record lacks (kernels only side B calls) and
replayed by that side's later cells.  The cell child writes them
(``child/autotune_pin.py``); the caliber check and the report read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_abbench.core.fileio import SCHEMA_FIELD, Fields, FormatError, read_json, write_json_atomic

SCHEMA = 1
Ident = tuple[str, tuple[str, ...]]  # (kernel "module:qualname", its autotune key as text)


@dataclass
class AutotuneRecord:
    """Chosen configs by (kernel, key); ``side`` None for the op's record, else the side whose supplement it is."""

    entries: dict[Ident, dict[str, Any]] = field(default_factory=dict)
    side: str | None = None
    recorded_by: str = ""  # the cell that wrote it, ``r1-B``; "" in records of earlier releases
    carried_from: str = ""  # the earlier root's record round 1 side A took configs from (--ab-autotune-from)
    carried: int = 0  # how many of the entries it took from there instead of tuning
    # Each entry's kernel code as it was when tuned (``child.autotune_candidates.kernel_source``): a later session
    # carries an entry only to the same code.  Missing in records of earlier releases.
    sources: dict[Ident, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        entries = []
        for ident, cfg in sorted(self.entries.items()):
            entry: dict[str, Any] = {"kernel": ident[0], "key": list(ident[1]), "config": cfg}
            if self.sources.get(ident):
                entry["source"] = self.sources[ident]
            entries.append(entry)
        data: dict[str, Any] = {SCHEMA_FIELD: SCHEMA, "entries": entries}
        if self.side is not None:
            data["side"] = self.side
        if self.recorded_by:
            data["recorded_by"] = self.recorded_by
        if self.carried_from:
            data["carried_from"] = self.carried_from
            data["carried"] = self.carried
        return data


def read_record(path: Path) -> AutotuneRecord:
    """The record at ``path``; a FormatError (a CorruptFileError) names the file, the field and the bad value."""
    fields = Fields(str(path), read_json(path))
    fields.version(SCHEMA)
    raw = fields.data.get("entries")
    if not isinstance(raw, list):
        raise fields.error("entries", "a list of {kernel, key, config} objects", raw)
    entries: dict[Ident, dict[str, Any]] = {}
    sources: dict[Ident, str] = {}
    for index, item in enumerate(raw):
        entry = Fields(str(path), item, f"entries[{index}].")
        kernel, key = entry.text("kernel"), entry.texts("key")
        config = entry.data.get("config")
        if not isinstance(config, dict):
            raise entry.error("config", "an object (the chosen triton.Config)", config)
        _check_config(Fields(str(path), config, f"entries[{index}].config."))
        entries[(kernel, tuple(key))] = config
        source = entry.text("source", "")
        if source:
            sources[(kernel, tuple(key))] = source
    side = fields.text_or_none("side")
    carried = fields.data.get("carried", 0)
    if type(carried) is not int or not 0 <= carried <= len(entries):
        raise fields.error("carried", f"a whole number from 0 to the {len(entries)} entries", carried)
    return AutotuneRecord(entries, side, fields.text("recorded_by", ""), fields.text("carried_from", ""), carried,
                          sources)


# A triton.Config's counts, as ``config_to_dict`` writes them (null where Triton leaves one unset, as maxnreg).
_CONFIG_COUNTS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def _check_config(config: Fields) -> None:
    """A recorded config holds what a triton.Config can: whole-number counts, constexpr values that are numbers,
    text, flags or null.  A bad value is named here: the replaying cell would otherwise find no config equal to it
    and blame the kernel ("not in the kernel's config list any more")."""
    for name in _CONFIG_COUNTS:
        config.whole_or_none(name)
    kwargs = config.mapping("kwargs", {})
    for name, value in kwargs.items():
        if not (value is None or isinstance(value, (int, float, str, bool))):
            raise config.error(f"kwargs.{name}", "a number, text, true/false or null (a constexpr value)", value)


def write_record(path: Path, record: AutotuneRecord) -> None:
    write_json_atomic(path, record.to_json())


def read_record_or_none(path: Path) -> AutotuneRecord | None:
    """The record at ``path``; None when it is missing or cannot be read (the caliber check names the file)."""
    try:
        return read_record(path)
    except (OSError, FormatError, ValueError):
        return None
