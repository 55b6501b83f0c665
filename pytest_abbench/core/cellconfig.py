"""What one cell process is told: a frozen ``CellConfig`` and the one argv format for it.

The plugin builds a ``CellConfig`` and runs ``python -m <config.module> *config.to_argv()`` (``module_argv``):
``pytest_abbench.child`` for every campaign but a pytest-benchmark one, whose cells run the user's test under
pytest and so start through their own module; the child reads it back with ``CellConfig.from_argv``.
Every parameter, its flag, its choices and its default are declared once, in
the dataclass below.  The plugin imports this module at pytest start-up, so it
imports neither torch nor triton, nor anything from ``pytest_abbench.child``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from pytest_abbench.core.layout import ROLES, SIDES
from pytest_abbench.core.regimes import DEFAULT_REGIME, REGIME_CHOICES

CHILD_MODULE = "pytest_abbench.child"
# A pytest-benchmark campaign's cells (its adapter kind, campaign/benchmark_tests.py) run the user's test under
# pytest: they start through a module of the pytest side, so no other cell ever loads pytest.
PYTEST_BENCHMARK_ADAPTER = "pytest-benchmark"
PYTEST_BENCHMARK_CELL_MODULE = "pytest_abbench.session.benchmark_cell"
BACKENDS = ("cuda", "interpreter")
LEVELS = ("smoke", "core", "comprehensive")  # shape sets, smallest first
TIMERS = ("cudagraph", "direct", "wall")
# off: the autotuner runs unpinned (a child started by hand); the plugin always records or replays.
# compile-all: a compile-only precompile process compiles every candidate config and chooses nothing.
AUTOTUNE_MODES = ("record", "replay", "off", "compile-all")
# fork: forked from a server that imported torch and Triton once (pytest_abbench/spawn/forkserver.py); exec: a fresh process.
SPAWN_METHODS = ("fork", "exec")
# The length of a steady window and of a direct-timer window (--ab-direct-rep).  50 ms: ten of them follow each
# shape's settling, and on the H200 100 ms windows made topk's warm 6-round re-run 133 s against 97 s with no
# change in its verdict (docs/explanation/cost.md); A/A under steady stayed clean (docs/explanation/regimes.md).
DEFAULT_DIRECT_REP_MS = 50
DEFAULT_DIRECT_WARMUP_MS = DEFAULT_DIRECT_REP_MS // 2  # --ab-direct-rep sets both
DEFAULT_TUNER_CACHE = "per-cell"
# A cell that tunes times each autotune candidate for this many ms of repeats first, then the ones near the
# fastest for Triton's own 25 + 100 ms (child/autotune_candidates.py ``screened_tuning``; --ab-autotune-screen,
# 0: off).
DEFAULT_AUTOTUNE_SCREEN_MS = 20
AUTOTUNE_FINALIST_TOL = 0.05  # a candidate this much slower than the fastest over the screen is not timed in full
TRITON_BENCH_REP_MS = 100  # triton.testing.do_bench's repeats: a screen as long saves nothing (the ceiling)


def autotune_mode_for(round_no: int, role: str) -> str:
    """``record`` for round 1's side A cell, ``replay`` for every other cell (A/A control included).

    One cell tunes and writes the record (Triton's autotune choices, the
    library tuner's cache); every other cell replays it, so both sides time the
    same configs: two independent tunings may choose differently, and that
    difference would read as an effect of the switch.
    """
    return "record" if round_no == 1 and role == "A" else "replay"


# The side whose cells keep a supplement record: side A's keys are all in the op's record (its round 1 cell
# writes it), side B may call kernels side A never calls (a kernel-variant switch).
SUPPLEMENT_SIDE = "B"
SIDE_RECORD_MODES = ("record", "replay")


def side_record_mode_for(round_no: int, role: str) -> str | None:
    """How a cell uses its side's supplement record: ``record`` for round 1's side B, ``replay`` for side B's later
    cells, None for side A's cells (A/A control included).

    A tuner key the op's record lacks is one only side B meets: round 1 side B
    tunes it once and records it, so B's later cells time the config B's first
    cell chose instead of tuning again (which may choose differently).
    """
    if role != SUPPLEMENT_SIDE:
        return None
    return "record" if round_no == 1 else "replay"


def _shape_ids(text: str) -> list[str]:
    """``--skip-shapes``: a JSON list of shape ids (ids hold commas and spaces: ``M=512,N=512``)."""
    try:
        ids = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise argparse.ArgumentTypeError("expected a JSON list of shape ids (strings)")
    return ids


def skip_shapes_arg(shapes: "Sequence[str]") -> str | None:
    """``CellConfig.skip_shapes`` for ``shapes`` (None for none)."""
    return json.dumps(sorted(shapes)) if shapes else None


@dataclass(frozen=True)
class _Flag:
    """How one CellConfig field is spelled on the command line."""

    flag: str
    parse: Callable[[str], Any]
    choices: tuple[str, ...] | None
    help: str


def _flag(flag: str, parse: Callable[[str], Any] = str, choices: tuple[str, ...] | None = None,
          help: str = "") -> dict[str, _Flag]:
    return {"argv": _Flag(flag, parse, choices, help)}


@dataclass(frozen=True)
class CellConfig:
    """Every parameter of one cell process: which op, round and side, where to write, how to time."""

    campaign: Path = field(metadata=_flag("--campaign", Path))
    op: str = field(metadata=_flag("--op"))
    round_no: int = field(metadata=_flag("--round", int))
    side: str = field(metadata=_flag("--side", choices=SIDES, help="the switch configuration this cell runs"))
    role: str = field(metadata=_flag("--role", choices=ROLES, help="the cell's place in its round (A2: A/A control)"))
    out: Path = field(metadata=_flag("--out", Path, help="the cell folder"))
    backend: str = field(metadata=_flag("--backend", choices=BACKENDS))
    timer: str = field(metadata=_flag("--timer", choices=TIMERS))
    level: str = field(metadata=_flag("--level", choices=LEVELS))
    samples: int = field(default=3, metadata=_flag("--samples", int, help="timed samples per shape (wall timer)"))
    direct_rep: int = field(default=DEFAULT_DIRECT_REP_MS,
                            metadata=_flag("--direct-rep", int, help="do_bench rep in ms"))
    direct_warmup: int = field(default=DEFAULT_DIRECT_WARMUP_MS,
                               metadata=_flag("--direct-warmup", int, help="do_bench warmup in ms"))
    autotune_mode: str = field(default="off", metadata=_flag("--autotune-mode", choices=AUTOTUNE_MODES))
    autotune_file: Path | None = field(default=None, metadata=_flag("--autotune-file", Path))
    autotune_seed_file: Path | None = field(default=None, metadata=_flag(
        "--autotune-seed-file", Path, help="an earlier record of the op (--ab-autotune-from's root, or side A's "
                                           "kernel cache): a recording cell takes a key's config from it, untuned, "
                                           "where the kernel still has it"))
    autotune_screen: int = field(default=DEFAULT_AUTOTUNE_SCREEN_MS, metadata=_flag(
        "--autotune-screen", int, help="ms each autotune candidate is timed for before the ones near the fastest "
                                       "are timed in full (0: every one in full)"))
    autotune_side_mode: str | None = field(default=None, metadata=_flag(
        "--autotune-side-mode", choices=SIDE_RECORD_MODES,
        help="record or replay the side's supplement record: the keys the op's record lacks"))
    autotune_side_file: Path | None = field(default=None, metadata=_flag(
        "--autotune-side-file", Path, help="the side's supplement record (core/autotunerecord.py)"))
    output_record: Path | None = field(default=None, metadata=_flag(
        "--output-record", Path, help="the side's checked-output fingerprints: compared where a shape has one, "
                                      "kept where not (child/outputcheck.py); without it every cell computes "
                                      "the reference"))
    tuner_seed_base: str | None = field(default=None, metadata=_flag(
        "--tuner-seed-base", help="the op's library tuner record (hash) the side's record this cell starts from "
                                  "grew from (identity tuner_cache_base)"))
    switch: str = field(default="none", metadata=_flag("--switch", help="what side B changes, for the identity"))
    tuner_cache: str = field(default=DEFAULT_TUNER_CACHE,
                             metadata=_flag("--tuner-cache", help="identity axis tuner_cache: per-cell or shared:DIR"))
    ir_target: str | None = field(default=None, metadata=_flag(
        "--ir-target", help="without a GPU: compile kernels for this target (e.g. cuda:90) to capture TTGIR"))
    ir_only: bool = field(default=False, metadata=_flag(
        "--ir-only", bool, help="compile every shape's kernels for --ir-target; time nothing"))
    ir_level: str | None = field(default=None, metadata=_flag(
        "--ir-level", choices=LEVELS, help="the shape set IR capture compiles (default: --level)"))
    shard: str | None = field(default=None, metadata=_flag(
        "--shard", help="I/N: only the shapes whose index is I modulo N (a parallel precompile's share)"))
    shares: int = field(default=1, metadata=_flag(
        "--shares", int, help="--ir-only: fork this many processes, each compiling share I/N of the shapes"))
    candidate_procs: int = field(default=1, metadata=_flag(
        "--candidate-procs", int, help="--autotune-mode compile-all: compile an autotuned kernel's candidates in "
                                       "this many processes side by side (this one and forks of it)"))
    spawn: str = field(default="exec", metadata=_flag(
        "--spawn", choices=SPAWN_METHODS, help="how the plugin started this process (identity axis spawn)"))
    regime: str = field(default=DEFAULT_REGIME, metadata=_flag(
        "--regime", choices=REGIME_CHOICES, help="the timing regime (core/regimes.py; identity axis regime)"))
    campaign_module: str | None = field(default=None, metadata=_flag(
        "--campaign-module", help="the campaign's module name as the session loaded it (from its path relative to "
                                  "the rootdir): autotune records key kernels by it"))
    skip_shapes: str | None = field(default=None, metadata=_flag(
        "--skip-shapes", lambda text: _shape_ids(text) and text,
        help="a JSON list of shape ids this cell does not run: they failed alike on both sides in round 1"))
    adapter: str | None = field(default=None, metadata=_flag(
        "--adapter", help="how the file is read as a campaign when it is not one (campaign/adapters.py), e.g. "
                          "perf-report:torch,triton"))

    @property
    def module(self) -> str:
        """What ``python -m`` runs for this cell: the pytest-benchmark cell module for that adapter, else the child."""
        kind = (self.adapter or "").partition(":")[0]
        return PYTEST_BENCHMARK_CELL_MODULE if kind == PYTEST_BENCHMARK_ADAPTER else CHILD_MODULE

    def module_argv(self) -> list[str]:
        """Everything after ``python -m``: the cell's module, then ``to_argv``."""
        return [self.module, *self.to_argv()]

    def compile_only(self) -> CellConfig:
        """This cell as its IR capture runs it: the shapes of ``ir_level``, which may differ from the timed ones."""
        return replace(self, level=self.ir_level or self.level)

    def to_argv(self) -> list[str]:
        """The arguments after ``python -m <module>``; ``from_argv`` reads them back unchanged.

        ``--flag=value`` keeps a value that starts with ``-`` (an op name may)
        from being read as another flag.
        """
        argv: list[str] = []
        for f in fields(self):
            spec: _Flag = f.metadata["argv"]
            value = getattr(self, f.name)
            if spec.parse is bool:
                argv += [spec.flag] if value else []
            elif value is not None:
                argv.append(f"{spec.flag}={value}")
        return argv

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> CellConfig:
        """Parse what ``to_argv`` wrote; a bad value exits 2 with argparse's message naming flag and value."""
        # Absent flags stay out of the namespace, so the dataclass defaults are the only defaults.
        parser = argparse.ArgumentParser(prog=f"python -m {CHILD_MODULE}", argument_default=argparse.SUPPRESS)
        for f in fields(cls):
            spec: _Flag = f.metadata["argv"]
            if spec.parse is bool:
                parser.add_argument(spec.flag, dest=f.name, action="store_true", help=spec.help)
            else:
                metavar = None if spec.choices else spec.flag.lstrip("-").replace("-", "_").upper()
                parser.add_argument(spec.flag, dest=f.name, type=spec.parse, choices=spec.choices, metavar=metavar,
                                    required=f.default is MISSING, help=spec.help)
        config = cls(**vars(parser.parse_args(list(argv))))
        if config.ir_only and config.ir_target is None:
            parser.error("--ir-only needs --ir-target: the target to compile for")
        if config.shard is not None:
            try:
                config.shard_of()
            except ValueError as exc:
                parser.error(f"--shard {config.shard!r}: {exc}")
        return config

    def skipped(self) -> frozenset[str]:
        """The shape ids of ``--skip-shapes`` (none without it)."""
        return frozenset(_shape_ids(self.skip_shapes)) if self.skip_shapes else frozenset()

    def shard_of(self) -> tuple[int, int]:
        """(I, N) of ``--shard I/N``; (0, 1) without one."""
        if self.shard is None:
            return 0, 1
        index, _, count = self.shard.partition("/")
        i, n = int(index), int(count)  # ValueError names the bad text
        if not 0 <= i < n:
            raise ValueError(f"needs 0 <= I < N, got {i}/{n}")
        return i, n
