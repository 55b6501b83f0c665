"""What one cell process does: time every shape of one op on one side, or only compile it for IR.

It writes into its cell folder: ``results.jsonl`` (one record per shape,
appended as each shape finishes), ``run_identity.json``, ``cell_timing.json``
(where the wall time went), ``ir/`` (TTGIR), and on round 1 side A the
autotune record.  Everything it prints goes to the parent's run.log.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

from pytest_abbench.core import envnames, regimes, standin_driver, tunercache
from pytest_abbench.core.regimes import cell_regimes
from pytest_abbench.campaign.adapters import load_for_cell
from pytest_abbench.campaign.model import Campaign, CampaignError, Case, Op, Shape, shape_set_hash
from pytest_abbench.core.cellconfig import CellConfig
from pytest_abbench.child.autotune_pin import AutotunePin, AutotuneRecordError, install
from pytest_abbench.child.forking import fork_and_run
from pytest_abbench.child.gpustate import GpuSampler, open_sampler
from pytest_abbench.child.identity import build_identity, write_identity, write_side_record_hash
from pytest_abbench.child.preload import import_in_cell, kept_out_only
from pytest_abbench.child import kernelprofile, standin_draws
from pytest_abbench.child.ircapture import enter_compile_only, fingerprints_stages, install_capture, merge_ir
from pytest_abbench.child.layout_shift import hold_pads, pad_sizes
from pytest_abbench.child.compilecount import CompileCounter
from pytest_abbench.child.outputcheck import OutputRecord, check_output
from pytest_abbench.child.regime import RegimeTiming, run_regime
from pytest_abbench.child.timers import CapturePoisoned, prepare_with_fallback
from pytest_abbench.core.fileio import CorruptFileError
from pytest_abbench.core.cellfiles import (KERNEL_COUNTS_FILE, KernelCounts, Shares, add_counts, kernel_counts_in,
                                           write_kernel_counts, write_shares, write_timing)
from pytest_abbench.checks.irgate import ttgir_files
from pytest_abbench.core.layout import IR_DIR, RESULTS_FILE, SHARES_FILE, TIMING_FILE, markers_log, share_dir
from pytest_abbench.core.markers import AUTOTUNE_REPLAY_FALLBACK, is_marker_line
from pytest_abbench.core.results import SKIPPED, SKIPPED_WHY, ShapeResult, append_result, read_results

EXIT_SETUP_ERROR = 3  # the campaign, the switch hook or the autotune record could not be used

# CUDA errors that leave the context unusable: every later call of this process would fail the same way.
# A device out-of-memory error is not among them: the next shape runs in the same process.
STICKY_CUDA_ERRORS = ("illegal memory access", "illegal address", "unspecified launch failure",
                      "misaligned address", "illegal instruction", "hardware stack error", "warp out-of-range",
                      "an uncorrectable ecc error")


def is_sticky_cuda_error(exc: BaseException) -> bool:
    """True for an error after which this process's CUDA context cannot be trusted (see STICKY_CUDA_ERRORS)."""
    text = str(exc).lower()
    return any(marker in text for marker in STICKY_CUDA_ERRORS)


# Where this cell's marker lines go (set when the cell starts; None outside a cell).
_MARKERS_FILE: list[Path | None] = [None]


def log(line: str) -> None:
    """One line of run.log, flushed so a cell killed on timeout leaves its last words; a marker line also goes to
    the cell's markers.log, the only place markers are counted from (core.markers)."""
    print(line, flush=True)
    target = _MARKERS_FILE[0]
    if target is not None and is_marker_line(line):
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(line.replace("\n", " ") + "\n")


def _count_markers_into(out: Path) -> None:
    _MARKERS_FILE[0] = markers_log(out)


def child_command(config: CellConfig) -> list[str]:
    """This interpreter running the cell process for ``config``."""
    return [sys.executable, "-m", *config.module_argv()]


