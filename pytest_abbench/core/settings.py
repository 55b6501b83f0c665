"""Settings and option values that do not need pytest: the resolved ``Settings``, defaults, value parsers.

The pytest side (``session.options``) declares and resolves the options; the
report, ``abbench summary``, the runner and campaign adapters read what they
need from here without importing pytest.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection

from pytest_abbench.core.budget import CellBudget
from pytest_abbench.core.layout import ABBENCH_DIR, HISTORY_FILE

from pytest_abbench.core import envnames
from pytest_abbench.core.cellconfig import DEFAULT_AUTOTUNE_SCREEN_MS, TRITON_BENCH_REP_MS
from pytest_abbench.core.regimes import DEFAULT_REGIME

DEFAULT_CELL_TIMEOUT_S = 2400.0  # matches the NV campaigns: one hung cell must not hold a batch
# The slowest client import measured is FlagGems' (2-3 s on the H200 host); two minutes is far beyond any import
# that works and short enough that a hung one is noticed.
DEFAULT_IMPORT_TIMEOUT_S = 120.0
DEFAULT_ROUNDS = 2
DEFAULT_MARGIN_PCT = 2.0
# --ab-rounds auto: a shape whose energy per call is stated with an interval wider than +-this many points of its
# B vs A change is not settled (report/sequential.py ``energy_settled``; --ab-energy-target, 0: energy adds no
# round).  On the H200 an mm 4096^3 at the 700 W cap read +35.1% [+26.8 ~ +46.7%] after 3 rounds, its rounds 2.3%
# apart: with 3 rounds the t quantile is 4.30 (2.57 at 6), and a narrow interval needs a few more of them.
DEFAULT_ENERGY_TARGET_PCT = 5.0
CUDA_SAMPLES = 10  # timed windows per shape on a GPU (--ab-samples); a steady cell times them after one settling
GATE_SHAPES, GATE_GEOMEAN = "shapes", "geomean"  # what --ab-fail-if-slower judges (--ab-gate)
GATE_SCOPES = (GATE_SHAPES, GATE_GEOMEAN)

def positive_seconds(text: str) -> float:
    """argparse type for a timeout: a positive number of seconds, the bad value named."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text!r}")
    return value


def _whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _whole_number(text, 1)


def non_negative_int(text: str) -> int:
    return _whole_number(text, 0)


MAX_ROUNDS = 1000  # far above any campaign; a typo of 1e6 would plan millions of cells


def rounds_count(text: str) -> int:
    """argparse type for --ab-rounds: a whole number from 1 to MAX_ROUNDS, the bad value named."""
    value = positive_int(text)
    if value > MAX_ROUNDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_ROUNDS} rounds, got {text!r}")
    return value


def autotune_screen_ms(text: str) -> int:
    """argparse type for --ab-autotune-screen: 0 (off) or a whole number of ms below Triton's own repeats."""
    value = non_negative_int(text)
    if value >= TRITON_BENCH_REP_MS:
        raise argparse.ArgumentTypeError(f"must be below {TRITON_BENCH_REP_MS} ms, Triton's own repeats (a screen as "
                                         f"long saves nothing; 0 turns it off), got {text!r}")
    return value


AUTO_ROUNDS = "auto"
AUTO_FIRST, AUTO_LAST = 3, 10  # --ab-rounds auto: looks from 3 rounds (fewer conclude nothing: docs/verdicts.md) to 10


def rounds_plan(text: str) -> tuple[int, int | None]:
    """argparse type for --ab-rounds: ``N`` (every op runs N rounds) or ``auto``, ``auto:MAX``, ``auto:MIN-MAX``
    (each op stops at the first round from MIN on where its shapes settled, at MAX at the latest), as
    (rounds, first look); the bad value named."""
    kind, sep, bounds = text.partition(":")
    if kind != AUTO_ROUNDS:
        if not (text.isascii() and text.isdigit()):
            raise argparse.ArgumentTypeError(f"expected N (a whole number of rounds) or {AUTO_ROUNDS}, "
                                             f"{AUTO_ROUNDS}:MAX or {AUTO_ROUNDS}:MIN-MAX, got {text!r}")
        return rounds_count(text), None
    low, dash, high = bounds.partition("-") if sep else ("", "", "")
    expected = f"expected N, {AUTO_ROUNDS}, {AUTO_ROUNDS}:MAX or {AUTO_ROUNDS}:MIN-MAX with whole numbers, got {text!r}"
    if sep and not (bounds and (low.isdigit() if dash else True) and (high.isdigit() if dash else bounds.isdigit())):
        raise argparse.ArgumentTypeError(expected)
    first = int(low) if dash else AUTO_FIRST
    last = int(high) if dash else int(bounds) if sep else AUTO_LAST
    if first < 2:
        raise argparse.ArgumentTypeError(f"the first look needs at least 2 rounds (an interval), got {text!r}")
    if last <= first:
        raise argparse.ArgumentTypeError(f"the most rounds must exceed the first look's {first}, got {text!r}")
    if last > MAX_ROUNDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_ROUNDS} rounds, got {text!r}")
    return last, first


