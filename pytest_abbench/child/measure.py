"""The cell child: ``python -m pytest_abbench.child ...`` measures one (round, op, side).

It is the only part of the product that imports torch and triton.  It writes
into its cell folder: ``results.jsonl`` (one record per shape, appended as
each shape finishes), ``run_identity.json``, ``cell_timing.json`` (where the
wall time went), ``ir/`` (TTGIR), and on round 1 side A the autotune record.
Everything it prints goes to the parent's run.log.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

from pytest_abbench import tunercache
from pytest_abbench.child.autotune_pin import AUTOTUNE_REPLAY_FALLBACK, AutotunePin, AutotuneRecordError, install
from pytest_abbench.campaign import Case, load_campaign, shape_set_hash
from pytest_abbench.fileio import append_jsonl, iter_jsonl, write_json_atomic
from pytest_abbench.child.identity import build_identity, write_identity
from pytest_abbench.identity import file_hash
from pytest_abbench.child.ircapture import IR_DIR, enter_compile_only, install_capture
from pytest_abbench.child.timers import CapturePoisoned, time_with_fallback

RESULTS_FILE = "results.jsonl"
TIMING_FILE = "cell_timing.json"
SPAWN_TIME_ENV = "ABBENCH_SPAWN_TIME"
EXIT_SETUP_ERROR = 3  # the campaign, the switch hook or the autotune record could not be used


def guard_group(poll_s: float = 0.5) -> None:
    """Take this cell's whole process group down when the pytest that started it dies.

    The parent set a parent-death SIGTERM; its handler (and, for a parent that
    dies while this process sits in a long C call, a watchdog thread that sees
    the parent pid change) SIGKILLs the group, grandchildren included.
    """
    parent = os.getppid()

    def kill_group(*_: object) -> None:
        os.killpg(os.getpgid(0), signal.SIGKILL)

    signal.signal(signal.SIGTERM, kill_group)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                kill_group()

    threading.Thread(target=watch, name="abbench-parent-watch", daemon=True).start()


def log(line: str) -> None:
    print(line, flush=True)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pytest_abbench.child")
    p.add_argument("--campaign", required=True)
    p.add_argument("--op", required=True)
    p.add_argument("--round", type=int, required=True)
    p.add_argument("--side", choices=("A", "B"), required=True)
    p.add_argument("--role", default=None, help="A, B, or A2 for the A/A control")
    p.add_argument("--out", required=True)
    p.add_argument("--backend", choices=("cuda", "interpreter"), required=True)
    p.add_argument("--timer", choices=("cudagraph", "direct", "wall"), required=True)
    p.add_argument("--level", required=True)
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--direct-rep", type=int, default=100)
    p.add_argument("--direct-warmup", type=int, default=25)
    p.add_argument("--autotune-mode", choices=("record", "replay", "off"), default="off")
    p.add_argument("--autotune-file", default=None)
    p.add_argument("--ir-target", default=None, help="interpreter only: compile kernels for this target to capture TTGIR")
    p.add_argument("--switch", default="none")
    p.add_argument("--tuner-cache", default="per-cell", help="identity axis tuner_cache: per-cell or shared:DIR")
    p.add_argument("--ir-only", action="store_true", help="compile every shape's kernels for --ir-target; time nothing")
    return p.parse_args(list(argv))


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


def done_shape_ids(results: Path) -> set[str]:
    if not results.exists():
        return set()
    return {r["shape"] for r in iter_jsonl(results)}


def run_ir_only(args: argparse.Namespace) -> int:
    """Compile every shape's kernels for ``--ir-target`` through a stand-in driver; launch nothing."""
    out = Path(args.out)
    enter_compile_only(args.ir_target)
    campaign = load_campaign(args.campaign)
    op = campaign.op(args.op)
    hook = campaign.switch.setup(args.side)
    if hook is not None:
        hook()
    record = Path(args.autotune_file) if args.autotune_file else None
    pin = AutotunePin("replay" if record and record.exists() else "off", record, log, can_benchmark=lambda _: False)
    install(pin)
    written = install_capture(out / IR_DIR)
    for shape in op.shapes_for(args.level):
        built = op.build(shape, "cpu")
        run = built.run if isinstance(built, Case) else built
        run()
    log(f"[abbench] IR for {args.ir_target}: {len(written)} kernel variants -> {out / IR_DIR}")
    return 0


