"""Pin ``@triton.autotune`` choices across cells: record once, replay everywhere else.

Round 1 side A records the config each autotuned kernel chose per autotune
key (taking a key's config from a seed instead of tuning it, where that
config is still one of the kernel's: an earlier root's record with
``--ab-autotune-from``, else what side A's kernel cache kept from its last
round 1); every other cell replays that file, so the autotuner benchmarks nothing
and both sides time the same configs.  A key that record lacks is one side A
never met (a kernel only side B calls): round 1 side B tunes it once and
records it in side B's supplement, which side B's later cells replay.
A cell that tunes screens the candidates first (``screened_tuning``): each
for a short time, then only those near the fastest for the benchmarker's own.
Installed by patching ``triton.runtime.autotuner.Autotuner.run`` inside the
cell child only.
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
from pytest_abbench.core.autotunerecord import AutotuneRecord, Ident, read_record, write_record
from pytest_abbench.core.cellconfig import (AUTOTUNE_FINALIST_TOL, AUTOTUNE_MODES, DEFAULT_AUTOTUNE_SCREEN_MS,
                                            SIDE_RECORD_MODES)
from pytest_abbench.core.fileio import CorruptFileError
from pytest_abbench.core.markers import AUTOTUNE_REPLAY_FALLBACK

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


class AutotuneRecordError(Exception):
    """A record cannot be used: unreadable, a recorded config no longer in the kernel's list, or two records
    pinning one key to different configs."""


def kernel_name(autotuner: Any) -> str:
    fn = autotuner.base_fn
    return f"{fn.__module__}:{fn.__qualname__}"


def tuning_key(autotuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TuningKey:
    """The key Triton's Autotuner.run computes (triton 3.2-3.6): key args, then dtypes."""
    nargs = dict(zip(autotuner.arg_names, args))
    all_args = {**nargs, **kwargs}
    named = {k: v for k, v in all_args.items() if k in autotuner.arg_names}
    key = [named[k] for k in autotuner.keys if k in named]
    key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    return tuple(key)


def config_to_dict(config: Any) -> dict[str, Any]:
    return {
        "kwargs": dict(config.kwargs),
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
        "num_ctas": config.num_ctas,
        "maxnreg": getattr(config, "maxnreg", None),
    }


def _ident(autotuner: Any, key: TuningKey) -> Ident:
    return kernel_name(autotuner), tuple(str(k) for k in key)


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


def _read_record(path: Path | None) -> AutotuneRecord:
    if path is None or not path.exists():
        # No record (its recording cell failed before writing one): every key falls back, loudly.
        return AutotuneRecord()
    try:
        return read_record(path)
    except CorruptFileError as exc:  # names the file and the field
        raise AutotuneRecordError(f"unreadable autotune record: {exc}") from None
    except OSError as exc:
        raise AutotuneRecordError(f"unreadable autotune record: {path}: {exc.strerror or exc}") from None