def default_rounds(backend: str) -> tuple[int, int | None]:
    """--ab-rounds when none is given, as ``rounds_plan`` gives it: ``auto`` on a GPU; DEFAULT_ROUNDS in the
    interpreter, whose wall-clock numbers say nothing about GPU speed (its runs exercise every check, and stay
    short).  docs/verdicts.md "The default rounds" has the reason."""
    return (AUTO_LAST, AUTO_FIRST) if backend == "cuda" else (DEFAULT_ROUNDS, None)


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


def providers_option(text: str) -> tuple[str, str]:
    """``--ab-providers``: NAME (both sides run that ``line_vals`` entry, B under the switch) or A,B (side A runs
    entry A, side B entry B)."""
    names = text.split(",")
    if len(names) > 2 or not all(n and n == n.strip() for n in names):
        raise argparse.ArgumentTypeError(f"expected one line_vals entry NAME (both sides) or two A,B (side A's, "
                                         f"then side B's), got {text!r}")
    if len(names) == 2 and names[0] == names[1]:
        raise argparse.ArgumentTypeError(f"{text!r} names one provider twice; both sides on one provider, B under a "
                                         f"switch: --ab-providers {names[0]} --ab-switch-env KEY=VALUE")
    return names[0], names[-1]


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


def output_file_problem(path: Path) -> str | None:
    """Why a file asked for (a history plot or page) cannot be written to ``path``, checked
    before the work that makes it; None when it can.  A missing folder is an error, never made."""
    if path.is_dir():
        return f"{str(path)!r} is a folder; give a file path such as {str(path / 'abbench.md')!r}"
    if not path.parent.is_dir():
        return f"{str(path)!r}: its folder {str(path.parent)!r} does not exist"
    return None


ALLOW_NO_IR_DIFF = "--ab-allow-no-ir-diff"  # kept by a resumed root beside the caliber options, not one of them

HISTORY_OFF = "off"


