"""Pin ``@triton.autotune`` choices across cells: record once, replay everywhere else.

Round 1 side A records the config each autotuned kernel chose per autotune
key; every other cell replays that file, so the autotuner benchmarks nothing
and both sides time the same configs.  Installed by patching
``triton.runtime.autotuner.Autotuner.run`` inside the cell child only.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from pytest_abbench.core.cellconfig import AUTOTUNE_MODES
from pytest_abbench.core.fileio import write_json_atomic
from pytest_abbench.core.markers import AUTOTUNE_REPLAY_FALLBACK

SCHEMA = 1
TuningKey = tuple[Any, ...]  # what Triton's Autotuner caches a chosen config under


class AutotuneRecordError(Exception):
    """The record cannot be used: unreadable, or a recorded config no longer in the kernel's list."""


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


def _key_strings(key: TuningKey) -> list[str]:
    return [str(k) for k in key]


class AutotunePin:
    """The state of one cell: its mode, the record it reads or writes, the markers it printed."""

    def __init__(self, mode: str, record_path: Path | None, log: Callable[[str], None],
                 can_benchmark: Callable[[Any], bool]) -> None:
        if mode not in AUTOTUNE_MODES:
            raise ValueError(f"autotune_mode {mode!r} is not one of {', '.join(AUTOTUNE_MODES)}")
        self.mode = mode
        self.record_path = record_path
        self.log = log
        self.can_benchmark = can_benchmark
        self.recorded: dict[tuple[str, tuple[str, ...]], dict[str, Any]] = {}
        self.fallback_keys: set[tuple[str, tuple[str, ...]]] = set()
        self.bench_calls = 0
        self.bench_s = 0.0  # wall time inside the autotuner's benchmarking (candidate compiles included)
        if mode == "replay":
            self.recorded = self._load()

    def _load(self) -> dict[tuple[str, tuple[str, ...]], dict[str, Any]]:
        if self.record_path is None or not self.record_path.exists():
            # No record (round 1 A failed before writing one): every key falls back, loudly.
            return {}
        try:
            data = json.loads(self.record_path.read_text())
            return {(e["kernel"], tuple(e["key"])): e["config"] for e in data["entries"]}
        except (ValueError, KeyError, TypeError) as exc:
            raise AutotuneRecordError(f"{self.record_path}: unreadable autotune record ({exc})") from None

    def choose(self, autotuner: Any, key: TuningKey, pruned: list[Any]) -> Any | None:
        """The config to use for ``key``, or None to let the autotuner tune."""
        if self.mode == "compile-all":
            bench_by_compiling(autotuner)  # the autotuner "benchmarks" every candidate: one compile each
            return None
        ident = (kernel_name(autotuner), tuple(_key_strings(key)))
        if self.mode == "replay":
            wanted = self.recorded.get(ident)
            if wanted is not None:
                for config in autotuner.configs:
                    if config_to_dict(config) == wanted:
                        return config
                raise AutotuneRecordError(
                    f"{self.record_path}: kernel {ident[0]} key {list(ident[1])}: recorded config {wanted} "
                    "is not in the kernel's config list any more (re-record round 1)"
                )
            if ident not in self.fallback_keys:
                self.fallback_keys.add(ident)
                self.log(f"{AUTOTUNE_REPLAY_FALLBACK} kernel={ident[0]} key={list(ident[1])}")
        if not self.can_benchmark(autotuner):
            # No device to benchmark on (the interpreter, an IR-only compile):
            # the first config after pruning, so every such cell picks the same.
            return pruned[0]
        return None

    def note(self, autotuner: Any, key: TuningKey, config: Any) -> None:
        if self.mode == "record":
            self.recorded[(kernel_name(autotuner), tuple(_key_strings(key)))] = config_to_dict(config)

    def save(self) -> None:
        if self.mode != "record" or self.record_path is None:
            return
        entries = [{"kernel": k, "key": list(key), "config": cfg} for (k, key), cfg in sorted(self.recorded.items())]
        write_json_atomic(self.record_path, {"schema": SCHEMA, "entries": entries})


# Depth of autotuner benchmarking in progress (Triton's Autotuner and subclasses
# such as FlagGems' LibTuner): kernels compiled meanwhile are candidates, not
# necessarily the code the op runs.
_BENCHMARKING = [0]


def _compile_once(kernel_call: Callable[[], Any], quantiles: Any = None, **_: Any) -> Any:
    """A benchmarker that launches once (compile-only: compiles, runs nothing) and times nothing."""
    kernel_call()
    return [0.0] * len(quantiles) if quantiles else 0.0


def bench_by_compiling(autotuner: Any) -> None:
    """Make ``autotuner`` time each candidate by one compile-only launch (``_compile_once``)."""
    autotuner._do_bench = _compile_once
    autotuner.__dict__["do_bench"] = _compile_once  # Triton caches do_bench on the instance


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
                chosen = pin.choose(self, key, self.prune_configs(kwargs))
                self.nargs = None
                if chosen is not None:
                    self.cache[key] = chosen
                result = original_run(self, *args, **kwargs)
                pin.note(self, key, self.cache[key])
                return result
        # Every later call costs the same in record and replay cells: a direct timer
        # sees host-side launch cost, which must not differ between the sides.
        return original_run(self, *args, **kwargs)

    at.Autotuner.run = pinned_run
    at.Autotuner._bench = counted_bench
