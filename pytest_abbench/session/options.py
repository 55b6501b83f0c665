"""Command-line options and one resolution order (command line > environment > ini > default).

Every option is declared once here.  ``register`` feeds pytest's parser;
``abbench summary`` reuses the report/caliber subset through the same
``core.settings.add_report_options`` so the two front ends cannot drift apart.
The values' parsers and the resolved ``Settings`` live in ``core.settings``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from pytest_abbench.core import cellconfig, envnames
from pytest_abbench.core.kernelcache import OFF, kernel_cache_option, kernel_file_option
from pytest_abbench.core.autotunerecord import read_record
from pytest_abbench.core.fileio import CorruptFileError
from pytest_abbench.core.layout import ABBENCH_DIR, AUTOTUNE_DIR, HISTORY_FILE, STATUS_FILE
from pytest_abbench.core.regimes import BOTH, BURST, DEFAULT_REGIME, REGIME_CHOICES, STEADY
from pytest_abbench.core.settings import (AUTO_FIRST, AUTO_LAST, CUDA_SAMPLES, DEFAULT_CELL_TIMEOUT_S,
                                          DEFAULT_ENERGY_TARGET_PCT, DEFAULT_IMPORT_TIMEOUT_S, DEFAULT_ROUNDS,
                                          HISTORY_OFF, MAX_ROUNDS, Settings, add_report_options,
                                          autotune_screen_ms,
                                          choice, default_level, default_rounds, detect_backend, env_assignment,
                                          existing_root, gpu_list, history_file, history_path,
                                          percent, positive_int, positive_seconds,
                                          providers_option, rounds_plan, tuner_cache_mode)
from pytest_abbench.core.status import StatusFormatError, read_status

TIMERS = ("auto", *cellconfig.TIMERS)
BACKENDS = ("auto", *cellconfig.BACKENDS)
LEVELS = ("auto", *cellconfig.LEVELS)

KERNEL_CACHE_HELP = (
    "where each side's compiled kernels are kept across runs: auto (default: a folder per side and key under "
    "$XDG_CACHE_HOME/pytest-abbench/kernels, else ~/.cache/...; the key holds the side's Triton build, its switch "
    "environment, the campaign's source and the device), DIR (the same under DIR), or off (the root's own cache "
    f"per side, for this run only); env {envnames.ABBENCH_KERNEL_CACHE}, ini ab_kernel_cache")
CELL_TIMEOUT_HELP = f"seconds before a cell's process group is killed (rc 124 TIMEOUT); env {envnames.CELL_TIMEOUT}, ini cell_timeout"


def register(parser: pytest.Parser) -> None:
    group = parser.getgroup("abbench", "A/B benchmark campaigns (pytest-abbench)")
    add = group.addoption
    add("--ab-rounds", type=rounds_plan, default=None, metavar="N|auto[:[MIN-]MAX]",
        help=f"rounds per op, 1 to {MAX_ROUNDS} (default: auto on a GPU, {DEFAULT_ROUNDS} in the interpreter); "
             f"auto: after {AUTO_FIRST} rounds (MIN) an op "
             f"adds rounds only while some of its shapes are unsettled (no verdict, an interval wider than the margin), "
             f"up to {AUTO_LAST} (MAX); each look judges at its share of the 5%% level")
    add("--ab-rounds-budget", type=positive_seconds, default=None, metavar="SECONDS",
        help="with --ab-rounds auto: once the cells of this process (its GPU) have taken SECONDS, no op adds a round "
             "beyond the first look")
    add("--ab-energy-target", type=percent, default=None, metavar="PCT",
        help=f"with --ab-rounds auto: a shape whose energy per call interval is wider than +-PCT points of its B vs A "
             f"change is unsettled too, and its op adds rounds (default {DEFAULT_ENERGY_TARGET_PCT:g}; 0: energy adds "
             f"none)")
    add("--ab-root", default=None, metavar="DIR", help="output folder (default: a new timestamped folder under .abbench/)")
    add("--cell-timeout", type=positive_seconds, default=None, metavar="SECONDS", help=CELL_TIMEOUT_HELP)
    add("--ab-switch-env", type=env_assignment, action="append", default=[], metavar="KEY=VALUE",
        help="side B's environment replacing the campaign's switch (repeatable)")
    add("--ab-level", type=choice(LEVELS), default="auto",
        help="shape set: smoke|core|comprehensive (auto: core on CUDA and for IR capture, smoke when the interpreter times)")
    add("--ab-timer", type=choice(TIMERS), default="auto", help="cudagraph|direct (CUDA) or wall (interpreter); auto picks cudagraph / wall")
    add("--ab-backend", type=choice(BACKENDS), default="auto", help="cuda|interpreter (auto: cuda when a GPU device node exists)")
    add("--ab-samples", type=positive_int, default=None, metavar="N", help=f"timed samples per shape (default {CUDA_SAMPLES} on CUDA, 3 in the interpreter)")
    add("--ab-direct-rep", type=positive_int, default=cellconfig.DEFAULT_DIRECT_REP_MS, metavar="MS",
        help="a steady window's length, and the direct timer's do_bench rep, in ms; its warmup is half of it "
             "(identity axis direct_repeat)")
    add("--ab-gpus", type=gpu_list, default=None, metavar="auto|0,1,...",
        help="auto (default): each worker (or a serial run) claims a free GPU of its own host among the visible "
             "ones, through a lock file under /tmp, for the session; 0,1,...: claim among these, on every host")
    add("--ab-resume", type=existing_root, default=None, metavar="ROOT",
        help="continue the campaign in ROOT: cells with a finished row are read from disk, not run again")
    add("--ab-costs-from", type=existing_root, default=None, metavar="ROOT",
        help="with -n: order the ops (most expensive first) by their cell times in ROOT, an earlier root of the "
             "campaign: round 1 as it took there, later rounds as there or none where its IR gate skipped them")
    add("--ab-autotune-from", type=existing_root, default=None, metavar="ROOT",
        help="round 1 side A takes each autotune key's config from the op's record in ROOT, an earlier root, "
             "instead of tuning it (a key ROOT lacks, or a config the kernel no longer has, is tuned); every "
             "later cell replays as always (a re-run on a warm cache then benchmarks none of the keys carried)")
    add("--ab-retune", action="store_true", default=False,
        help="round 1 side A tunes every autotune key, even where side A's kernel cache kept its configs from the "
             "last round 1 on the same key (carried by default: a warm re-run tunes nothing; --ab-autotune-from wins)")
    add("--ab-autotune-screen", type=autotune_screen_ms, default=cellconfig.DEFAULT_AUTOTUNE_SCREEN_MS, metavar="MS",
        help=f"a cell that tunes an autotuned kernel times every candidate for MS ms first, then only those within "
             f"{cellconfig.AUTOTUNE_FINALIST_TOL * 100:.0f}%% of the fastest for Triton's own warm-up and repeats, and "
             f"chooses the fastest of those (default {cellconfig.DEFAULT_AUTOTUNE_SCREEN_MS}); 0: every candidate "
             "for Triton's own, as Triton tunes")
    add("--ab-switch-env-a", type=env_assignment, action="append", default=[], metavar="KEY=VALUE",
        help="side A's environment replacing the campaign's env_a (repeatable); with --ab-switch-env, each side "
             "its own, e.g. PYTHONPATH=<checkout> per side: two source trees as the switch")
    add("--ab-history", type=history_file, default=None, metavar=f"PATH|{HISTORY_OFF}",
        help=f"the history file the session's end records its root into (default <rootdir>/{ABBENCH_DIR}/"
             f"{HISTORY_FILE}; env {envnames.ABBENCH_HISTORY}); {HISTORY_OFF}: record nothing")
    add("--ab-history-label", default="", metavar="TEXT", help="a label kept with this run in the history")
    add("--ab-spawn", type=choice(("auto", *cellconfig.SPAWN_METHODS)), default="auto",
        help="fork: each cell is forked from a per-side server that imported torch and Triton once (under 1 s "
             "instead of seconds per cell); exec: a fresh interpreter per cell; auto: fork on Linux (identity axis)")
    add("--ab-regime", type=choice(REGIME_CHOICES), default=DEFAULT_REGIME,
        help=f"timing regime (identity axis, default {DEFAULT_REGIME}): {BURST} (short windows after idle gaps, "
             f"both sides at boost clocks), {STEADY} (timed once clocks and power settled under load, or the clock "
             f"held boost with no holding reason) or {BOTH} "
             "(each shape under both, reported side by side); the report names it")
    add("--ab-precompile", type=choice(("auto", "on", "off")), default="auto",
        help="before an op's round 1, compile its kernels for both sides in parallel compile-only processes (one "
             "share of the shapes each, every autotune candidate) into each side's Triton cache, and decide the IR "
             "gate from that IR, so an op whose switch changed no code is skipped without timing it (where the IR "
             "differs, round 1 decides as before). auto: on with a GPU; on: without a GPU too, compiling for "
             "--ab-ir-target; off: neither (round 1 compiles in its timed cells and decides the gate)")
    add("--ab-kernel-cache", type=kernel_cache_option, default=None, metavar="auto|off|DIR",
        help=KERNEL_CACHE_HELP)
    add("--ab-kernel-import", type=kernel_file_option, action="append", default=[], metavar="FILE",
        help="seed a side's kernel cache from a file `abbench kernels export` wrote (repeatable, one per side): "
             "unpacked into the folder of the side whose key equals the file's; a file whose key is neither "
             "side's refuses the campaign's cells, naming each key field that differs")
    add("--ab-control", action="store_true", default=False,
        help="A/A control: a third cell per round and op ([r<k>-A2]) runs side A again; each shape's A/A interval "
             "is printed, and where it excludes zero, directions no larger than that bias are withheld")
    add("--ab-tuner-cache", type=tuner_cache_mode, default=cellconfig.DEFAULT_TUNER_CACHE, metavar="per-cell|shared:DIR",
        help="where library tuners (FlagGems' LibTuner) keep their choices: per-cell (pinned from round 1, the "
             "default) or one shared folder, which makes absolute latencies unquotable (caliber warning)")
    add("--ab-allow-no-ir-diff", action="store_true", default=False,
        help="run every round even when round 1 shows the switch changed no TTGIR")
    add("--ab-ir-only", action="store_true", default=False,
        help="IR triage: compile every op's kernels for both sides for --ab-ir-target, time nothing, and report "
             "which ops the switch changes (no GPU needed)")
    add("--ab-ir-target", default="cuda:90", metavar="BACKEND:ARCH",
        help="without a GPU, compile round 1's kernels for this target to capture TTGIR ('none' to skip)")
    add("--ab-import-timeout", type=positive_seconds, default=DEFAULT_IMPORT_TIMEOUT_S, metavar="SECONDS",
        help=f"how long importing a campaign file at collection may take before it is a collection error naming "
             f"where the import waits (default {DEFAULT_IMPORT_TIMEOUT_S:g})")
    add("--ab-providers", type=providers_option, default=None, metavar="NAME|A,B",
        help="collect triton.testing.perf_report scripts as campaigns: each function (Benchmark) an op, each point "
             "of x_vals a shape; NAME: both sides run this line_vals entry, side B under the switch "
             "(--ab-switch-env); A,B: side A runs entry A, side B entry B (a kernel-variant switch) "
             "(docs/guide/existing-benchmarks.md)")
    add("--ab-pytest-benchmark", action="store_true", default=False,
        help="run tests that request pytest-benchmark's benchmark fixture as campaigns: each test an op, each "
             "parametrization a shape, the callable handed to benchmark(...) timed by the cells; both sides run "
             "it, B under --ab-switch-env (docs/guide/existing-benchmarks.md#pytest-benchmark-tests)")
    add("--ab-reference", action="store_true", default=False,
        help="after the cells, time each judged op's side A and side B in ONE process, interleaved in pairs (A,B "
             "then B,A) with the cells' timer, samples and regime, and print that delta beside the cells' (flag "
             "reference_differs where it lies outside their interval; never changes a verdict). Kernel-variant "
             "switches only (perf_report providers, Switch(build_only_env=...)); for others it says why not "
             "(docs/guide/flaggems.md, 'An in-process reference')")
    add_report_options(add)
    parser.addini("cell_timeout", CELL_TIMEOUT_HELP, default=None)
    parser.addini("ab_rounds", "rounds per op: N or auto[:[MIN-]MAX] (--ab-rounds)", default=None)
    parser.addini("ab_history", f"the history file, or {HISTORY_OFF}", default=None)
    parser.addini("ab_kernel_cache", KERNEL_CACHE_HELP, default=None)



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


def kernel_imports(config: pytest.Config, kernel_cache: str, kernel_cache_src: str) -> tuple[Path, ...]:
    """--ab-kernel-import's files, each read whole before any cell runs (a torn file, a member that would land
    outside the cache folder); an xdist worker reads them at its first cell, on its own host."""
    files = tuple(dict.fromkeys(config.option.ab_kernel_import))
    if files and kernel_cache == OFF:
        raise pytest.UsageError(f"--ab-kernel-import needs a kernel cache to seed: --ab-kernel-cache is off "
                                f"({kernel_cache_src})")
    if files and not hasattr(config, "workerinput"):
        from pytest_abbench.core.kernelarchive import KernelArchiveError, read_archive

        for path in files:
            try:
                read_archive(path)
            except KernelArchiveError as exc:
                raise pytest.UsageError(f"--ab-kernel-import: {exc}") from None
    return files


def resolve(config: pytest.Config) -> Settings:
    """Resolve every option once; a bad value's error says which source it came from."""
    opt = config.option
    timeout, timeout_src = _from_env_or_ini(config, opt.cell_timeout, envnames.CELL_TIMEOUT, "cell_timeout",
                                            positive_seconds, DEFAULT_CELL_TIMEOUT_S)
    backend = detect_backend(opt.ab_backend)
    (rounds, auto_min), rounds_src = _from_env_or_ini(config, opt.ab_rounds, None, "ab_rounds", rounds_plan,
                                                      default_rounds(backend))
    if opt.ab_energy_target is not None and auto_min is None:
        raise pytest.UsageError(f"--ab-energy-target {opt.ab_energy_target:g}: a target that adds rounds needs "
                                f"--ab-rounds auto (this session runs {rounds} rounds per op, {rounds_src})")
    if opt.ab_rounds_budget is not None and auto_min is None:
        raise pytest.UsageError(f"--ab-rounds-budget {opt.ab_rounds_budget:g}: a budget for added rounds needs "
                                f"--ab-rounds auto (this session runs {rounds} rounds per op, {rounds_src})")
    kernel_cache, kernel_cache_src = _from_env_or_ini(config, opt.ab_kernel_cache, envnames.ABBENCH_KERNEL_CACHE,
                                                      "ab_kernel_cache", kernel_cache_option, "auto")
    # An xdist worker (maybe on another host) never reads the controller's root: the controller checks it.
    # (config.workerinput, not PYTEST_XDIST_WORKER: that variable leaks into every process a worker starts.)
    if opt.ab_resume and not hasattr(config, "workerinput") and not (opt.ab_resume / STATUS_FILE).is_file():
        raise pytest.UsageError(f"--ab-resume: {str(opt.ab_resume)!r} is not a campaign root (no {STATUS_FILE} in it)")
    if opt.ab_costs_from and not hasattr(config, "workerinput"):
        check_costs_root(opt.ab_costs_from)
    if opt.ab_autotune_from and not hasattr(config, "workerinput"):
        check_autotune_records(opt.ab_autotune_from)
    if opt.ab_resume and opt.ab_root and Path(opt.ab_root).resolve() != opt.ab_resume:
        raise pytest.UsageError(f"--ab-root {opt.ab_root} and --ab-resume {opt.ab_resume} name different roots")
    if opt.ab_ir_only and opt.ab_ir_target in ("", "none"):
        raise pytest.UsageError("--ab-ir-only needs an --ab-ir-target to compile for (e.g. cuda:90), not 'none'")
    if opt.ab_ir_only and opt.ab_reference:
        raise pytest.UsageError("--ab-reference times both sides of each judged op after the cells; --ab-ir-only "
                                "times nothing: give one of them")
    if opt.ab_ir_only:
        rounds, auto_min, rounds_src = 1, None, "--ab-ir-only compiles round 1 only"
    if opt.ab_pytest_benchmark and config.getoption("benchmark_only", False):
        # pytest-benchmark skips every test that does not request its fixture: every cell.
        raise pytest.UsageError("--ab-pytest-benchmark with --benchmark-only would skip every cell (cells do not "
                                "request the benchmark fixture): drop --benchmark-only (from addopts too)")
    allow_no_ir = bool(opt.ab_allow_no_ir_diff)
    cuda = backend == "cuda"
    spawn = resolve_spawn(opt.ab_spawn)
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
        samples=opt.ab_samples or (CUDA_SAMPLES if cuda else 3),
        direct_rep_ms=opt.ab_direct_rep,
        direct_warmup_ms=opt.ab_direct_rep // 2,
        tuner_cache=opt.ab_tuner_cache,
        gpus=opt.ab_gpus,
        resume=opt.ab_resume,
        costs_from=opt.ab_costs_from,
        autotune_from=opt.ab_autotune_from,
        retune=bool(opt.ab_retune),
        autotune_screen_ms=opt.ab_autotune_screen,
        switch_env_a=dict(opt.ab_switch_env_a) if opt.ab_switch_env_a else None,
        history=resolve_history(config),
        history_label=opt.ab_history_label,
        control=bool(opt.ab_control) and not opt.ab_ir_only,
        allow_no_ir_diff=allow_no_ir,
        ir_only=bool(opt.ab_ir_only),
        ir_target=None if opt.ab_ir_target in ("", "none") else opt.ab_ir_target,
        allow_caliber_mismatch=opt.allow_caliber_mismatch,
        margin_pct=opt.ab_margin,
        fail_if_slower_pct=opt.ab_fail_if_slower,
        gate=opt.ab_gate,
        spawn=spawn,
        regime=opt.ab_regime,
        precompile=opt.ab_precompile != "off",
        gate_first=opt.ab_precompile == "on" or (opt.ab_precompile == "auto" and cuda),
        import_timeout_s=opt.ab_import_timeout,
        auto_min=auto_min,
        rounds_budget_s=opt.ab_rounds_budget,
        energy_target_pct=DEFAULT_ENERGY_TARGET_PCT if opt.ab_energy_target is None else opt.ab_energy_target,
        kernel_cache=kernel_cache,
        kernel_imports=kernel_imports(config, kernel_cache, kernel_cache_src),
        perf_report=opt.ab_providers,
        pytest_benchmark=bool(opt.ab_pytest_benchmark),
        reference=bool(opt.ab_reference),
        sources={"cell_timeout": timeout_src, "rounds": rounds_src, "kernel_cache": kernel_cache_src},
    )
    same_code = ""  # the option by which both sides run one callable, side B only under the switch
    if settings.perf_report is not None and settings.perf_report[0] == settings.perf_report[1]:
        same_code = f"--ab-providers {settings.perf_report[0]}"
    elif settings.pytest_benchmark:
        same_code = "--ab-pytest-benchmark"
    if (same_code and settings.switch_env is None and settings.switch_env_a is None and not settings.allow_no_ir_diff
            and not config.option.collectonly):  # listing the cells compares nothing
        # Both sides would run the same code: the IR gate skips every op after round 1 and the run ends "clean",
        # having compared nothing.
        raise pytest.UsageError(
            f"{same_code} without --ab-switch-env: both sides would run the same code, and the IR gate would skip "
            "every op after round 1; give --ab-switch-env NAME=VALUE (what side B changes), or "
            "--ab-allow-no-ir-diff to time an A/A comparison on purpose")
    from pytest_abbench.core.cores import worker_share

    try:
        worker_share()  # ABBENCH_COMPILE_JOBS is read when cells compile: a bad value is refused before any runs
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if settings.fail_if_slower_pct is not None and (settings.backend != "cuda" or settings.timer == "wall"):
        raise pytest.UsageError(
            f"--ab-fail-if-slower gates on GPU timings; this run times backend {settings.backend} with the "
            f"{settings.timer} timer, which says nothing about GPU speed (run it on a GPU, or drop the gate)")
    return settings