class AutotunePin:
    """The state of one cell: its modes, the records it reads or writes, the markers it printed.

    ``mode`` is how it uses the op's record (``record_path``); ``side_mode``
    how it uses its side's supplement (``side_path``): None (side A, which
    the op's record covers), ``record`` (side B's first cell: keys the op's
    record lacks are tuned and recorded) or ``replay``.
    """

    def __init__(self, mode: str, record_path: Path | None, log: Callable[[str], None],
                 can_benchmark: Callable[[Any], bool], side_mode: str | None = None,
                 side_path: Path | None = None, side: str | None = None, cell: str = "",
                 seed_path: Path | None = None, screen_ms: int = DEFAULT_AUTOTUNE_SCREEN_MS,
                 continuing: bool = False) -> None:
        if mode not in AUTOTUNE_MODES:
            raise ValueError(f"autotune_mode {mode!r} is not one of {', '.join(AUTOTUNE_MODES)}")
        if side_mode is not None and (side_mode not in SIDE_RECORD_MODES or mode != "replay" or side_path is None):
            # Only a cell replaying the op's record has keys it lacks; a supplement needs a file.
            side_mode = None
        self.mode = mode
        self.screen_ms = screen_ms  # 0: every candidate timed for the benchmarker's own warm-up and repeats
        self.record_path = record_path
        self.side_mode = side_mode
        self.side_path = side_path
        self.side = side
        self.cell = cell
        self.log = log
        self.can_benchmark = can_benchmark
        self.recorded: dict[Ident, dict[str, Any]] = {}
        self.side_recorded: dict[Ident, dict[str, Any]] = {}  # the supplement: read (replay) or written (record)
        self.fallback_keys: set[Ident] = set()
        self.candidate_procs = 1  # compile-all: processes that compile a kernel's candidates side by side
        self.bench_calls = 0
        self.bench_s = 0.0  # wall time inside the autotuner's benchmarking (candidate compiles included)
        # An earlier record of the op (--ab-autotune-from's root, or side A's kernel cache): a recording cell
        # takes its configs untuned.
        self.seed_path = seed_path if mode == "record" else None
        self.seed: dict[Ident, dict[str, Any]] = {}
        self.seed_sources: dict[Ident, str] = {}
        self.carried: set[Ident] = set()
        self.recorded_sources: dict[Ident, str] = {}  # record mode: each recorded kernel's ``kernel_source``
        if mode == "replay":
            self.recorded = self._load(record_path)
        if mode == "record" and continuing:
            self._continue_record()
        if self.seed_path is not None:
            try:
                seed = _read_record(self.seed_path)
                self.seed, self.seed_sources = seed.entries, seed.sources
            except AutotuneRecordError as exc:  # a seed only saves tuning: this cell tunes, and says why
                self.log(f"[abbench] autotune: nothing carried: {exc}; this cell tunes")
            else:
                self.log(f"[abbench] autotune: {len(self.seed)} keys in {self.seed_path} to carry"
                         if self.seed_path.exists() else
                         f"[abbench] autotune: nothing to carry: {self.seed_path} does not exist; this cell tunes")
        if side_mode == "replay":
            self.side_recorded = self._load(side_path)
            self._refuse_conflicts()

    def _load(self, path: Path | None) -> dict[Ident, dict[str, Any]]:
        return _read_record(path).entries  # an unreadable record raises naming its file once

    def _continue_record(self) -> None:
        """A recording cell that goes on in a fresh process (after a poisoned context) keeps the keys its first
        process recorded: its save would otherwise replace them with its own shapes' keys only."""
        try:
            earlier = _read_record(self.record_path)
        except AutotuneRecordError:
            return  # a record this cell cannot read is rewritten whole
        if earlier.recorded_by == self.cell:
            self.recorded, self.recorded_sources = dict(earlier.entries), dict(earlier.sources)

    def _refuse_conflicts(self) -> None:
        """Two records that pin one key to different configs: which one the cell times is not decidable."""
        for ident, config in sorted(self.side_recorded.items()):
            other = self.recorded.get(ident)
            if other is not None and other != config:
                raise AutotuneRecordError(
                    f"record/record conflict: kernel {ident[0]} key {list(ident[1])} is pinned to {other} by "
                    f"{self.record_path} and to {config} by {self.side_path} (round 1 side A met the key after "
                    f"side {self.side} recorded it: re-record both)")

    def _where(self, ident: Ident) -> tuple[dict[str, Any] | None, Path | None]:
        if ident in self.recorded:
            return self.recorded[ident], self.record_path
        if self.side_mode == "replay" and ident in self.side_recorded:
            return self.side_recorded[ident], self.side_path
        return None, None

    def choose(self, autotuner: Any, key: TuningKey, pruned: list[Any]) -> Any | None:
        """The config to use for ``key``, or None to let the autotuner tune."""
        if self.mode == "compile-all":
            bench_by_compiling(autotuner)  # the autotuner "benchmarks" every candidate: one compile each
            return None
        ident = _ident(autotuner, key)
        if self.mode == "record" and ident in self.seed:
            carried = self._carry(autotuner, ident, pruned)
            if carried is not None:
                return carried
        if self.mode == "replay":
            wanted, source = self._where(ident)
            if wanted is not None:
                for config in autotuner.configs:
                    if config_to_dict(config) == wanted:
                        return config
                raise AutotuneRecordError(
                    f"{source}: kernel {ident[0]} key {list(ident[1])}: recorded config {wanted} "
                    "is not in the kernel's config list any more (re-record round 1)"
                )
            if ident not in self.fallback_keys:
                self.fallback_keys.add(ident)
                if self.side_mode == "record":
                    # Not a miss: the key is one only this side meets, and this cell is the one that pins it.
                    self.log(f"[abbench] autotune: kernel={ident[0]} key={list(ident[1])} is not in the op's "
                             f"record (side A never met it): side {self.side} tunes it here and records it in "
                             f"{self.side_path}")
                else:
                    self.log(f"{AUTOTUNE_REPLAY_FALLBACK} kernel={ident[0]} key={list(ident[1])}")
        if not self.can_benchmark(autotuner):
            # No device to benchmark on (the interpreter, an IR-only compile):
            # the first config after pruning, so every such cell picks the same.
            return pruned[0]
        return None

    def screen(self, autotuner: Any, key: TuningKey, args: tuple[Any, ...], kwargs: dict[str, Any],
               pruned: list[Any]) -> Any | None:
        """Tune ``key`` by ``screened_tuning`` where this cell times (not compile-only, a benchmarker there) and
        ``screen_ms`` is set; None where the autotuner tunes as Triton does."""
        if self.mode == "compile-all" or not self.screen_ms or not self.can_benchmark(autotuner):
            return None
        screened = screened_tuning(autotuner, args, kwargs, pruned, self.screen_ms)
        if screened is None:
            return None
        chosen, line = screened
        kernel, key_text = _ident(autotuner, key)
        self.log(f"[abbench] autotune: kernel={kernel} key={list(key_text)}: {line}: {config_to_dict(chosen)}")
        announce_tuning(autotuner, key, chosen)
        return chosen

    def _carry(self, autotuner: Any, ident: Ident, pruned: list[Any]) -> Any | None:
        """The seed's config for ``ident`` when it is still one the kernel would try here (its configs after this
        device's pruning), else None: then it is tuned."""
        wanted = self.seed[ident]
        source = self.seed_sources.get(ident, "")
        if source and source != kernel_source(autotuner):
            self.log(f"[abbench] autotune: kernel={ident[0]} key={list(ident[1])}: {self.seed_path} pins {wanted}, "
                     "tuned on other code of this kernel (its fingerprint differs): tuned here")
            return None
        for config in pruned:
            if config_to_dict(config) == wanted:
                self.carried.add(ident)
                self.log(f"[abbench] autotune: kernel={ident[0]} key={list(ident[1])} carried from "
                         f"{self.seed_path}, not tuned: {wanted}")
                return config
        self.log(f"[abbench] autotune: kernel={ident[0]} key={list(ident[1])}: {self.seed_path} pins {wanted}, "
                 "not among the kernel's configs (after pruning) here: tuned here")
        return None

    def note(self, autotuner: Any, key: TuningKey, config: Any) -> None:
        ident = _ident(autotuner, key)
        if self.mode == "record":
            self.recorded[ident] = config_to_dict(config)
            self.recorded_sources[ident] = kernel_source(autotuner)
        elif self.side_mode == "record" and ident not in self.recorded:
            self.side_recorded[ident] = config_to_dict(config)

    def save(self) -> None:
        """Write what this cell recorded: the op's record, or its side's supplement (even empty: later cells then
        replay "no key of its own" rather than find no record)."""
        if self.mode == "record" and self.record_path is not None:
            carried = len(self.carried & self.recorded.keys())
            write_record(self.record_path, AutotuneRecord(
                self.recorded, recorded_by=self.cell, carried_from=str(self.seed_path) if carried else "",
                carried=carried, sources={i: s for i, s in self.recorded_sources.items() if s and i in self.recorded}))
        if self.side_mode == "record" and self.side_path is not None:
            write_record(self.side_path, AutotuneRecord(self.side_recorded, self.side, self.cell))


