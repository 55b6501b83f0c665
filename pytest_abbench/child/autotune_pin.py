"""Pin ``@triton.autotune`` choices across cells: record once, replay everywhere else.

Round 1 side A records the config each autotuned kernel chose per autotune
key (taking a key's config from a seed instead of tuning it, where that
config is still one of the kernel's: an earlier root's record with
``--ab-autotune-from``, else what side A's kernel cache kept from its last
round 1); every other cell replays that file, so the autotuner benchmarks nothing
and both sides time the same configs.  A key that record lacks is one side A
never met (a kernel only side B calls): round 1 side B tunes it once and
records it in side B's supplement, which side B's later cells replay.
A cell that tunes screens the candidates first, and a compile-only cell
compiles them in several processes (``autotune_candidates``).
Installed by patching ``triton.runtime.autotuner.Autotuner.run`` inside the
cell child only.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from pytest_abbench.child.autotune_candidates import (TuningKey, announce_tuning, bench_by_compiling,
                                                      compile_candidates_aside, config_to_dict, kernel_name,
                                                      kernel_source, screened_tuning)
from pytest_abbench.child.compilecount import CompileCounter
from pytest_abbench.core.autotunerecord import AutotuneRecord, Ident, read_record, write_record
from pytest_abbench.core.cellconfig import AUTOTUNE_MODES, DEFAULT_AUTOTUNE_SCREEN_MS, SIDE_RECORD_MODES
from pytest_abbench.core.fileio import CorruptFileError
from pytest_abbench.core.markers import AUTOTUNE_REPLAY_FALLBACK


class AutotuneRecordError(Exception):
    """A record cannot be used: unreadable, a recorded config no longer in the kernel's list, or two records
    pinning one key to different configs."""


def tuning_key(autotuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TuningKey:
    """The key Triton's Autotuner.run computes (triton 3.2-3.6): key args, then dtypes."""
    nargs = dict(zip(autotuner.arg_names, args))
    all_args = {**nargs, **kwargs}
    named = {k: v for k, v in all_args.items() if k in autotuner.arg_names}
    key = [named[k] for k in autotuner.keys if k in named]
    key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    return tuple(key)


def _ident(autotuner: Any, key: TuningKey) -> Ident:
    return kernel_name(autotuner), tuple(str(k) for k in key)


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
