"""An autotuned kernel's candidates: screening them in a cell that tunes, compiling them in a compile-only one.

A cell that tunes times each candidate for a short time first
(``screened_tuning``), then only those near the fastest for the benchmarker's
own warm-up and repeats.  A compile-only cell compiles a kernel's candidates
in several processes side by side (``compile_candidates_aside``), each
candidate once per side (``candidate_lock``).  ``child/autotune_pin.py``
decides which key is tuned at all; this module only times and compiles.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import inspect
import math
import os
import stat
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

from pytest_abbench.child.compilecount import CompileCounter
from pytest_abbench.core import envnames
from pytest_abbench.core.cellconfig import AUTOTUNE_FINALIST_TOL

TuningKey = tuple[Any, ...]  # what Triton's Autotuner caches a chosen config under

# Screening (``screened_tuning``): Triton's benchmarker times every candidate for 25 ms of warm-up and 100 ms of
# repeats, 9.1-9.8 s of round 1 side A for Liger-Kernel's swiglu_mlp (2 keys x 32 candidates) on the H200, which
# then pins one config for both sides.  A candidate more than AUTOTUNE_FINALIST_TOL slower than the fastest over the
# screen's repeats is taken not to win: only those within it are timed again for the benchmarker's own warm-up and
# repeats, and the fastest of that second timing is chosen, as Triton's own pass would choose among them.
SCREEN_WARMUP_MS = 5
# Before the screen, where the benchmarker is Triton's own ``do_bench``, each candidate is launched once untimed (it
# loads), then each is timed for one launch, back to back, L2 cleared first as ``do_bench`` clears it: ``do_bench``
# launches a candidate at least 8 times however short its repeats (1, then 5 to estimate, then at least 1 warm-up
# and 1 repeat), which for swiglu_mlp's 12 ms kernels was most of its screen (3.6 s of 32 candidates on an H100).
# A candidate whose one launch took PRESCREEN_CUT times the fastest one's or more is taken not to win and is not
# screened.  Where the fastest launch is under PRESCREEN_MIN_MS, one launch is too short to rank by (event
# resolution, launch jitter) and the screen then takes every candidate, as it costs little there.
PRESCREEN_CUT = 1.5
PRESCREEN_MIN_MS = 0.5


def kernel_name(autotuner: Any) -> str:
    fn = autotuner.base_fn
    return f"{fn.__module__}:{fn.__qualname__}"


def config_to_dict(config: Any) -> dict[str, Any]:
    return {
        "kwargs": dict(config.kwargs),
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
        "num_ctas": config.num_ctas,
        "maxnreg": getattr(config, "maxnreg", None),
    }


def kernel_source(autotuner: Any) -> str:
    """A fingerprint of the autotuned kernel's code, so that a config tuned on other code is not carried: Triton's
    own (``JITFunction.cache_key``: its source, the @jit functions it calls, the globals it reads); in the
    interpreter, whose functions have none, a hash of the kernel's own source; "" when neither can be had."""
    fn = autotuner.fn
    while fn is not None and not hasattr(type(fn), "cache_key"):  # heuristics and interpreter wrappers
        fn = getattr(fn, "fn", None)
    try:
        if fn is not None:
            return f"triton:{fn.cache_key}"
        return "source:" + hashlib.sha256(inspect.getsource(autotuner.base_fn).encode()).hexdigest()[:32]
    except Exception:  # noqa: BLE001  (a fingerprint that cannot be made costs the carry, never the cell)
        return ""


def launch_untimed(kernel_call: Callable[[], Any], quantiles: Any = None, **_: Any) -> Any:
    """A benchmarker that launches once and times nothing (0 ms): in a compile-only process the launch compiles
    and runs nothing; on a GPU it loads (or compiles) the candidate before ``time_one_launch`` times it."""
    kernel_call()
    return [0.0] * len(quantiles) if quantiles else 0.0


def bench_by_compiling(autotuner: Any) -> None:
    """Make ``autotuner`` time each candidate by one compile-only launch (``launch_untimed``)."""
    autotuner._do_bench = launch_untimed
    autotuner.__dict__["do_bench"] = launch_untimed  # Triton caches do_bench on the instance


