"""How long round 1 side A's tuning of an autotuned kernel takes, three ways side by side in one process on a GPU.

The kernel is liger-kernel's ``_swiglu_kernel_forward`` (campaigns/liger.py's ``swiglu_mlp``: 32 candidates per
key) at the campaign's two core shapes.  For each key, in turn, ``--trials`` times (the order rotating):
  one-launch   the pin's screen as cells run it: each candidate timed for one launch, those 1.5x the fastest or
               slower left out, the rest screened for 20 ms, the ones within 5% timed in full (``screened_tuning``)
  screen       the same without the one-launch timing: every candidate screened for 20 ms
  triton       Triton's own pass: every candidate for ``do_bench``'s 25 ms warm-up and 100 ms of repeats
Prints each way's median seconds per key, the ratios to ``screen`` and ``triton``, and each way's choices (the same
config, or not).  Needs a GPU, torch, Triton and liger-kernel 0.8.5 or later:

    python benchmarks/probes/autotune_screen.py --trials 3
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.modules.setdefault("peft", None)  # type: ignore[arg-type]  # as the campaign's UNUSED_IMPORTS: never read here

from pytest_abbench.child import autotune_candidates, autotune_pin  # noqa: E402
from pytest_abbench.core.cellconfig import DEFAULT_AUTOTUNE_SCREEN_MS  # noqa: E402

WAYS = ("one-launch", "screen", "triton")


def load_campaign() -> Any:
    path = Path(__file__).resolve().parents[2] / "campaigns" / "liger.py"
    spec = importlib.util.spec_from_file_location("liger_campaign", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tune(autotuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any], way: str) -> tuple[float, Any]:
    """One tuning of the key ``args`` make, the way named; its seconds and the config chosen."""
    autotuner.nargs = dict(zip(autotuner.arg_names, args))
    line = ""
    try:
        pruned = autotuner.prune_configs(kwargs)
        started = time.perf_counter()
        if way == "triton":
            timings = {config: autotuner._bench(*args, config=config, **kwargs) for config in pruned}
            chosen = min(timings, key=timings.__getitem__)
        else:
            launched_once = autotune_candidates.launched_once
            if way == "screen":
                autotune_candidates.launched_once = lambda *_: {}
            try:
                screened = autotune_candidates.screened_tuning(autotuner, args, kwargs, pruned, DEFAULT_AUTOTUNE_SCREEN_MS)
            finally:
                autotune_candidates.launched_once = launched_once
            assert screened is not None, "the screen declined this kernel"
            chosen, line = screened
        seconds = time.perf_counter() - started
    finally:
        autotuner.nargs = None
    if line:
        print(f"    {way}: {line}", flush=True)
    return seconds, chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    trials = parser.parse_args().trials
    import torch
    import triton
    from triton.runtime import autotuner as at

    campaign = load_campaign()
    calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
    original_run = at.Autotuner.run

    def capture(self: Any, *args: Any, **kwargs: Any) -> Any:  # the key's arguments, as Autotuner.run gets them
        calls.append((self, args, kwargs))
        return original_run(self, *args, **kwargs)

    at.Autotuner.run = capture
    op = next(op for op in campaign.OPS if op.name == "swiglu_mlp")
    cases = [op.build(shape, "cuda") for shape in op.shapes_for("core")]
    for case in cases:
        case.run()  # Triton tunes each key once here: every candidate compiled and loaded before the timings
    torch.cuda.synchronize()
    at.Autotuner.run = original_run
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"{len(calls)} keys, {trials} trials", flush=True)
    for autotuner, args, kwargs in calls:
        key = autotune_pin.tuning_key(autotuner, args, kwargs)
        print(f"key {list(key)[:3]}: {len(autotuner.configs)} candidates", flush=True)
        seconds: dict[str, list[float]] = {way: [] for way in WAYS}
        chosen: dict[str, set[str]] = {way: set() for way in WAYS}
        for trial in range(trials):
            for way in WAYS[trial % len(WAYS):] + WAYS[:trial % len(WAYS)]:
                took, config = tune(autotuner, args, kwargs, way)
                seconds[way].append(took)
                chosen[way].add(str(config))
        median = {way: statistics.median(seconds[way]) for way in WAYS}
        for way in WAYS:
            print(f"  {way:10s} median {median[way]:6.2f} s ({', '.join(f'{s:.2f}' for s in seconds[way])}); "
                  f"chose {' | '.join(sorted(chosen[way]))}")
        print(f"  one-launch / screen {median['one-launch'] / median['screen']:.3f}; "
              f"one-launch / triton {median['one-launch'] / median['triton']:.3f}; "
              f"screen / triton {median['screen'] / median['triton']:.3f}; "
              f"same choice every way and trial: {len(set().union(*chosen.values())) == 1}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
