"""The output check of a cell: against the reference in a side's first cell, against that cell's output after.

Computing a shape's reference (``Case.expected``, often an eager computation as large as the kernel's own)
in every cell repeats work whose answer cannot change: the side's kernels are pinned (autotune record)
and cached.  So the first cell of a side that checks a shape against its reference keeps a fingerprint
of the output it checked (``OutputRecord``, one file per op and side in the root); the side's later cells
compare their output's fingerprint with it and skip the reference.  A fingerprint is exact (the values'
bits): any change, a planted one or a kernel whose output varies between runs, sends the shape to the
full reference check again, which decides; the cell's log says which happened.

A fingerprint is cheap on any output: per tensor its shape, dtype, the sum and the sum of absolute values
(float64), and 64 values at evenly spaced positions, each written as ``float.hex`` (NaN and infinities too).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pytest_abbench.core.fileio import SCHEMA_FIELD, Fields, read_json, write_json_atomic

SCHEMA = 1
SAMPLES = 64  # values read per tensor: a change confined to a few elements shows in the sums


def fingerprint(output: Any) -> Any:
    """A JSON value that equals another output's exactly when their values' bits agree at the sampled
    positions and in the sums (tensors), or their values agree (numbers, strings, None)."""
    import torch

    if isinstance(output, torch.Tensor):
        flat = output.detach().reshape(-1)
        n = flat.numel()
        k = min(SAMPLES, n)
        # Whole-number positions: a float linspace rounds past the last element beyond 2**24 of them.
        picked = torch.arange(k, dtype=torch.long, device=flat.device) * (n - 1) // max(k - 1, 1)
        values = flat.index_select(0, picked).double().cpu().tolist() if n else []
        wide = flat.double() if not flat.is_complex() else torch.view_as_real(flat).double()
        sums = [float(wide.sum()), float(wide.abs().sum())] if n else [0.0, 0.0]
        return {"tensor": [list(output.shape), str(output.dtype)], "sums": [s.hex() for s in sums],
                "values": [float(v).hex() for v in values]}
    if isinstance(output, (list, tuple)):
        return [type(output).__name__, [fingerprint(item) for item in output]]
    if isinstance(output, dict):
        return ["dict", [[str(key), fingerprint(value)] for key, value in output.items()]]
    if isinstance(output, float):
        return ["float", output.hex()]
    if output is None or isinstance(output, (bool, int, str)):
        return [type(output).__name__, output]
    return ["object", type(output).__name__]  # what cannot be read cheaply is never called unchanged by it


@dataclass
class OutputRecord:
    """A side's checked outputs for one op, by shape id: read at the cell's start, written after each shape."""

    path: Path
    by_shape: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path) -> "OutputRecord":
        """The record at ``path``; empty where there is none yet.  A corrupt one: a FormatError (a
        CorruptFileError) naming the file and the field."""
        if not path.exists():
            return cls(path)
        fields = Fields(str(path), read_json(path))
        fields.version(SCHEMA)
        shapes = fields.data.get("shapes")
        if not isinstance(shapes, dict):
            raise fields.error("shapes", "an object: each shape id's output fingerprint", shapes)
        return cls(path, dict(shapes))

    def keep(self, shape_id: str, output: Any) -> None:
        """Keep the fingerprint of a shape's output that passed its reference check (a whole file each time:
        a crash keeps every shape written before it).  Its folder is made by the session before the cell: where it
        is gone, so is the root, and a cell never makes a root again."""
        self.by_shape[shape_id] = fingerprint(output)
        if not self.path.parent.is_dir():
            return
        write_json_atomic(self.path, {SCHEMA_FIELD: SCHEMA, "shapes": self.by_shape})

    def matches(self, shape_id: str, output: Any) -> bool | None:
        """Whether ``output`` has the kept fingerprint; None where the shape has none."""
        kept = self.by_shape.get(shape_id)
        if kept is None:
            return None
        # Through JSON both ways: a kept tuple reads back as a list.
        return bool(json.loads(json.dumps(fingerprint(output))) == kept)


def check_output(record: OutputRecord | None, shape_id: str, output: Any, has_reference: bool,
                 check_reference: Callable[[], str | None], log: Callable[[str], None]) -> tuple[str | None, bool]:
    """The shape's output check: (the problem or None, whether the kept fingerprint stood for the reference).

    Against the side's kept fingerprint where there is one; the reference decides where there is none or it
    differs, and a passing output's fingerprint is kept for the side's later cells.
    """
    if record is None or not has_reference:
        return check_reference(), False
    same = record.matches(shape_id, output)
    if same:
        return None, True
    problem = check_reference()
    if same is None:
        if problem is None:
            record.keep(shape_id, output)
        return problem, False
    if problem is None:
        log(f"[abbench] shape {shape_id}: the output differs from the side's first checked one and still matches "
            "the reference (its kernels' output varies between runs): checked against the reference")
        return None, False
    return f"the output changed since the side's first cell, which matched the reference: {problem}", False