def screened_tuning(autotuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any], pruned: list[Any],
                    screen_ms: int) -> tuple[Any, str] | None:
    """The config Triton's tuning would choose for this call, found by timing each candidate of ``pruned`` for one
    launch where the benchmarker is Triton's own (``launched_once``; those ``PRESCREEN_CUT`` times the fastest or
    slower are left out, unless the fastest launch is under ``PRESCREEN_MIN_MS``), the rest for ``screen_ms`` of
    repeats, then the ones within ``AUTOTUNE_FINALIST_TOL`` of the fastest for the benchmarker's own warm-up and
    repeats, each through the autotuner's own ``_bench`` (its hooks, and a candidate that fails to compile timed as
    infinite).  Sets what Triton's pass sets (``configs_timings``, ``bench_time``, the arguments reset after
    tuning), tells Triton's listener and print of it (``announce_tuning``), and returns the choice and a line for
    the log.

    None, leaving the tuning to Triton, where the autotuner has a benchmarker of its author's, keeps its results on
    disk (``cache_results``), has one candidate, where its benchmarker takes no warm-up and repeats or repeats for
    no longer than the screen by default, where the short benchmarker cannot be put in place (a subclass's
    ``do_bench`` property), or where no candidate got a finite screen timing."""
    if len(pruned) < 2 or autotuner._do_bench is not None or getattr(autotuner, "cache_results", False):
        return None
    bench = autotuner.do_bench  # the driver's benchmarker (triton.testing.do_bench on CUDA)
    try:
        accepted = inspect.signature(bench).parameters
    except (TypeError, ValueError):
        return None
    if "warmup" not in accepted or "rep" not in accepted:
        return None
    full_rep = accepted["rep"].default
    if isinstance(full_rep, (int, float)) and not isinstance(full_rep, bool) and screen_ms >= full_rep:
        return None  # a screen as long as the full timing saves nothing
    started = time.perf_counter()
    short = functools.partial(bench, warmup=min(SCREEN_WARMUP_MS, screen_ms), rep=screen_ms)
    autotuner.__dict__["do_bench"] = short
    try:
        if autotuner.do_bench is not short:  # a property of a subclass: the swap did not take
            return None
        # A throw-away timing first: the card may be idle after compiling, and the first candidate's short warm-up
        # would then time it ramping to boost and screen it out.
        autotuner._bench(*args, config=pruned[0], **kwargs)
        once = launched_once(autotuner, args, kwargs, pruned, bench)
        kept, prescreen = prescreened(pruned, once)
        screened = {config: autotuner._bench(*args, config=config, **kwargs) for config in kept}
    finally:
        autotuner.__dict__["do_bench"] = bench
    medians = [screened[config][0] for config in kept]  # Triton's order: the median first
    finite = [ms for ms in medians if math.isfinite(ms)]
    if not finite:
        return None
    fastest = min(finite)
    finalists = [config for config, ms in zip(kept, medians) if ms <= fastest * (1.0 + AUTOTUNE_FINALIST_TOL)]
    timings = {**once, **screened}  # a candidate left out keeps its one launch's time
    if len(finalists) > 1:
        timings.update({config: autotuner._bench(*args, config=config, **kwargs) for config in finalists})
    chosen = min(finalists, key=timings.__getitem__)
    autotuner.bench_time = time.perf_counter() - started
    autotuner.configs_timings = timings
    autotuner.pre_hook({**autotuner.nargs, **kwargs, **chosen.all_kwargs()}, reset_only=True)
    line = (f"{prescreen}{len(kept)} candidates screened for {screen_ms} ms each, {len(finalists)} within "
            f"{AUTOTUNE_FINALIST_TOL:.0%} of the fastest timed in full, in {autotuner.bench_time:.1f}s; chose")
    return chosen, line


