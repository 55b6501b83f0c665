"""The campaign API: what a campaign file declares (``campaign.loader`` imports and checks one).

A campaign is a plain Python file with two module-level names::

    from pytest_abbench import Op, Switch, Case

    OPS = [Op("topk", build=build_topk, shapes={"smoke": [...], "core": [...]})]
    SWITCH = Switch(env_b={"DISABLE_MMA_V3": "1"})

This module is imported by the pytest plugin at collection time, so it must not
import torch or triton; campaign files import their kernels inside ``build``.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import inspect
import json
import math
import os
import re
import shutil
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence, Union

from pytest_abbench.core.cellconfig import LEVELS as LEVELS  # the shape sets an op declares
from pytest_abbench.core.layout import SIDES as SIDES  # campaign files and the report name the sides through here
from pytest_abbench.core.sideprobe import SideProbeError, probe_side

# Op and shape names become folder names under the root: nothing that can
# climb out of it ("/", "..") or confuse a shell or a pytest id.
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
MAX_NAME = 100  # characters of an op or level name: folder names under the root, attempts/<op>_<stamp> included


class CampaignSkipped(Exception):
    """The campaign set ``SKIP = "reason"``: it cannot run here (a missing library, no GPU), or
    ``SKIP_TIMED = "reason"`` and the session times cells (IR triage, ``--ab-ir-only``, still runs)."""


class CampaignError(Exception):
    """A campaign file declares something the plugin cannot run; names file and field."""


@dataclass(frozen=True)
class Shape:
    """One input size of an op: an id used in reports and the parameters ``build`` reads."""

    id: str
    params: Mapping[str, Any]

    @classmethod
    def coerce(cls, value: "Shape | Mapping[str, Any]") -> "Shape":
        if isinstance(value, Shape):
            return value
        params = dict(value)
        shape_id = ",".join(f"{k}={v}" for k, v in params.items())
        return cls(shape_id, params)

    def __getitem__(self, key: str) -> Any:
        return self.params[key]


@dataclass
class Case:
    """What ``build`` returns: the callable to time and an optional reference to check it against."""

    run: Callable[[], Any]
    expected: Callable[[], Any] | None = None
    atol: float = 1e-5
    rtol: float = 1e-5
    # (actual, expected) -> None, raising AssertionError; for outputs where
    # equality is too strict (topk indices under ties).
    check: Callable[[Any, Any], None] | None = None
    # What one call does, when only building the shape tells (an adapter reads it from a benchmark's own
    # GB/s or TFLOPS); wins over the op's ``work``.
    work: "Work | None" = None


BuildFn = Callable[[Shape, str], Union[Case, Callable[[], Any]]]


@dataclass(frozen=True)
class Work:
    """What one call of a shape does, for achieved throughput and % of the device's peak (``report/peak.py``):
    floating-point operations, bytes moved to and from memory, and the data type the operations run in (the peak
    table's key: ``bf16``, ``fp16``, ``tf32``, ``fp32``, ``fp8``).  Any of them may be left out."""

    flops: float | None = None
    bytes: float | None = None
    dtype: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {name: value for name, value in (("flops", self.flops), ("bytes", self.bytes), ("dtype", self.dtype))
                if value is not None}


@dataclass
class Op:
    """A named operator: ``build(shape, device)`` makes inputs and returns a Case (or a bare callable)."""

    name: str
    build: BuildFn
    shapes: Mapping[str, Sequence[Shape | Mapping[str, Any]]]
    work: Callable[[Shape], Work] | None = None  # optional: what one call of a shape does (% of peak)

    def shapes_for(self, level: str) -> list[Shape]:
        if level not in self.shapes:
            known = ", ".join(sorted(self.shapes)) or "none"
            raise CampaignError(f"op {self.name!r} has no shapes for level {level!r} (it has: {known})")
        return [Shape.coerce(s) for s in self.shapes[level]]



@dataclass
class Switch:
    """What differs between side A (baseline) and side B (switch applied).

    ``env_a``/``env_b``: environment variables set in that side's cell before
    anything imports Triton.  ``python_a``/``python_b``: another interpreter for
    that side (a second Triton build).  ``setup_a``/``setup_b``: a function of
    the campaign module called inside the cell process before any op is built
    (a compiler hook, e.g. one that edits Triton's pass pipeline).
    """

    env_a: Mapping[str, str] = field(default_factory=dict)
    env_b: Mapping[str, str] = field(default_factory=dict)
    python_a: str | None = None
    python_b: str | None = None
    setup_a: Callable[[], None] | None = None
    setup_b: Callable[[], None] | None = None
    # What each side runs when the sides run different code on the same inputs (a kernel variant, e.g. a
    # perf_report script's providers): named in ``describe`` and in the op's fingerprint.
    variant_a: str | None = None
    variant_b: str | None = None
    # The variables of env_a/env_b that only the campaign's own builds read (not Triton, not the compiler): a side's
    # build sees its value when it runs, so both sides can be built in one process (``--ab-reference``,
    # ``campaign/inprocess.py``).  A variable left out may change how Triton compiles: its sides need their own.
    build_only_env: Sequence[str] = ()

    def env(self, side: str) -> dict[str, str]:
        return dict(self.env_a if side == "A" else self.env_b)

    def variants(self) -> tuple[str, str] | None:
        """(variant_a, variant_b) where the sides run different code, else None."""
        if self.variant_a == self.variant_b:
            return None
        return str(self.variant_a), str(self.variant_b)

    def python(self, side: str) -> str | None:
        return self.python_a if side == "A" else self.python_b

    def setup(self, side: str) -> Callable[[], None] | None:
        return self.setup_a if side == "A" else self.setup_b

    def with_env_b(self, overrides: Mapping[str, str]) -> "Switch":
        """The switch with side B's environment replaced (``--ab-switch-env``)."""
        return dataclasses.replace(self, env_b=dict(overrides))

    def with_env_a(self, overrides: Mapping[str, str]) -> "Switch":
        """The switch with side A's environment replaced (``--ab-switch-env-a``)."""
        return dataclasses.replace(self, env_a=dict(overrides))

    def describe(self) -> str:
        """One line naming what side B changes; used in status.tsv and identities."""
        parts = [f"{self.variant_a} -> {self.variant_b}"] if self.variant_a != self.variant_b else []
        parts += [f"{k}={v}" for k, v in sorted(self.env_b.items())]
        parts += [f"A:{k}={v}" for k, v in sorted(self.env_a.items())]
        for side in SIDES:
            if self.python(side):
                parts.append(f"python_{side.lower()}={self.python(side)}")
            hook = self.setup(side)
            if hook is not None:
                parts.append(f"setup_{side.lower()}={hook.__name__}")
        return " ".join(parts) or "none"


@dataclass
class Campaign:
    """A loaded campaign file."""

    path: Path
    module: ModuleType
    ops: list[Op]
    switch: Switch
    skip_timed: str | None = None  # SKIP_TIMED: why its ops cannot be timed here; compiling them still works
    import_threads: list[str] = field(default_factory=list)  # threads its import started, made daemons
    # SERVER_IMPORTS: modules each side's fork server imports before it forks a cell (child/preload.py), after
    # UNUSED_IMPORTS as "!name": modules every process of the campaign finds missing
    server_imports: tuple[str, ...] = ()
    # How a file that is not a campaign became one (campaign/adapters.py), as the cells are told it; None: it is one.
    adapter: str | None = None

    def require_timing(self) -> None:
        """Skip, at collection, a campaign that says it cannot be timed here (``SKIP_TIMED``)."""
        if self.skip_timed:
            raise CampaignSkipped(f"{self.path.name}: {self.skip_timed} (IR triage still runs here: --ab-ir-only)")

    def require_level(self, level: str) -> None:
        """Refuse, at collection, an op to which the run's level gives nothing to measure."""
        for op in self.ops:
            if not op.shapes.get(level):
                known = ", ".join(f"{k} ({len(v)} shape{'' if len(v) == 1 else 's'})"
                                  for k, v in op.shapes.items()) or "none"
                raise CampaignError(f"{self.path}: op {op.name!r} has no shapes for level {level!r}, the level this "
                                    f"run measures (it has: {known}); add some, or choose a level with --ab-level")

    def check_interpreters(self) -> None:
        """Refuse, at collection, a ``SWITCH.python_a/b`` that cannot run a cell: missing, not executable, or
        without torch or triton (looked up, not imported: importing torch alone takes seconds)."""
        for side in SIDES:
            python = self.switch.python(side)
            if python is None:
                continue
            what = f"{self.path}: SWITCH.python_{side.lower()} {python!r}"
            found = shutil.which(python) if os.sep not in python else python
            if found is None:
                raise CampaignError(f"{what} is not found on PATH")
            path = Path(found)
            if not path.exists():
                raise CampaignError(f"{what} does not exist")
            if not path.is_file() or not os.access(path, os.X_OK):
                why = "it is a folder" if path.is_dir() else "no execute permission"
                raise CampaignError(f"{what} is not an executable file ({why})")
            problem = _interpreter_problem(found, tuple(sorted(self.switch.env(side).items())))
            if problem:
                raise CampaignError(f"{what} {problem}")

    def fingerprint(self, name: str, level: str) -> dict[str, str]:
        """What an op's finished cells stand for, part by part: its shapes at the levels measured, its
        ``build``, the switch.  ``--ab-resume`` runs an op again when one part differs from the root's."""
        op = self.op(name)
        return {"shapes": digest([[level, shape_set_hash(op.shapes_for(level))]]),
                "build": source_digest(op.build),
                "switch": digest({**{f"env_{s.lower()}": self.switch.env(s) for s in SIDES},
                                   **{f"python_{s.lower()}": self.switch.python(s) for s in SIDES},
                                   **{f"setup_{s.lower()}": source_digest(self.switch.setup(s)) for s in SIDES},
                                   **({"variants": [self.switch.variant_a, self.switch.variant_b]}
                                      if self.switch.variant_a or self.switch.variant_b else {})})}

    def op(self, name: str) -> Op:
        for op in self.ops:
            if op.name == name:
                return op
        raise CampaignError(f"{self.path}: no op named {name!r}")


def validate_name(name: object, what: str, path: Path) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name) or name in (".", ".."):
        raise CampaignError(
            f"{path}: {what} name {short_value(name)} is not allowed: use ASCII letters, digits, '_', '-' and '.' "
            "(it becomes a folder name under the root, on every host a worker runs on)"
        )
    if len(name) > MAX_NAME:
        raise CampaignError(f"{path}: {what} name {short_value(name)} is {len(name)} characters long; at most {MAX_NAME} "
                            "are allowed (it becomes a folder and file names under the root, with a stamp added "
                            "when a cell is set aside; file systems stop at 255 bytes)")
    if name.startswith("-"):
        raise CampaignError(f"{path}: {what} name {name!r} is not allowed: it starts with '-', so a shell, pytest's "
                            "-k and any command line that names it read it as an option; start it with a letter, "
                            "a digit or '_'")
    return name