def history_file(text: str) -> str:
    """--ab-history: a file path, or ``off``; ``history_path`` turns it into the file (None: off)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a file path or {HISTORY_OFF!r}, got an empty value")
    return text


def history_path(value: str | None, rootdir: Path) -> Path | None:
    """The history file a --ab-history value names: None for ``off``, ``<rootdir>/.abbench/history.sqlite``
    when nothing was given."""
    if value == HISTORY_OFF:
        return None
    return Path(value).resolve() if value else rootdir / ABBENCH_DIR / HISTORY_FILE


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
        help="exit 7 when a shape is 'slower' with its whole interval beyond PCT after Benjamini-Hochberg across "
             "its op's shapes, or an op is 'slower' with its whole geomean interval beyond PCT; the exit reason "
             "names them (GPU timers only: interpreter and wall-clock runs are refused)")
    add("--ab-gate", type=choice(GATE_SCOPES), default=GATE_SHAPES,
        help=f"what --ab-fail-if-slower judges: {GATE_SHAPES} (every shape and every op's geomean, the default) or "
             f"{GATE_GEOMEAN} (each op's geomean alone)")


@dataclass
class Settings:
    """Every option after command line > environment > ini > default resolution."""

    rounds: int  # with auto_min: the most rounds an op may run
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
    gate: str = GATE_SHAPES  # --ab-gate: what --ab-fail-if-slower judges
    spawn: str = "exec"
    precompile: bool = True
    # Decide the IR gate from the precompile's IR, before round 1 is timed: an op whose switch changed no code
    # is skipped without timing round 1 (``--ab-precompile``: auto on a GPU, on without one).
    gate_first: bool = False
    costs_from: Path | None = None  # --ab-costs-from: an earlier root whose cell times order the ops
    autotune_from: Path | None = None  # --ab-autotune-from: an earlier root whose records round 1 side A carries
    retune: bool = False  # --ab-retune: round 1 side A tunes, not carrying what side A's kernel cache kept
    # --ab-autotune-screen: ms each autotune candidate is first timed for (0: every one for Triton's own times)
    autotune_screen_ms: int = DEFAULT_AUTOTUNE_SCREEN_MS
    import_timeout_s: float = DEFAULT_IMPORT_TIMEOUT_S  # --ab-import-timeout: a campaign import at collection that takes longer fails
    auto_min: int | None = None  # --ab-rounds auto: the first look (CampaignPlan.auto_min); None: fixed rounds
    rounds_budget_s: float | None = None  # --ab-rounds-budget: device seconds after which no op adds a round
    energy_target_pct: float = DEFAULT_ENERGY_TARGET_PCT  # --ab-energy-target: wider energy intervals add rounds
    regime: str = DEFAULT_REGIME  # --ab-regime: burst | steady | both (core/regimes.py)
    switch_env_a: dict[str, str] | None = None  # --ab-switch-env-a: side A's environment replacing the campaign's
    history: Path | None = None  # --ab-history: the history file the session's end records into (None: off)
    history_label: str = ""  # --ab-history-label: a word kept with the run (a bisection's step)
    kernel_cache: str = "auto"  # --ab-kernel-cache: auto (the user's cache folder), off (the root's), or a folder
    kernel_imports: tuple[Path, ...] = ()  # --ab-kernel-import: kernel files seeding the folders of their keys
    # --ab-providers: perf_report scripts are campaigns, side A running the first line_vals entry, B the second
    # (the same one for --ab-providers NAME); None: only campaign files are
    perf_report: tuple[str, str] | None = None
    # --ab-pytest-benchmark: test files whose tests request pytest-benchmark's benchmark fixture are campaigns
    pytest_benchmark: bool = False
    # --ab-reference: after the cells, time each judged op's two sides in one process, interleaved in pairs
    # (session/reference.py), beside the cells' verdict; it never changes one
    reference: bool = False
    sources: dict[str, str] = field(default_factory=dict)

    def caliber_options(self) -> dict[str, str]:
        """The options that decide what a cell's number means, by option name, as resolved ("auto" decided).

        A resumed root keeps them (campaign.json) and refuses a session whose values differ, before any cell:
        its new cells would not compare with the old ones (the caliber check's exit 4, for good).
        """
        return {"--ab-backend": self.backend, "--ab-timer": self.timer, "--ab-level": self.level,
                "--ab-direct-rep": str(self.direct_rep_ms), "--ab-tuner-cache": self.tuner_cache,
                "--ab-spawn": self.spawn, "--ab-regime": self.regime}

    def kept_options(self) -> dict[str, str]:
        """What a resumed root keeps and refuses another value of (campaign.json): the caliber options, and
        --ab-allow-no-ir-diff, which decides whether an op whose code did not change is timed past round 1 (resumed
        the other way, the report would hide rounds the root measured, or miss rounds it skipped)."""
        return {**self.caliber_options(), ALLOW_NO_IR_DIFF: "on" if self.allow_no_ir_diff else "off"}

    @property
    def budget(self) -> CellBudget:
        """Every deadline of a cell (``core.budget``), from --cell-timeout."""
        return CellBudget.from_cell_timeout(self.cell_timeout_s)

    def ir_level_for(self, op_levels: Collection[str]) -> str:
        """The shape set IR capture compiles for an op with shapes at ``op_levels``.

        A level asked for (--ab-level) is used
        as given.  Otherwise IR triage (--ab-ir-only) compiles the GPU's default,
        IR_LEVEL, where the op has it: compiling executes nothing, and the smoke
        shapes may not reach the tile sizes where a switch changes code.  A timed
        run, and an op without IR_LEVEL shapes, compiles the level its cells time.
        """
        if self.given_level:
            return self.given_level
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

    def gate_first_target(self, gpu_target: str | None) -> str | None:
        """The target an op's precompile compiles for when it runs before round 1 (``--ab-precompile`` auto or on
        with a GPU, on with an IR target without one); None where no precompile runs."""
        if self.ir_only or not self.precompile:
            return None
        if self.backend == "cuda":
            return gpu_target
        return self.ir_target if self.gate_first else None

    def ir_basis(self, op_levels: Collection[str]) -> str:
        """What round 1's IR capture compiled, as the gate's line says it: ``core for cuda:90``, ``core on the GPU``."""
        target = self.ir_target_for(1)
        return f"{self.ir_level_for(op_levels)} for {target}" if target else f"{self.level} on the GPU"


def default_level(backend: str) -> str:
    """The shape set ``--ab-level auto`` times: core on a GPU, smoke in the interpreter (it executes every op slowly)."""
    return "core" if backend == "cuda" else "smoke"


# What IR capture compiles for "auto" on every backend (Settings.ir_level_for): at
# smoke shapes a tile may stay below the size where a switch matters (a 16-row dot
# never becomes a Hopper wgmma), and IR triage would report a false "no change".
IR_LEVEL = default_level("cuda")


def visible_gpus() -> tuple[str, ...]:
    """The GPUs this process may use, without importing torch: CUDA_VISIBLE_DEVICES, else the device nodes."""
    declared = os.environ.get(envnames.CUDA_VISIBLE_DEVICES)
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
