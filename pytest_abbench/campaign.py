"""The campaign API: what a campaign file declares, and how it is loaded.

A campaign is a plain Python file with two module-level names::

    from pytest_abbench import Op, Switch, Case

    OPS = [Op("topk", build=build_topk, shapes={"smoke": [...], "core": [...]})]
    SWITCH = Switch(env_b={"DISABLE_MMA_V3": "1"})

This module is imported by the pytest plugin at collection time, so it must not
import torch or triton; campaign files import their kernels inside ``build``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence, Union

from pytest_abbench.layout import SIDES as SIDES  # campaign files and the report name the sides through here

LEVELS = ("smoke", "core", "comprehensive")
SIDE_OPTIONS = ("timer", "level", "direct_rep", "direct_warmup", "samples", "tuner_cache")
# Op and shape names become folder names under the root: nothing that can
# climb out of it ("/", "..") or confuse a shell or a pytest id.
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


class CampaignSkipped(Exception):
    """The campaign set ``SKIP = "reason"``: it cannot run here (a missing library, no GPU)."""


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


BuildFn = Callable[[Shape, str], Union[Case, Callable[[], Any]]]


@dataclass
class Op:
    """A named operator: ``build(shape, device)`` makes inputs and returns a Case (or a bare callable)."""

    name: str
    build: BuildFn
    shapes: Mapping[str, Sequence[Shape | Mapping[str, Any]]]

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
    # Measurement options overridden for one side (timer, level, direct_rep,
    # direct_warmup, samples, tuner_cache).  Each is a caliber axis: a campaign that sets
    # one is refused by the caliber check, which is the point of allowing it
    # (it reproduces the mixed-caliber trap on purpose).
    options_a: Mapping[str, str] = field(default_factory=dict)
    options_b: Mapping[str, str] = field(default_factory=dict)

    def options(self, side: str) -> dict[str, str]:
        return dict(self.options_a if side == "A" else self.options_b)

    def env(self, side: str) -> dict[str, str]:
        return dict(self.env_a if side == "A" else self.env_b)

    def python(self, side: str) -> str | None:
        return self.python_a if side == "A" else self.python_b

    def setup(self, side: str) -> Callable[[], None] | None:
        return self.setup_a if side == "A" else self.setup_b

    def with_env_b(self, overrides: Mapping[str, str]) -> "Switch":
        """The switch with side B's environment replaced (``--ab-switch-env``)."""
        return Switch(self.env_a, dict(overrides), self.python_a, self.python_b, self.setup_a, self.setup_b,
                      self.options_a, self.options_b)

    def describe(self) -> str:
        """One line naming what side B changes; used in status.tsv and identities."""
        parts = [f"{k}={v}" for k, v in sorted(self.env_b.items())]
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

    def op(self, name: str) -> Op:
        for op in self.ops:
            if op.name == name:
                return op
        raise CampaignError(f"{self.path}: no op named {name!r}")


def validate_name(name: object, what: str, path: Path) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name) or name in (".", ".."):
        raise CampaignError(
            f"{path}: {what} name {name!r} is not allowed: use letters, digits, '_', '-' and '.' "
            "(it becomes a folder name under the root)"
        )
    return name


_CAMPAIGN_MARKERS = (re.compile(r"^OPS\s*[:=]", re.M), re.compile(r"\bpytest_abbench\b"))


def looks_like_campaign(path: Path) -> bool:
    """A .py file is a campaign when it imports pytest_abbench and assigns OPS at top level.

    Read as text so that collecting a directory imports nothing but campaigns.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return all(marker.search(text) for marker in _CAMPAIGN_MARKERS)


def module_name_for(path: Path) -> str:
    """A stable module name per file: autotune records key kernels by qualified name."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]
    return f"abbench_campaign_{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}_{digest}"


def load_campaign(path: str | Path) -> Campaign:
    """Import a campaign file and validate what it declares."""
    path = Path(path).resolve()
    if not path.is_file():
        raise CampaignError(f"{path}: no such campaign file")
    name = module_name_for(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CampaignError(f"{path}: cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    # Campaign files import helpers that sit beside them (campaigns/_kernels).
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    sys.modules[name] = module
    spec.loader.exec_module(module)

    skip = getattr(module, "SKIP", None)
    if skip:
        raise CampaignSkipped(f"{path.name}: {skip}")
    ops = getattr(module, "OPS", None)
    if not isinstance(ops, (list, tuple)) or not ops:
        raise CampaignError(f"{path}: OPS must be a non-empty list of Op")
    seen: set[str] = set()
    for i, op in enumerate(ops):
        if not isinstance(op, Op):
            raise CampaignError(f"{path}: OPS[{i}] is {type(op).__name__}, not Op")
        validate_name(op.name, "op", path)
        if op.name in seen:
            raise CampaignError(f"{path}: op {op.name!r} is declared twice")
        seen.add(op.name)
        if not callable(op.build):
            raise CampaignError(f"{path}: op {op.name!r}: build is not callable")
        for level, shapes in op.shapes.items():
            if level not in LEVELS:
                raise CampaignError(f"{path}: op {op.name!r}: unknown level {level!r} (use {', '.join(LEVELS)})")
            ids = [Shape.coerce(s).id for s in shapes]
            if len(set(ids)) != len(ids):
                raise CampaignError(f"{path}: op {op.name!r}: duplicate shape ids at level {level!r}")
    switch = getattr(module, "SWITCH", Switch())
    if not isinstance(switch, Switch):
        raise CampaignError(f"{path}: SWITCH is {type(switch).__name__}, not Switch")
    for side in SIDES:
        unknown = set(switch.options(side)) - set(SIDE_OPTIONS)
        if unknown:
            raise CampaignError(f"{path}: SWITCH.options_{side.lower()}: unknown option(s) {sorted(unknown)} "
                                f"(use {', '.join(SIDE_OPTIONS)})")
    return Campaign(path, module, list(ops), switch)


def shape_set_hash(shapes: Sequence[Shape]) -> str:
    """The identity's ``shape_mode``: same level name with other shapes must not compare equal."""
    blob = json.dumps([[s.id, dict(s.params)] for s in shapes], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