def short_value(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _control_char(text: str) -> str | None:
    return next((c for c in text if unicodedata.category(c) == "Cc"), None)


def _check_value(value: object, where: str) -> None:
    """A shape parameter must be JSON data with a stable ``str()``: it names the shape and keys its hash."""
    if value is None or isinstance(value, (bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CampaignError(f"{where}: {value!r} is not a finite number (JSON has no NaN or infinity)")
        return
    if isinstance(value, str):
        bad = _control_char(value)
        if bad is not None:
            raise CampaignError(f"{where}: {short_value(value)} contains the control character {bad!r} "
                                "(shape ids become status rows and terminal lines)")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_value(item, f"{where}[{i}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_key(key, where)
            _check_value(item, f"{where}[{key!r}]")
        return
    raise CampaignError(f"{where}: {short_value(value)} is a {type(value).__name__}, not JSON data "
                        "(use str, int, float, bool, None, or lists and dicts of them)")


def _check_key(key: object, where: str) -> None:
    if not isinstance(key, str):
        raise CampaignError(f"{where}: parameter name {short_value(key)} is a {type(key).__name__}, not a str")
    bad = _control_char(key)
    if bad is not None:
        raise CampaignError(f"{where}: parameter name {short_value(key)} contains the control character {bad!r}")


def check_shapes(op: Op, path: Path) -> None:
    """Every shape of every level: a mapping of parameter names to JSON data, no control characters.

    Checked when the campaign is loaded, so a bad shape is a collection error
    naming file, op, level and value rather than a failure of every cell.
    """
    if not isinstance(op.shapes, Mapping):
        raise CampaignError(f"{path}: op {op.name!r}: shapes is a {type(op.shapes).__name__}, not a mapping "
                            f"of level to a list of shapes (e.g. {{'smoke': [{{'n': 1024}}]}})")
    for level, shapes in op.shapes.items():
        where = f"{path}: op {op.name!r}, level {level!r}"
        if level not in LEVELS:
            raise CampaignError(f"{path}: op {op.name!r}: unknown level {level!r} (use {', '.join(LEVELS)})")
        if not isinstance(shapes, (list, tuple)):
            raise CampaignError(f"{where}: {short_value(shapes)} is a {type(shapes).__name__}, not a list of shapes")
        for i, shape in enumerate(shapes):
            at = f"{where}, shape {i}"
            if isinstance(shape, Shape):
                if not isinstance(shape.id, str) or _control_char(shape.id) is not None:
                    raise CampaignError(f"{at}: shape id {short_value(shape.id)} must be a str without control characters")
                params: object = shape.params
            else:
                params = shape
            if not isinstance(params, Mapping):
                raise CampaignError(f"{at}: {short_value(params)} is a {type(params).__name__}, not a mapping of "
                                    "parameter names to values (e.g. {'n': 1024})")
            for key, value in params.items():
                _check_key(key, at)
                _check_value(value, f"{at}, parameter {key!r}")
        ids = [Shape.coerce(s).id for s in shapes]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise CampaignError(f"{where}: shape {twice[0]!r} is declared {ids.count(twice[0])} times (shape ids must "
                                "be unique within a level: each is a cell's row)")


def source_files(path: Path) -> list[Path]:
    """The campaign file at ``path`` and every helper beside it that it imports, directly or through a helper.

    Read from the files' import statements (anywhere in them: a build may import inside its body), not from what
    this process happened to import, so the answer does not depend on which other campaigns were collected.  A
    helper package counts whole (every ``.py`` under it); libraries installed elsewhere are not part of it.
    """
    path = Path(path).resolve()
    folder = path.parent
    found: set[Path] = set()
    todo = [path]
    while todo:
        file = todo.pop()
        if file in found:
            continue
        found.add(file)
        try:
            tree = ast.parse(file.read_bytes(), str(file))
        except (SyntaxError, ValueError, OSError):
            continue  # importing it fails anyway, and says why
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if (folder / top).is_dir():
                    todo += [p for p in (folder / top).rglob("*.py") if "__pycache__" not in p.parts]
                elif (folder / f"{top}.py").is_file():
                    todo.append(folder / f"{top}.py")
    return sorted(found)


def source_hash(path: Path) -> str:
    """A hash of ``source_files(path)``: names relative to the campaign's folder, and contents."""
    path = Path(path).resolve()
    hasher = hashlib.sha256()
    for file in source_files(path):
        data = file.read_bytes()
        hasher.update(f"{os.path.relpath(file, path.parent)}\0{len(data)}\0".encode())
        hasher.update(data)
    return hasher.hexdigest()[:16]


KEPT_OUT = "!"  # "!name" in Campaign.server_imports: a module every process of the campaign finds missing


def kept_out_name(entry: str) -> str | None:
    """The module a ``!name`` entry of ``Campaign.server_imports`` keeps out; None for a module to import."""
    return entry[len(KEPT_OUT):] if entry.startswith(KEPT_OUT) else None

def shape_set_hash(shapes: Sequence[Shape]) -> str:
    """The identity's ``shape_mode``: same level name with other shapes must not compare equal."""
    return digest([[s.id, dict(s.params)] for s in shapes])


@functools.lru_cache(maxsize=None)
def _interpreter_problem(python: str, env: tuple[tuple[str, str], ...]) -> str | None:
    """Why ``python`` (with its side's ``env``) cannot run a cell; None when it finds torch and triton."""
    try:
        missing = probe_side(python, {**os.environ, **dict(env)})["missing"]
    except SideProbeError as exc:
        return str(exc)
    return f"cannot import {', '.join(missing)} (not installed for that interpreter)" if missing else None


def digest(data: object) -> str:
    blob = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def source_digest(fn: object) -> str:
    """A function's source text, hashed; its qualified name where there is no source (a builtin, a partial)."""
    if fn is None:
        return "none"
    stated = getattr(fn, "source_digest", None)  # an adapter's build: the digest of the user's code it runs
    if isinstance(stated, str):
        return stated
    try:
        return digest(inspect.getsource(fn))  # type: ignore[arg-type]
    except (OSError, TypeError):
        return str(getattr(fn, "__qualname__", type(fn).__name__))