# Depth of autotuner benchmarking in progress (Triton's Autotuner and subclasses
# such as FlagGems' LibTuner): kernels compiled meanwhile are candidates, not
# necessarily the code the op runs.
_BENCHMARKING = [0]


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


def benchmarking() -> bool:
    return _BENCHMARKING[0] > 0


def install(pin: AutotunePin) -> None:
    """Route every Autotuner.run of this process through ``pin``."""
    from triton.runtime import autotuner as at

    original_run = at.Autotuner.run
    original_bench = at.Autotuner._bench

    def counted_bench(self: Any, *args: Any, **kwargs: Any) -> Any:
        if pin.mode == "compile-all" or not pin.can_benchmark(self):
            # A tuner with a run() of its own (FlagGems' LibTuner) benchmarks without asking the pin: where
            # nothing can be timed (a compile-only process has no benchmarker), each candidate compiles once.
            bench_by_compiling(self)
        pin.bench_calls += 1
        _BENCHMARKING[0] += 1
        started = time.perf_counter()
        try:
            return original_bench(self, *args, **kwargs)
        finally:
            _BENCHMARKING[0] -= 1
            if not _BENCHMARKING[0]:
                pin.bench_s += time.perf_counter() - started

    def pinned_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(self.configs) > 1:
            key = tuning_key(self, args, kwargs)
            if key not in self.cache:
                self.nargs = dict(zip(self.arg_names, args))
                pruned = self.prune_configs(kwargs)
                chosen = pin.choose(self, key, pruned)
                if chosen is None:
                    chosen = pin.screen(self, key, args, kwargs, pruned)
                self.nargs = None
                moved = 0
                if pin.mode == "compile-all" and pin.candidate_procs > 1 and len(pruned) > 1:
                    moved, line = compile_candidates_aside(self, args, kwargs, pruned,
                                                           min(pin.candidate_procs, len(pruned)))
                    pin.log(line)
                if chosen is not None:
                    self.cache[key] = chosen
                result = original_run(self, *args, **kwargs)
                counter = CompileCounter.active()
                if moved and counter is not None:  # after the autotuner's pass loaded them from the cache
                    counter.moved_to_compiled(moved)
                pin.note(self, key, self.cache[key])
                return result
        # Every later call costs the same in record and replay cells: a direct timer
        # sees host-side launch cost, which must not differ between the sides.
        return original_run(self, *args, **kwargs)

    at.Autotuner.run = pinned_run
    at.Autotuner._bench = counted_bench