def capture_ir_on_cpu(args: argparse.Namespace, out: Path) -> None:
    """Run this cell again in compile-only mode, without the interpreter, for the IR target."""
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    argv = [sys.executable, "-m", "pytest_abbench.child", *sys.argv[1:], "--ir-only"]
    (out / IR_DIR).mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(out / IR_DIR / "compile.log", "wb") as ir_log:
        rc = subprocess.run(argv, env=env, stdout=ir_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    if rc != 0:
        log(f"[abbench] IR capture for {args.ir_target} failed (rc {rc}); see {out / IR_DIR / 'compile.log'}")
    else:
        log(f"[abbench] IR captured for {args.ir_target} in {time.monotonic() - start:.1f}s")


def measure(args: argparse.Namespace) -> int:
    started = time.time()
    spawned = float(os.environ.get(SPAWN_TIME_ENV, started))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / RESULTS_FILE

    import torch
    import triton  # noqa: F401  (import cost belongs to start-up)

    if args.backend == "cuda" and not torch.cuda.is_available():
        log("[abbench] backend cuda requested but torch.cuda.is_available() is False")
        return EXIT_SETUP_ERROR
    campaign = load_campaign(args.campaign)
    op = campaign.op(args.op)
    shapes = op.shapes_for(args.level)
    hook = campaign.switch.setup(args.side)
    if hook is not None:
        log(f"[abbench] side {args.side}: running switch setup {hook.__name__}()")
        hook()

    record = Path(args.autotune_file) if args.autotune_file else None
    try:
        pin = AutotunePin(args.autotune_mode, record, log,
                          can_benchmark=lambda at: args.backend == "cuda" or at._do_bench is not None)
    except AutotuneRecordError as exc:
        log(f"[abbench] {exc}")
        return EXIT_SETUP_ERROR
    install(pin)
    ir_written = install_capture(out / IR_DIR) if args.backend == "cuda" else []

    direct_repeat = f"rep={args.direct_rep}ms,warmup={args.direct_warmup}ms"
    identity = build_identity(
        backend=args.backend, timer=args.timer, bench_level=args.level, shape_mode=shape_set_hash(shapes),
        tuner_cache=args.tuner_cache, direct_repeat=direct_repeat, autotune_mode=args.autotune_mode,
        autotune_record=str(record) if record else None, campaign=Path(args.campaign), switch=args.switch,
        side=args.side, role=args.role or args.side, round_no=args.round, op=args.op,
    )
    if args.autotune_mode == "replay" and record is not None and record.exists():
        identity["autotune_record_hash"] = file_hash(record)
    # A shared tuner cache is what the caliber warning is about; only a per-cell one is pinned and checked.
    per_cell = os.environ.get(tunercache.CACHE_ENV) and not args.tuner_cache.startswith("shared:")
    tuner_dir = Path(os.environ[tunercache.CACHE_ENV]) if per_cell else None
    tuner_rows_before = tunercache.row_counts(tuner_dir) if tuner_dir else {}
    if tuner_dir is not None:
        # Which record this cell's library tuner starts from ("fresh": it tunes from nothing).
        identity["tuner_cache_seed"] = tunercache.content_hash(tuner_dir) or "fresh"
    write_identity(out, identity)
    device = "cuda" if args.backend == "cuda" else "cpu"
    ready = time.time()
    log(f"[abbench] cell r{args.round}-{args.role or args.side} op={args.op} backend={args.backend} "
        f"timer={args.timer} level={args.level} autotune={args.autotune_mode} start-up {ready - spawned:.2f}s")

    already = done_shape_ids(results)  # non-empty after a poisoned-capture restart
    phases = {"startup_s": ready - spawned, "build_s": 0.0, "first_call_s": 0.0, "autotune_bench_calls": 0,
              "timing_s": 0.0, "check_s": 0.0}
    poisoned = False
    for index, shape in enumerate(shapes):
        if shape.id in already:
            continue
        record_base: dict[str, Any] = {"shape": shape.id, "params": dict(shape.params), "index": index}
        try:
            t0 = time.perf_counter()
            built = op.build(shape, device)
            case = built if isinstance(built, Case) else Case(run=built)
            t1 = time.perf_counter()
            actual = case.run()  # first call: compilation and autotuning happen here
            if device == "cuda":
                torch.cuda.synchronize()
            t2 = time.perf_counter()
            problem = check_result(case, actual)
            t3 = time.perf_counter()
            phases["build_s"] += t1 - t0
            phases["first_call_s"] += t2 - t1
            phases["check_s"] += t3 - t2
            if problem is not None:
                log(f"[abbench] shape {shape.id}: WRONG RESULT: {problem}")
                append_jsonl(results, {**record_base, "status": "wrong", "error": problem})
                continue
            timing = time_with_fallback(case.run, args.timer, args.direct_rep, args.direct_warmup, args.samples,
                                        args.op, shape.id, log)
            phases["timing_s"] += time.perf_counter() - t3
        except CapturePoisoned as exc:
            append_jsonl(results, {**record_base, "status": "poisoned", "timer": "cudagraph", "error": exc.reason})
            poisoned = True
            break
        except Exception as exc:
            log(f"[abbench] shape {shape.id}: {type(exc).__name__}: {exc}")
            traceback.print_exc(file=sys.stdout)
            append_jsonl(results, {**record_base, "status": "error", "error": f"{type(exc).__name__}: {exc}"[:500]})
            continue
        samples = sorted(timing.samples_ms)
        median = samples[len(samples) // 2] if samples else None
        append_jsonl(results, {**record_base, "status": "ok", "timer": timing.timer, "samples_ms": timing.samples_ms,
                               "median_ms": median, "n": len(samples), "marker": timing.marker})
        log(f"[abbench] shape {shape.id}: {median:.4f} ms ({timing.timer}, n={len(samples)})")
    pin.save()
    if tuner_dir is not None and args.autotune_mode == "replay":
        tunercache.report_growth(tuner_rows_before, tunercache.row_counts(tuner_dir), log, AUTOTUNE_REPLAY_FALLBACK)
    phases["autotune_bench_calls"] = pin.bench_calls
    phases["ir_variants"] = len(ir_written)
    phases["total_s"] = time.time() - spawned
    write_json_atomic(out / TIMING_FILE, phases)

    if poisoned:
        # No later number of this process is trusted: the remaining shapes are
        # measured by a fresh process (same cell, same log) that skips the
        # shapes already in results.jsonl.  exec keeps the pid, so the parent's
        # timeout and process group still cover it.
        log("[abbench] capture poisoned the CUDA context: measuring the remaining shapes in a fresh process")
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, "-m", "pytest_abbench.child", *sys.argv[1:]])

    if args.backend == "interpreter" and args.ir_target:
        capture_ir_on_cpu(args, out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if os.getpgid(0) == os.getpid():  # started by the plugin as its group's leader (not in-process)
        guard_group()
    if args.ir_only:
        return run_ir_only(args)
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