def resolve_history(config: pytest.Config) -> Path | None:
    """The history file: --ab-history, else the environment's or ini's, else ``<rootdir>/.abbench/history.sqlite``."""
    value, _ = _from_env_or_ini(config, config.option.ab_history, envnames.ABBENCH_HISTORY, "ab_history",
                                history_file, None)
    return history_path(value, config.rootpath)


def _require_root(path: Path, option: str) -> None:
    """``path`` is a campaign root (it has a status.tsv): else a usage error naming the option and the path."""
    if not (path / STATUS_FILE).is_file():
        what = "does not exist" if not path.exists() else f"is not a campaign root (no {STATUS_FILE} in it)"
        raise pytest.UsageError(f"{option}: {str(path)!r} {what}")


def check_autotune_records(root: Path) -> None:
    """--ab-autotune-from names a root whose every op record reads (round 1 side A would stop at a bad one, after
    its precompile): a usage error naming the path, or the file and the field."""
    _require_root(root, "--ab-autotune-from")
    for record in sorted((root / AUTOTUNE_DIR).glob("*.json")):
        try:
            read_record(record)
        except (CorruptFileError, ValueError, OSError) as exc:
            raise pytest.UsageError(f"--ab-autotune-from: {exc}") from None


def check_costs_root(path: Path) -> None:
    """--ab-costs-from names a root whose status.tsv reads: a usage error naming the path, or the file and line."""
    _require_root(path, "--ab-costs-from")
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
