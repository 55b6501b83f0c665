"""Command-line options, their validation, and one resolution order.

Every option is declared once here.  ``register`` feeds pytest's parser and
``abbench summary`` reuses the report/caliber subset through the same
``add_report_options`` so the two front ends cannot drift apart.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Mapping

import pytest

from pytest_abbench.campaign import model as campaign

from pytest_abbench.core import cellconfig
from pytest_abbench.core.layout import STATUS_FILE
from pytest_abbench.core.status import StatusFormatError, read_status

DEFAULT_CELL_TIMEOUT_S = 2400.0  # matches the NV campaigns: one hung cell must not hold a batch
DEFAULT_ROUNDS = 2
DEFAULT_MARGIN_PCT = 2.0
TIMERS = ("auto", *cellconfig.TIMERS)
BACKENDS = ("auto", *cellconfig.BACKENDS)
LEVELS = ("auto", *campaign.LEVELS)

CELL_TIMEOUT_HELP = "seconds before a cell's process group is killed (rc 124 TIMEOUT); env CELL_TIMEOUT, ini cell_timeout"


def positive_seconds(text: str) -> float:
    """argparse type for a timeout: a positive number of seconds, the bad value named."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


MAX_ROUNDS = 1000  # far above any campaign; a typo of 1e6 would plan millions of cells


def rounds_count(text: str) -> int:
    """argparse type for --ab-rounds: a whole number from 1 to MAX_ROUNDS, the bad value named."""
    value = positive_int(text)
    if value > MAX_ROUNDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_ROUNDS} rounds, got {text!r}")
    return value