def launched_once(autotuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any], pruned: list[Any],
                  bench: Any) -> dict[Any, list[float]]:
    """Each candidate's time for one launch, where ``bench`` is Triton's own ``do_bench``; empty for any other
    benchmarker.  Every candidate is launched once untimed first (``launch_untimed``: it loads, or compiles where
    the cache misses), so that the timed launches (``time_one_launch``) then run back to back on a busy card, none
    just after an idle gap; a candidate that failed there (timed as infinite) is not launched again."""
    import triton.testing

    if bench is not triton.testing.do_bench:
        return {}
    screening = autotuner.__dict__.pop("do_bench", None)
    try:
        autotuner.__dict__["do_bench"] = launch_untimed
        loaded = {config: autotuner._bench(*args, config=config, **kwargs) for config in pruned}
        autotuner.__dict__["do_bench"] = time_one_launch
        return {config: autotuner._bench(*args, config=config, **kwargs) if math.isfinite(loaded[config][0])
                else loaded[config] for config in pruned}
    finally:
        if screening is None:
            autotuner.__dict__.pop("do_bench", None)
        else:
            autotuner.__dict__["do_bench"] = screening


def prescreened(pruned: list[Any], once: dict[Any, list[float]]) -> tuple[list[Any], str]:
    """The candidates to screen, and what the one-launch timing did, for the log: those whose one launch took less
    than ``PRESCREEN_CUT`` times the fastest one's; all of them without one-launch times, where the fastest launch
    is under ``PRESCREEN_MIN_MS``, or where no launch got a finite time.  A candidate whose launch time is not
    finite (it failed to compile or launch) is left out beside a fastest one, and counted as failed."""
    if not once:
        return pruned, ""
    finite = [once[config][0] for config in pruned if math.isfinite(once[config][0])]
    said = f"{len(pruned)} candidates timed for one launch each, "
    if not finite:
        return pruned, said + "none got a time: "
    fastest = min(finite)
    if fastest < PRESCREEN_MIN_MS:
        return pruned, said + f"the fastest {fastest:.3f} ms, under {PRESCREEN_MIN_MS:g} ms, too short to rank by: "
    kept = [config for config in pruned if once[config][0] < fastest * PRESCREEN_CUT]
    failed = len(pruned) - len(finite)
    return kept, said + (f"{len(pruned) - len(kept) - failed} at {PRESCREEN_CUT:g}x the fastest ({fastest:.3f} ms) "
                         "or slower left out, " + (f"{failed} failed, " if failed else ""))


def time_one_launch(fn: Callable[[], Any], quantiles: Any = None, **_: Any) -> Any:
    """A benchmarker for ``Autotuner._bench``: ``fn``, already launched once (``launch_untimed``), launched once
    between device events after L2 is cleared, as each of ``triton.testing.do_bench``'s repeats is, with the driver
    calls it makes."""
    from triton.runtime import driver

    active = driver.active
    device = active.get_device_interface()
    device.synchronize()
    active.clear_cache(active.get_empty_cache_for_benchmark())
    start, end = device.Event(enable_timing=True), device.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    device.synchronize()
    ms = float(start.elapsed_time(end))
    return [ms] * len(quantiles) if quantiles is not None else ms


def announce_tuning(autotuner: Any, key: TuningKey, chosen: Any) -> None:
    """Tell what Triton's own pass tells after tuning ``key``: ``knobs.autotuning.listener`` (Triton 3.9 on) and
    the ``TRITON_PRINT_AUTOTUNING`` lines, for a key the pin tuned in its place (``screened_tuning``)."""
    import triton

    tuning = getattr(getattr(triton, "knobs", None), "autotuning", None)
    listener = getattr(tuning, "listener", None)
    if listener is not None:
        jit = triton.runtime.jit
        jit_fn = autotuner.fn  # the innermost kernel, as Triton passes it (the interpreter's stands for the JIT's)
        while not isinstance(jit_fn, jit.JITFunction) and isinstance(getattr(jit_fn, "fn", None), jit.KernelInterface):
            jit_fn = jit_fn.fn
        listener(fn=jit_fn, key=key, best_config=chosen, configs_timings=autotuner.configs_timings,
                 duration=autotuner.bench_time, cache_hit=False)
    if getattr(tuning, "print", False):
        print(f"Triton autotuning for function {autotuner.base_fn.__name__},\nwith key as {key},\n"
              f"finished after {autotuner.bench_time:.2f}s,\nbest config selected: {chosen};")