# How a cell loads its campaign: (config, log, compile_only) -> the campaign.  A pytest-benchmark cell brings its
# own (session/benchmark_cell.py); every other cell loads the campaign file or a perf_report script.
CampaignLoad = Callable[[CellConfig, Callable[[str], None], bool], Campaign]


def load_cell_campaign(config: CellConfig, log: Callable[[str], None], compile_only: bool) -> Campaign:
    """The campaign file itself, or the perf_report script it is (``campaign/adapters.py``)."""
    return load_for_cell(config.campaign, config.campaign_module, config.adapter, config.side, log,
                         compile_only=compile_only)


def measure(config: CellConfig, load: CampaignLoad = load_cell_campaign) -> int:
    """Time every shape not yet in results.jsonl; 0 unless the cell could not be set up."""
    started = time.time()
    spawned = float(os.environ.get(envnames.ABBENCH_SPAWN_TIME, started))
    out = config.out
    out.mkdir(parents=True, exist_ok=True)
    _count_markers_into(out)

    import torch
    import triton  # noqa: F401  (import cost belongs to start-up)

    counter = CompileCounter().install()
    if config.backend == "cuda" and not torch.cuda.is_available():
        log("[abbench] backend cuda requested but torch.cuda.is_available() is False")
        return EXIT_SETUP_ERROR
    # Shapes an earlier process of this cell measured: non-empty after a poisoned-capture restart.
    already = done_shape_ids(out / RESULTS_FILE)
    try:
        pin = AutotunePin(config.autotune_mode, config.autotune_file, log,
                          can_benchmark=lambda at: config.backend == "cuda" or at._do_bench is not None,
                          side_mode=config.autotune_side_mode, side_path=config.autotune_side_file,
                          side=config.side, cell=f"r{config.round_no}-{config.role}",
                          seed_path=config.autotune_seed_file, screen_ms=config.autotune_screen,
                          continuing=bool(already))
    except AutotuneRecordError as exc:
        log(f"[abbench] {exc}")
        return EXIT_SETUP_ERROR
    # In place before the campaign is imported: a script that launches kernels at import (Triton's tutorials
    # check their kernel there) tunes under the pin and compiles under the capture, and Triton's in-memory
    # caches would otherwise hide those kernels from both for the rest of the cell.
    install(pin)
    ir_written = (install_capture(out / IR_DIR, fingerprints_stages(config.round_no)) if config.backend == "cuda"
                  else [])

    campaign = load(config, log, False)
    # Those its fork server did not import (an exec'd cell, a refused module) are imported here, as start-up.
    imports = import_in_cell(campaign.server_imports) if campaign.server_imports else None
    op = campaign.op(config.op)
    shapes = op.shapes_for(config.level)
    hook = campaign.switch.setup(config.side)
    if hook is not None:
        log(f"[abbench] side {config.side}: running switch setup {hook.__name__}()")
        hook()

    tuner_dir = pinned_tuner_cache(config)
    tuner_rows_before = tunercache.row_counts(tuner_dir) if tuner_dir else {}
    gpu = open_sampler(config.backend)  # NVML: the identity's clock and power settings, and each timed window
    identity = build_identity(config, shape_set_hash(shapes), tuner_dir, gpu)
    if imports is not None:
        identity["server_imports"] = imports.versions
        identity["imported_by_server"] = imports.by_server
    write_identity(out, identity)
    ready = time.time()
    log(f"[abbench] cell r{config.round_no}-{config.role} op={config.op} backend={config.backend} "
        f"timer={config.timer} regime={config.regime} level={config.level} autotune={config.autotune_mode} start-up {ready - spawned:.2f}s")

    phases: dict[str, float] = {"startup_s": ready - spawned, "build_s": 0.0, "first_call_s": 0.0,
                                "autotune_bench_calls": 0, "timing_s": 0.0, "check_s": 0.0}
    poisoned = measure_shapes(config, op, shapes, out / RESULTS_FILE, already, phases, gpu)
    pin.save()
    if pin.side_mode == "record" and write_side_record_hash(identity, config):
        write_identity(out, identity)  # now it says which supplement its side's later cells must replay
    if tuner_dir is not None and config.autotune_mode == "replay":
        # The side's first cell tunes what only its side meets, and the plugin keeps it as the side's record.
        recorded = config.autotune_side_mode == "record"
        tunercache.report_growth(tuner_rows_before, tunercache.row_counts(tuner_dir), log,
                                 f"[abbench] library tuner: side {config.side} records" if recorded
                                 else AUTOTUNE_REPLAY_FALLBACK)
    phases["autotune_bench_calls"] = pin.bench_calls
    phases["autotune_s"] = pin.bench_s  # part of first_call_s
    phases["ir_variants"] = len(ir_written)
    captured: KernelCounts | None = None
    if not poisoned and config.backend == "interpreter" and config.ir_target:
        write_timing(out / TIMING_FILE, phases)  # kept if the capture below hangs until the timeout
        (out / KERNEL_COUNTS_FILE).unlink(missing_ok=True)  # an earlier attempt's
        phases["ir_capture_s"] = capture_ir_on_cpu(config)  # the GPU captures its IR while it compiles
        captured = kernel_counts_in(out)
    if counter.available:
        kernels = add_counts(counter.counts(), captured)
        phases["kernels_loaded"], phases["kernels_compiled"] = kernels["loaded"], kernels["compiled"]
    if not poisoned:
        # A poisoned process leaves no stamps: a fresh one measures the rest and writes its own; should that
        # one die first, the parent would otherwise count its whole run as this process's exit.
        phases["total_s"] = time.time() - spawned
        phases["spawned_at"] = spawned  # the parent's stamp: with total_s, the parent sees how long the exit took
    write_timing(out / TIMING_FILE, phases)

    if poisoned:
        # No later number of this process is trusted: the remaining shapes are
        # measured by a fresh process (same cell, same log) that skips the
        # shapes already in results.jsonl.  exec keeps the pid, so the parent's
        # timeout and process group still cover it.
        log("[abbench] the CUDA context is poisoned: measuring the remaining shapes in a fresh process")
        sys.stdout.flush()
        os.execv(sys.executable, child_command(config))
    return 0