def percent(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage like 2 or 2.5%, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def env_assignment(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not key.replace("_", "").isalnum():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with KEY a variable name, got {text!r}")
    return key, value


def tuner_cache_mode(text: str) -> str:
    """``per-cell`` (every cell its own tuner cache, seeded from round 1's record) or ``shared:DIR``."""
    if text == "per-cell":
        return text
    kind, sep, where = text.partition(":")
    if kind == "shared" and sep and where:
        return f"shared:{os.path.abspath(where)}"
    raise argparse.ArgumentTypeError(f"expected per-cell or shared:DIR, got {text!r}")


GPUS_AUTO = "auto"


def gpu_list(text: str) -> tuple[str, ...] | None:
    """``auto`` (None: the host's visible GPUs) or ``0,1,2`` / GPU UUIDs: the GPUs each host's workers claim from."""
    if text == GPUS_AUTO:
        return None
    gpus = tuple(g.strip() for g in text.split(","))
    if not all(g.isdigit() or g.startswith(("GPU-", "MIG-")) for g in gpus):
        raise argparse.ArgumentTypeError(f"expected GPU indices or UUIDs separated by commas, got {text!r}")
    if len(set(gpus)) != len(gpus):
        raise argparse.ArgumentTypeError(f"a GPU is listed twice in {text!r}: two workers would share it")
    return gpus


def existing_root(text: str) -> Path:
    """The --ab-resume or --ab-costs-from path; ``resolve`` checks it is a root (not on an xdist worker, which may be on another host)."""
    return Path(text).resolve()


def choice(options: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in options:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(options)}")
        return text

    parse.__name__ = "choice"
    return parse


def add_report_options(add: Callable[..., Any]) -> None:
    """Options shared by the pytest plugin and ``abbench summary``."""
    add("--allow-caliber-mismatch", action="store_true", default=False,
        help="print caliber mismatches but do not exit 4 for them")
    add("--ab-margin", type=percent, default=None, metavar="PCT",
        help=f"equivalence margin: 'same' when the 90%% interval lies inside +-PCT (default {DEFAULT_MARGIN_PCT}%%)")
    add("--ab-fail-if-slower", type=percent, default=None, metavar="PCT",
        help="exit 7 when an op is 'slower' with its whole geomean interval beyond PCT (GPU timers only: "
             "interpreter and wall-clock runs are refused)")


def register(parser: pytest.Parser) -> None:
    group = parser.getgroup("abbench", "A/B benchmark campaigns (pytest-abbench)")
    add = group.addoption
    add("--ab-rounds", type=rounds_count, default=None, metavar="N", help=f"rounds per op, 1 to {MAX_ROUNDS} (default {DEFAULT_ROUNDS})")
    add("--ab-root", default=None, metavar="DIR", help="output folder (default: a new timestamped folder under .abbench/)")
    add("--cell-timeout", type=positive_seconds, default=None, metavar="SECONDS", help=CELL_TIMEOUT_HELP)
    add("--ab-switch-env", type=env_assignment, action="append", default=[], metavar="KEY=VALUE",
        help="side B's environment replacing the campaign's switch (repeatable)")
    add("--ab-level", type=choice(LEVELS), default="auto",
        help="shape set: smoke|core|comprehensive (auto: core on CUDA and for IR capture, smoke when the interpreter times)")
    add("--ab-timer", type=choice(TIMERS), default="auto", help="cudagraph|direct (CUDA) or wall (interpreter); auto picks cudagraph / wall")
    add("--ab-backend", type=choice(BACKENDS), default="auto", help="cuda|interpreter (auto: cuda when a GPU device node exists)")
    add("--ab-samples", type=positive_int, default=None, metavar="N", help="timed samples per shape (default 10 on CUDA, 3 in the interpreter)")
    add("--ab-direct-rep", type=positive_int, default=cellconfig.DEFAULT_DIRECT_REP_MS, metavar="MS", help="direct timer: do_bench rep in ms (identity axis direct_repeat)")
    add("--ab-direct-warmup", type=positive_int, default=cellconfig.DEFAULT_DIRECT_WARMUP_MS, metavar="MS", help="direct timer: do_bench warmup in ms (identity axis direct_repeat)")
    add("--ab-gpus", type=gpu_list, default=None, metavar="auto|0,1,...",
        help="auto (default): each worker (or a serial run) claims a free GPU of its own host among the visible "
             "ones, through a lock file under /tmp, for the session; 0,1,...: claim among these, on every host")
    add("--ab-worker-scratch", default=None, metavar="DIR",
        help="xdist workers measure into a private root under DIR on their own host (default: the host's temporary "
             "folder); full run.log and TTGIR stay there, everything the report needs travels to the controller")
    add("--ab-resume", type=existing_root, default=None, metavar="ROOT",
        help="continue the campaign in ROOT: cells with a finished row are read from disk, not run again")
    add("--ab-costs-from", type=existing_root, default=None, metavar="ROOT",
        help="with -n: order the ops (most expensive first) by their cell times in ROOT, an earlier root of the "
             "campaign: round 1 as it took there, later rounds as there or none where its IR gate skipped them")
    add("--ab-layout-shift", type=choice(("on", "off")), default="on",
        help="on: each cell pads its allocations before every shape (sizes from op, round, side and shape), so a "
             "buffer-layout effect varies between rounds instead of repeating in all of them (identity axis)")
    add("--ab-spawn", type=choice(("auto", *cellconfig.SPAWN_METHODS)), default="auto",
        help="fork: each cell is forked from a per-side server that imported torch and Triton once (under 1 s "
             "instead of seconds per cell); exec: a fresh interpreter per cell; auto: fork on Linux (identity axis)")
    add("--ab-precompile", type=choice(("on", "off")), default="on",
        help="on: before an op's round 1 on a GPU, compile its kernels for both sides in parallel compile-only "
             "processes (one share of the shapes each, every autotune candidate) into each side's Triton cache")
    add("--ab-control", action="store_true", default=False,
        help="A/A control: a third cell per round and op ([r<k>-A2]) runs side A again; each shape's A/A interval "
             "is printed, and where it excludes zero, directions no larger than that bias are withheld")
    add("--ab-tuner-cache", type=tuner_cache_mode, default=cellconfig.DEFAULT_TUNER_CACHE, metavar="per-cell|shared:DIR",
        help="where library tuners (FlagGems' LibTuner) keep their choices: per-cell (pinned from round 1, the "
             "default) or one shared folder, which makes absolute latencies unquotable (caliber warning)")
    add("--ab-allow-no-ir-diff", action="store_true", default=False,
        help="run every round even when round 1 shows the switch changed no TTGIR (env SWITCH_ALLOW_NO_IR_DIFF=1)")
    add("--ab-ir-only", action="store_true", default=False,
        help="IR triage: compile every op's kernels for both sides for --ab-ir-target, time nothing, and report "
             "which ops the switch changes (no GPU needed)")
    add("--ab-ir-target", default="cuda:90", metavar="BACKEND:ARCH",
        help="without a GPU, compile round 1's kernels for this target to capture TTGIR ('none' to skip)")
    add_report_options(add)
    parser.addini("cell_timeout", CELL_TIMEOUT_HELP, default=None)
    parser.addini("ab_rounds", "rounds per op", default=None)


@dataclass
class Settings:
    """Every option after command line > environment > ini > default resolution."""

    rounds: int
    root: Path | None
    cell_timeout_s: float
    switch_env: dict[str, str] | None
    backend: str  # cuda | interpreter, decided once per session
    level: str  # the shape set the cells time; "auto" resolved for the backend
    given_level: str | None  # --ab-level when given; None for auto (IR capture: see ir_level_for)
    timer: str  # "auto" resolved for the backend
    samples: int
    direct_rep_ms: int
    direct_warmup_ms: int
    tuner_cache: str
    gpus: tuple[str, ...] | None  # None: auto, the host's visible GPUs
    resume: Path | None
    control: bool
    allow_no_ir_diff: bool
    ir_only: bool
    ir_target: str | None
    allow_caliber_mismatch: bool
    margin_pct: float | None
    fail_if_slower_pct: float | None
    layout_shift: bool = True
    spawn: str = "exec"
    precompile: bool = True
    worker_scratch: Path | None = None
    costs_from: Path | None = None  # --ab-costs-from: an earlier root whose cell times order the ops
    sources: dict[str, str] = field(default_factory=dict)

    def ir_level_for(self, op_levels: Collection[str], side_level: str | None = None) -> str:
        """The shape set IR capture compiles for an op with shapes at ``op_levels``.

        A level asked for (the side's campaign option, then --ab-level) is used
        as given.  Otherwise IR triage (--ab-ir-only) compiles the GPU's default,
        IR_LEVEL, where the op has it: compiling executes nothing, and the smoke
        shapes may not reach the tile sizes where a switch changes code.  A timed
        run, and an op without IR_LEVEL shapes, compiles the level its cells time.
        """
        asked = side_level or self.given_level
        if asked:
            return asked
        if not self.ir_only:
            # A timed interpreter run's gate compiles what it times: core compiles of some ops take minutes
            # on a laptop (topk's side B), and interpreter timings say nothing about the GPU anyway.
            return self.level
        return IR_LEVEL if IR_LEVEL in op_levels else self.level

    def ir_target_for(self, round_no: int) -> str | None:
        """The target a cell of ``round_no`` compiles for without running (None: it captures what it runs, or nothing).

        --ab-ir-only is triage: every cell compiles for the IR target through a
        stand-in driver.  Without a GPU, round 1 compiles for it so the gate has
        TTGIR to compare.
        """
        return self.ir_target if self.ir_only or (self.backend != "cuda" and round_no == 1) else None

    def ir_basis(self, op_levels: Collection[str], side_levels: Mapping[str, str | None]) -> str:
        """What round 1's IR capture compiled, as the gate's line says it: ``core for cuda:90``, ``core on the GPU``.

        ``side_levels``: each side's own ``level`` option (None where it has none).
        """
        target = self.ir_target_for(1)
        levels = {side: self.ir_level_for(op_levels, level) if target else level or self.level
                  for side, level in side_levels.items()}
        text = (next(iter(levels.values())) if len(set(levels.values())) == 1
                else ", ".join(f"{level} ({side})" for side, level in levels.items()))
        return f"{text} for {target}" if target else f"{text} on the GPU"


def _from_env_or_ini(config: pytest.Config, cli: Any, env_name: str | None, ini_name: str,
                     parse: Callable[[str], Any], default: Any) -> tuple[Any, str]:
    if cli is not None:
        return cli, "command line"
    candidates: list[tuple[str | None, str]] = []
    if env_name:
        candidates.append((os.environ.get(env_name), f"environment variable {env_name}"))
    candidates.append((config.getini(ini_name), f"ini option {ini_name}"))
    for raw, source in candidates:
        if raw in (None, ""):
            continue
        try:
            return parse(str(raw)), source
        except argparse.ArgumentTypeError as exc:
            raise pytest.UsageError(f"{source}={raw!r}: {exc}") from None
    return default, "default"


def resolve(config: pytest.Config) -> Settings:
    """Resolve every option once; a bad value's error says which source it came from."""
    opt = config.option
    timeout, timeout_src = _from_env_or_ini(config, opt.cell_timeout, "CELL_TIMEOUT", "cell_timeout",
                                            positive_seconds, DEFAULT_CELL_TIMEOUT_S)
    rounds, rounds_src = _from_env_or_ini(config, opt.ab_rounds, None, "ab_rounds", rounds_count, DEFAULT_ROUNDS)
    # An xdist worker (maybe on another host) never reads the controller's root: the controller checks it.
    # (config.workerinput, not PYTEST_XDIST_WORKER: that variable leaks into every process a worker starts.)
    if opt.ab_resume and not hasattr(config, "workerinput") and not (opt.ab_resume / STATUS_FILE).is_file():
        raise pytest.UsageError(f"--ab-resume: {str(opt.ab_resume)!r} is not a campaign root (no {STATUS_FILE} in it)")
    if opt.ab_costs_from and not hasattr(config, "workerinput"):
        check_costs_root(opt.ab_costs_from)
    if opt.ab_resume and opt.ab_root and Path(opt.ab_root).resolve() != opt.ab_resume:
        raise pytest.UsageError(f"--ab-root {opt.ab_root} and --ab-resume {opt.ab_resume} name different roots")
    if opt.ab_ir_only and opt.ab_ir_target in ("", "none"):
        raise pytest.UsageError("--ab-ir-only needs an --ab-ir-target to compile for (e.g. cuda:90), not 'none'")
    if opt.ab_ir_only:
        rounds, rounds_src = 1, "--ab-ir-only compiles round 1 only"
    allow_no_ir = bool(opt.ab_allow_no_ir_diff) or os.environ.get("SWITCH_ALLOW_NO_IR_DIFF", "") == "1"
    backend = detect_backend(opt.ab_backend)
    cuda = backend == "cuda"
    given_level = opt.ab_level if opt.ab_level != "auto" else None
    settings = Settings(
        rounds=rounds,
        root=opt.ab_resume or (Path(opt.ab_root) if opt.ab_root else None),
        cell_timeout_s=timeout,
        switch_env=dict(opt.ab_switch_env) if opt.ab_switch_env else None,
        backend=backend,
        level=given_level or default_level(backend),
        given_level=given_level,
        timer=opt.ab_timer if opt.ab_timer != "auto" else ("cudagraph" if cuda else "wall"),
        samples=opt.ab_samples or (10 if cuda else 3),
        direct_rep_ms=opt.ab_direct_rep,
        direct_warmup_ms=opt.ab_direct_warmup,
        tuner_cache=opt.ab_tuner_cache,
        gpus=opt.ab_gpus,
        resume=opt.ab_resume,
        costs_from=opt.ab_costs_from,
        control=bool(opt.ab_control) and not opt.ab_ir_only,
        allow_no_ir_diff=allow_no_ir,
        ir_only=bool(opt.ab_ir_only),
        ir_target=None if opt.ab_ir_target in ("", "none") else opt.ab_ir_target,
        allow_caliber_mismatch=opt.allow_caliber_mismatch,
        margin_pct=opt.ab_margin,
        fail_if_slower_pct=opt.ab_fail_if_slower,
        layout_shift=opt.ab_layout_shift == "on",
        spawn=resolve_spawn(opt.ab_spawn),
        precompile=opt.ab_precompile == "on",
        worker_scratch=Path(opt.ab_worker_scratch) if opt.ab_worker_scratch else None,
        sources={"cell_timeout": timeout_src, "rounds": rounds_src},
    )
    if settings.fail_if_slower_pct is not None and (settings.backend != "cuda" or settings.timer == "wall"):
        raise pytest.UsageError(
            f"--ab-fail-if-slower gates on GPU timings; this run times backend {settings.backend} with the "
            f"{settings.timer} timer, which says nothing about GPU speed (run it on a GPU, or drop the gate)")
    return settings


def check_costs_root(path: Path) -> None:
    """--ab-costs-from names a root whose status.tsv reads: a usage error naming the path, or the file and line."""
    if not (path / STATUS_FILE).is_file():
        what = "does not exist" if not path.exists() else f"is not a campaign root (no {STATUS_FILE} in it)"
        raise pytest.UsageError(f"--ab-costs-from: {str(path)!r} {what}")
    try:
        read_status(path)
    except StatusFormatError as exc:
        raise pytest.UsageError(f"--ab-costs-from: {exc}") from None
    except OSError as exc:
        raise pytest.UsageError(f"--ab-costs-from: cannot read {path / STATUS_FILE}: {exc.strerror or exc}") from None


def resolve_spawn(requested: str) -> str:
    """``auto``: fork where the fork server works (Linux), else exec; ``fork`` elsewhere is a usage error."""
    from pytest_abbench.spawn.forkserver import fork_supported

    if requested == "exec" or (requested == "auto" and not fork_supported()):
        return "exec"
    if not fork_supported():
        raise pytest.UsageError(f"--ab-spawn fork: the fork server needs Linux (this is {sys.platform}); "
                                "use --ab-spawn exec")
    return "fork"


def default_level(backend: str) -> str:
    """The shape set ``--ab-level auto`` times: core on a GPU, smoke in the interpreter (it executes every op slowly)."""
    return "core" if backend == "cuda" else "smoke"


# What IR capture compiles for "auto" on every backend (Settings.ir_level_for): at
# smoke shapes a tile may stay below the size where a switch matters (a 16-row dot
# never becomes a Hopper wgmma), and IR triage would report a false "no change".
IR_LEVEL = default_level("cuda")


def visible_gpus() -> tuple[str, ...]:
    """The GPUs this process may use, without importing torch: CUDA_VISIBLE_DEVICES, else the device nodes."""
    declared = os.environ.get("CUDA_VISIBLE_DEVICES")
    if declared is not None:
        return tuple(g.strip() for g in declared.split(",") if g.strip() and g.strip() != "-1")
    nodes = [n for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit()] if os.path.isdir("/dev") else []
    return tuple(sorted((n[6:] for n in nodes), key=int))


def detect_backend(requested: str) -> str:
    """``cuda`` when an NVIDIA device node is present, else the interpreter.

    Decided without importing torch so that collection stays cheap.
    """
    if requested != "auto":
        return requested
    return "cuda" if os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0") else "interpreter"
