"""Timing one callable inside a cell: CUDA graph replay, direct event timing, or wall clock.

Imported only by the cell child (it imports torch and triton lazily).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from pytest_abbench.core.markers import BENCHMARK_CAPTURE_POISONED, BENCHMARK_DIRECT_NO_CUDAGRAPH

MAX_KEPT_SAMPLES = 2000


@dataclass
class Timing:
    """Per-shape timing: every sample kept so the report can measure within-side noise."""

    timer: str
    samples_ms: list[float]
    marker: str | None = None
    reason: str | None = None


class CapturePoisoned(Exception):
    """Graph capture failed and left the CUDA context unusable: no later number of this process counts."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def time_wall(fn: Callable[[], Any], samples: int) -> Timing:
    """Wall-clock per call; the interpreter's timer.  Means nothing for GPU performance."""
    fn()  # warm-up: first call pays for tracing and allocation
    out = []
    for _ in range(samples):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e3)
    return Timing("wall", out)


def time_direct(fn: Callable[[], Any], rep_ms: int, warmup_ms: int) -> Timing:
    """Event timing of individual launches, L2 flushed between them (triton's do_bench)."""
    import triton.testing

    times = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")
    return Timing("direct", [float(t) for t in times][:MAX_KEPT_SAMPLES])


def time_cudagraph(fn: Callable[[], Any], rep_ms: int) -> Timing:
    """Replay of a captured graph of repeated calls (triton's do_bench_cudagraph)."""
    import triton.testing

    times = triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="all")
    return Timing("cudagraph", [float(t) for t in times][:MAX_KEPT_SAMPLES])


def cuda_health_probe() -> None:
    """Raise if the CUDA context or the current stream is no longer usable.

    A failed capture can leave a sticky error or a stream still in capture
    mode; a synchronize plus one tiny kernel round trip exposes both.
    """
    import torch

    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("current stream is still capturing")
    torch.cuda.synchronize()
    probe = torch.ones(16, device="cuda") * 2
    if float(probe.sum().item()) != 32.0:
        raise RuntimeError("health probe kernel returned a wrong value")


def time_with_fallback(
    fn: Callable[[], Any],
    timer: str,
    rep_ms: int,
    warmup_ms: int,
    samples: int,
    op: str,
    shape_id: str,
    log: Callable[[str], None],
    graph_timer: Callable[[Callable[[], Any], int], Timing] = time_cudagraph,
    direct_timer: Callable[[Callable[[], Any], int, int], Timing] = time_direct,
    probe: Callable[[], None] = cuda_health_probe,
) -> Timing:
    """Time one shape with the chosen timer, falling back when graph capture fails.

    Capture failed, context healthy: time directly, print
    BENCHMARK_DIRECT_NO_CUDAGRAPH.  Capture failed and the probe fails: print
    BENCHMARK_CAPTURE_POISONED and raise CapturePoisoned, so the caller can
    move the remaining shapes to a fresh process.  The timers and the probe
    are parameters so that this decision is testable without a GPU.
    """
    if timer == "wall":
        return time_wall(fn, samples)
    if timer == "direct":
        return direct_timer(fn, rep_ms, warmup_ms)
    try:
        return graph_timer(fn, rep_ms)
    except Exception as exc:  # capture failures surface as RuntimeError/CUDA errors of many kinds
        reason = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]
        try:
            probe()
        except Exception as probe_exc:
            detail = f"{reason}; health probe: {type(probe_exc).__name__}: {probe_exc}".replace("\n", " ")[:400]
            log(f"{BENCHMARK_CAPTURE_POISONED} op={op} shape={shape_id} reason={detail}")
            raise CapturePoisoned(detail) from exc
        log(f"{BENCHMARK_DIRECT_NO_CUDAGRAPH} op={op} shape={shape_id} reason={reason}")
        timing = direct_timer(fn, rep_ms, warmup_ms)
        timing.marker = BENCHMARK_DIRECT_NO_CUDAGRAPH
        timing.reason = reason
        return timing