def pinned_tuner_cache(config: CellConfig) -> Path | None:
    """This cell's own library tuner cache, or None when it has none to pin."""
    # A shared tuner cache is what the caliber warning is about; only a per-cell one is pinned and checked.
    if not os.environ.get(envnames.FLAGGEMS_CACHE_DIR) or config.tuner_cache.startswith("shared:"):
        return None
    return Path(os.environ[envnames.FLAGGEMS_CACHE_DIR])


def measure_shapes(config: CellConfig, op: Op, shapes: Sequence[Shape], results: Path,
                   already: set[tuple[str, str | None]], phases: dict[str, float],
                   gpu: GpuSampler | None = None) -> bool:
    """Append a record per shape not in ``already`` (those ``results`` holds), timing into ``phases``; True once a
    capture poisoned us.

    Poisoned: the CUDA context is no longer trusted, so the caller measures the rest in a fresh process.
    """
    import torch

    device = "cuda" if config.backend == "cuda" else "cpu"
    outputs = None
    if config.output_record is not None:
        try:
            outputs = OutputRecord.open(config.output_record)
        except CorruptFileError as exc:  # the reference still checks every shape: only its saving is lost
            log(f"[abbench] output check: {exc}; this cell computes every shape's reference")
    matched = 0  # shapes whose output matched the side's kept fingerprint: no reference computed
    gpu = gpu or open_sampler(config.backend)  # NVML at each timed window's edges (child/regime.py)
    log(f"[abbench] GPU state: {gpu.describe()}")
    skipped = config.skipped()
    if skipped:
        log(f"[abbench] not run in this cell: {', '.join(sorted(skipped))}: {SKIPPED_WHY} (the report names the "
            "error)")
    for index, shape in enumerate(shapes):
        todo = [r for r in cell_regimes(config.regime) if {(shape.id, r), (shape.id, None)}.isdisjoint(already)]
        if not todo:
            continue
        base = ShapeResult(shape.id, "", dict(shape.params), index, work=shape_work(op, shape))
        if shape.id in skipped:
            append_result(results, dataclasses.replace(base, status=SKIPPED, error=SKIPPED_WHY))
            continue
        pads: list[Any] = []
        sizes = pad_sizes(config.op, config.round_no, config.role, index)
        base.layout_pad_bytes = list(sizes)
        regime: str | None = None  # the regime a failure happened in; None: before any was timed
        try:
            pads = hold_pads(device, sizes)  # held while the shape is built and timed; released below
            t0 = time.perf_counter()
            built = op.build(shape, device)
            case = built if isinstance(built, Case) else Case(run=built)
            if case.work is not None:
                base.work = case.work.to_json()
            t1 = time.perf_counter()
            actual = case.run()  # first call: compilation and autotuning happen here
            if device == "cuda":
                torch.cuda.synchronize()
            t2 = time.perf_counter()
            problem, by_fingerprint = check_output(outputs, shape.id, actual, case.expected is not None,
                                                   lambda: check_result(case, actual), log)
            matched += by_fingerprint
            t3 = time.perf_counter()
            phases["build_s"] += t1 - t0
            phases["first_call_s"] += t2 - t1
            phases["check_s"] += t3 - t2
            shared = {"inputs": t1 - t0, "first_call": t2 - t1, "check": t3 - t2}  # in the first regime's record
            if problem is not None:
                log(f"[abbench] shape {shape.id}: WRONG RESULT: {problem}")
                append_result(results, dataclasses.replace(base, status="wrong", error=problem))
                continue
            for regime in todo:
                started = time.perf_counter()
                window_ms = config.direct_rep if regime == regimes.STEADY else min(regimes.BURST_WINDOW_MS,
                                                                                    config.direct_rep)
                timer = prepare_with_fallback(case.run, config.timer, window_ms, config.direct_warmup, config.op,
                                              shape.id, log)
                prepared = time.perf_counter()
                timing = run_regime(regime, timer, gpu, config.samples, cpu=device == "cpu")
                phases["timing_s"] += time.perf_counter() - started
                if device == "cuda" and os.environ.get(envnames.ABBENCH_KERNEL_SPLIT) == "1" and regime == todo[-1]:
                    profiled = time.perf_counter()  # after the windows: the profiler never runs inside one
                    kernelprofile.record_shape(results.parent, shape.id, case.run, log)
                    timing.spent_s["profile"] = time.perf_counter() - profiled
                    phases["check_s"] += timing.spent_s["profile"]
                record_timing(results, base, timing, {**shared, "capture": prepared - started, **timing.spent_s})
                shared = {}
        except CapturePoisoned as exc:
            append_result(results, dataclasses.replace(base, status="poisoned", timer="cudagraph", error=exc.reason,
                                                       regime=regime))
            return True
        except (Exception, SystemExit) as exc:  # a build that calls sys.exit(0) failed its shape: no clean exit
            log(f"[abbench] shape {shape.id}: {type(exc).__name__}: {exc}")
            if not isinstance(exc, CampaignError):  # the plugin's own diagnosis says all: its frames are noise
                traceback.print_exc(file=sys.stdout)
            append_result(results, dataclasses.replace(base, status="error", error=f"{type(exc).__name__}: {exc}"[:500],
                                                       regime=regime))
            if is_sticky_cuda_error(exc):
                log(f"[abbench] shape {shape.id}: sticky CUDA error; this shape is recorded as failed")
                return True
            continue
        finally:
            del pads[:]
    if matched:
        log(f"[abbench] output check: {matched} shape(s) matched the side's first checked output, so their "
            f"reference was not computed again ({outputs.path if outputs else ''})")
    return False