def compile_candidates_aside(autotuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any], configs: list[Any],
                             processes: int) -> tuple[int, str]:
    """Compile ``configs`` of ``autotuner`` in ``processes`` processes: this one and forks of it, each a slice, into
    Triton's cache, so the autotuner's own pass over them afterwards loads them (compile-only processes).

    Returns how many kernels the forks compiled (this process then counts them as loaded) and a line for the log.
    A fork that fails costs nothing but time: the autotuner's pass compiles whatever it left.
    """
    slices = [configs[i::processes] for i in range(processes)]
    readers: list[tuple[int, int]] = []
    sys.stdout.flush()
    sys.stderr.flush()
    for part in slices[1:]:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the fork: compile its slice, say how many it compiled, leave
            code = 1
            try:
                os.close(read_end)
                counter = CompileCounter.active()
                before = counter.compiled if counter is not None else 0
                _compile_slice(autotuner, args, kwargs, part)
                os.write(write_end, str(counter.compiled - before if counter is not None else 0).encode())
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)  # not the parent's exit handlers: they are the parent's to run
        os.close(write_end)
        readers.append((pid, read_end))
    started = time.perf_counter()
    compiled, failed = 0, 0
    try:
        _compile_slice(autotuner, args, kwargs, slices[0])
    finally:  # the forks are waited for whatever happened here
        for pid, read_end in readers:
            with os.fdopen(read_end, "rb") as pipe:
                said = pipe.read().decode()
            _, status = os.waitpid(pid, 0)
            if status == 0 and said.isdigit():
                compiled += int(said)
            else:
                failed += 1
    line = (f"[abbench] autotune: kernel={kernel_name(autotuner)}: {len(configs)} candidates compiled in "
            f"{processes} processes side by side in {time.perf_counter() - started:.1f}s"
            + (f" ({failed} fork(s) failed: this process compiles what they left)" if failed else ""))
    return compiled, line


def _compile_slice(autotuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any], configs: list[Any]) -> None:
    """Each config of ``configs`` compiled once, as the autotuner's benchmark would (compile-only: nothing runs).

    The side's other shares compile the same candidates for their own shapes, at the same moment, and most
    shapes specialize a kernel alike (Liger-Kernel's swiglu_mlp: both shapes' 32 candidates are the same 32
    kernels): a candidate another process holds is left for last, when it waits for that process and loads what it
    compiled from the side's kernel cache, so each is compiled once and the processes share the work.
    """
    bench_by_compiling(autotuner)
    autotuner.nargs = dict(zip(autotuner.arg_names, args))
    try:
        later = []
        for config in configs:
            with candidate_lock(autotuner, config, wait=False) as held:
                if held:
                    autotuner._bench(*args, config=config, **kwargs)
                else:
                    later.append(config)
        for config in later:
            with candidate_lock(autotuner, config, wait=True):
                autotuner._bench(*args, config=config, **kwargs)
    finally:
        autotuner.nargs = None


@contextlib.contextmanager
def candidate_lock(autotuner: Any, config: Any, wait: bool) -> Iterator[bool]:
    """Hold the lock of one candidate of ``autotuner`` for this side's kernel cache (``TRITON_CACHE_DIR``); yields
    False where another process holds it and ``wait`` is False.  Yields True without holding anything where there
    is no cache folder, no private lock folder or no lock: the lock only saves work (Triton's cache lookup before
    it compiles is what is correct).  The lock file goes once the candidate is in the cache: a process that opens
    it afresh then finds the kernel there."""
    cache = os.environ.get(envnames.TRITON_CACHE_DIR)
    folder = _lock_folder()
    if not cache or folder is None:
        yield True
        return
    name = hashlib.sha256(repr((os.path.abspath(cache), kernel_name(autotuner), kernel_source(autotuner),
                                config_to_dict(config))).encode()).hexdigest()[:32]
    path = folder / f"{name}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        except OSError:  # no locks on this file system (ENOLCK): each process compiles what it needs
            yield True
            return
        yield True
        with contextlib.suppress(OSError):
            os.unlink(path)  # while held: whoever opened it before waits on this one, and finds the kernel cached
    finally:
        os.close(fd)  # and with it the lock


def _lock_folder() -> Path | None:
    """``<temporary folder>/abbench-candidate-locks-<uid>``, made private; None where it is not this user's own
    folder (another user could otherwise hold a candidate's lock for ever)."""
    folder = Path(tempfile.gettempdir()) / f"abbench-candidate-locks-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return folder