def shape_work(op: Op, shape: Shape) -> dict[str, Any]:
    """What one call of ``shape`` does, as its op declares it (``Op.work``); empty where it declares nothing."""
    if op.work is None:
        return {}
    return op.work(shape).to_json()


def record_timing(results: Path, base: ShapeResult, timing: RegimeTiming, spent_s: dict[str, float]) -> None:
    """One regime's record of a timed shape (``spent_s``: where its time went), and its run.log line."""
    samples = sorted(timing.samples_ms)
    median = samples[len(samples) // 2] if samples else None
    conditions = Counter(w.condition for w in timing.windows)
    append_result(results, dataclasses.replace(base, status="ok", timer=timing.timer, samples_ms=timing.samples_ms,
                                               median_ms=median, n=len(samples), marker=timing.marker,
                                               regime=timing.regime, windows=timing.windows,
                                               energy_span=timing.energy_span,
                                               spent_s={k: round(v, 4) for k, v in spent_s.items()}))
    shown = "-" if median is None else f"{median:.4f}"
    log(f"[abbench] shape {base.shape}: {shown} ms ({timing.timer}, {timing.regime}, n={len(samples)}; windows "
        + ", ".join(f"{n} {c}" for c, n in conditions.items()) + ")")


def check_result(case: Case, actual: Any) -> str | None:
    """None when ``actual`` matches the reference, else a one-line reason."""
    if case.expected is None:
        return None
    import torch

    expected = case.expected()
    try:
        if case.check is not None:
            case.check(actual, expected)
        else:
            torch.testing.assert_close(actual, expected, atol=case.atol, rtol=case.rtol)
    except AssertionError as exc:
        return " ".join(str(exc).split())[:400]
    return None


def done_shape_ids(results: Path) -> set[tuple[str, str | None]]:
    """(shape, regime) already recorded in ``results`` (regime None: the shape failed before any regime timed it):
    a restarted process measures only the others."""
    if not results.exists():
        return set()
    return {(r.shape, r.regime) for r in read_results(results)}


def run_ir_only(config: CellConfig, load: CampaignLoad = load_cell_campaign) -> int:
    """Compile every shape's kernels for ``config.ir_target`` through a stand-in driver; launch nothing."""
    if config.ir_target is None:
        raise ValueError("an IR-only cell needs an IR target")  # from_argv refuses this argv
    if config.shares > 1:
        return run_shares(config, load)
    out = config.out
    if config.shard is None and not os.environ.get(envnames.ABBENCH_IR_CAPTURE):  # a share writes its cell's
        _count_markers_into(out)
    enter_compile_only(config.ir_target)
    record = config.autotune_file
    mode = config.autotune_mode if config.autotune_mode == "compile-all" else \
        "replay" if record and record.exists() else "off"
    side_file = config.autotune_side_file
    side_mode = "replay" if mode == "replay" and side_file is not None and side_file.exists() else None
    pin = AutotunePin(mode, record, log, can_benchmark=lambda _: False, side_mode=side_mode, side_path=side_file,
                      side=config.side)
    pin.candidate_procs = config.candidate_procs if mode == "compile-all" else 1
    install(pin)
    counter = CompileCounter().install()
    written = install_capture(out / IR_DIR, fingerprints_stages(config.round_no))
    # Loaded under the pin and the capture: kernels a script launches at import are compiled and captured once,
    # and run in the interpreter, for the script's own checks of their output.
    with standin_driver.launches_run():
        campaign = load(config, log, True)
    kept_out_only(campaign.server_imports)  # forked from a server they are out already; exec'd, from here on
    op = campaign.op(config.op)
    hook = campaign.switch.setup(config.side)
    if hook is not None:
        hook()
    shard, shards = config.shard_of()
    who = f"{out.name}: " if config.shard is not None else ""  # which share, in a log the shares write together
    for index, shape in enumerate(op.shapes_for(config.level)):
        if index % shards != shard:
            continue
        try:
            built = op.build(shape, "cpu")
            run = built.run if isinstance(built, Case) else built
            run()
        except Exception as exc:
            log(f"[abbench] {who}shape {shape.id}: {type(exc).__name__}: {exc}"[:500])
            raise
    counter.write(out)
    stood_in = standin_draws.COUNT.summary()
    log(f"[abbench] {who}IR for {config.ir_target}: {len(written)} kernel variants -> {out / IR_DIR} "
        f"({counter.loaded} loaded from Triton's cache, {counter.compiled} compiled)"
        + (f"; inputs: {stood_in} (ABBENCH_EXACT_DRAWS=1 draws them all)" if stood_in else ""))
    return 0


def run_shares(config: CellConfig, load: CampaignLoad) -> int:
    """Fork ``config.shares`` compile-only processes, share I/N of the shapes each; 1 if any failed.

    Forked from a process that imported torch and Triton (a fork server's
    cell, or this one once it has imported them), each share starts compiling
    at once.  Each share's seconds go to ``shares.json`` in the cell folder,
    and its IR into the cell's ``ir/``, where an unshared cell leaves it.
    """
    import torch  # noqa: F401  (imported once here, not once per share)
    import triton  # noqa: F401

    n = config.shares
    started = time.monotonic()
    running: dict[int, tuple[str, float]] = {}
    outs: dict[str, Path] = {}
    for i in range(n):
        out = share_dir(config.out, i, n)
        outs[out.name] = out
        share = dataclasses.replace(config, shares=1, shard=f"{i}/{n}", out=out)
        pid = fork_and_run(functools.partial(run_ir_only, share, load))
        running[pid] = (out.name, time.monotonic())
    seconds: dict[str, float] = {}
    failed: list[str] = []
    while running:
        pid, status = os.waitpid(-1, 0)
        if pid not in running:
            continue
        name, began = running.pop(pid)
        seconds[name] = round(time.monotonic() - began, 3)
        if status != 0:
            failed.append(f"{name} rc {os.waitstatus_to_exitcode(status)}")
    write_shares(config.out / SHARES_FILE, Shares(seconds=seconds, failed=failed))
    ir = config.out / IR_DIR
    counts = [kernel_counts_in(out) for out in outs.values()]
    if any(counts):
        write_kernel_counts(config.out, add_counts(*counts))
    for out in outs.values():  # a failed share's IR too: what it compiled is in the cell's log
        (out / KERNEL_COUNTS_FILE).unlink(missing_ok=True)
        merge_ir(out / IR_DIR, ir)
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()
    each = ", ".join(f"{name} {seconds[name]:.1f}s" for name in outs if name in seconds)
    log(f"[abbench] {n} shares compiled for {config.ir_target} in {time.monotonic() - started:.1f}s ({each}): "
        f"{len(ttgir_files(ir))} kernel variants -> {ir}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def capture_ir_on_cpu(config: CellConfig) -> float:
    """Run this cell again in compile-only mode, without the interpreter, for the IR target; its seconds."""
    env = dict(os.environ)
    env.pop(envnames.TRITON_INTERPRET, None)
    env[envnames.ABBENCH_IR_CAPTURE] = "1"
    ir_dir = config.out / IR_DIR
    ir_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(ir_dir / "compile.log", "wb") as ir_log:
        rc = subprocess.run(child_command(dataclasses.replace(config, ir_only=True)), env=env, stdout=ir_log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    if rc != 0:
        log(f"[abbench] IR capture for {config.ir_target} failed (rc {rc}); see {ir_dir / 'compile.log'}")
    else:
        log(f"[abbench] IR captured for {config.ir_target} in {time.monotonic() - start:.1f}s")
    return time.monotonic() - start
