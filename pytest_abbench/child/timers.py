"""Timing one callable inside a cell in windows: CUDA graph replay, direct event timing, or wall clock.

The timer is prepared once per shape (a graph captured, a launch count
estimated); the regime (``child/regime.py``) then runs its timed windows and
decides what happens between them.  Imported only by the cell child (it
imports torch and triton lazily).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Protocol

from pytest_abbench.core.markers import BENCHMARK_CAPTURE_POISONED, BENCHMARK_DIRECT_NO_CUDAGRAPH

MAX_KEPT_SAMPLES = 2000


Timed = tuple[list[float], int]  # one window: its samples (ms per call) and how many calls it made


class Windows(Protocol):
    """A shape's timer, prepared once, then run in timed windows (``child/regime.py`` decides when).

    ``window()`` times one window; ``windows(n, at_edge, warm_s)`` runs about ``warm_s`` untimed, then ``n``
    windows back to back, calling ``at_edge()`` at each of their ``n + 1`` edges (where the GPU state is read);
    ``run_for(s)`` keeps the kernel busy for about ``s`` seconds untimed (a steady regime's settling);
    ``keep_busy(s)`` queues untimed calls until about ``s`` seconds of them wait on the GPU and returns at once where
    the timer ``queues`` (the graph timer), so NVML can be read while the kernel runs; otherwise it runs them, as
    ``run_for`` does; ``drain()`` waits until what ``keep_busy`` queued has run (nothing to wait for otherwise).
    """

    timer: str
    marker: str | None
    reason: str | None
    queues: bool

    def window(self) -> Timed: ...

    def windows(self, count: int, at_edge: Callable[[], None], warm_s: float = 0.0) -> list[Timed]: ...

    def run_for(self, seconds: float) -> None: ...

    def keep_busy(self, seconds: float) -> None: ...

    def drain(self) -> None: ...


def windows_in_turn(timer: Windows, count: int, at_edge: Callable[[], None], warm_s: float = 0.0) -> list[Timed]:
    """``Windows.windows`` for a timer that waits for each window to end: the edges are taken between windows,
    with the device idle while ``at_edge`` runs (the direct and the wall timer; a graph timer does better)."""
    if warm_s > 0:
        timer.run_for(warm_s)
    at_edge()
    out = []
    for _ in range(count):
        out.append(timer.window())
        at_edge()
    return out


class CapturePoisoned(Exception):
    """Graph capture failed and left the CUDA context unusable: no later number of this process counts."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _busy(step: Callable[[], None], seconds: float) -> None:
    """``step`` again and again for about ``seconds``: at least once, and not once more when that step would end
    over half a step past them.  A steady settling chunk of 50 ms over a graph of a 48 ms window is one replay, not
    two: the settling reads NVML every ``STEADY_CHUNK_MS``, not every two windows."""
    last = time.perf_counter()
    end = last + seconds
    step()
    while True:
        now = time.perf_counter()
        if not now + (now - last) / 2 < end:  # not "<": a NaN span runs one step, as before
            return
        last = now
        step()


class WallWindows:
    """Wall clock per call, one call per window; the interpreter's timer.  Means nothing for GPU performance."""

    timer: str = "wall"
    marker: str | None = None
    reason: str | None = None
    queues: bool = False

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        fn()  # warm-up: the first call pays for tracing and allocation

    def window(self) -> Timed:
        start = time.perf_counter()
        self.fn()
        return [(time.perf_counter() - start) * 1e3], 1

    def windows(self, count: int, at_edge: Callable[[], None], warm_s: float = 0.0) -> list[Timed]:
        return windows_in_turn(self, count, at_edge, warm_s)

    def run_for(self, seconds: float) -> None:
        _busy(self.fn, seconds)

    def keep_busy(self, seconds: float) -> None:
        self.run_for(seconds)  # runs them: the wall timer has nothing to queue on

    def drain(self) -> None:
        pass  # keep_busy ran its calls to the end


# How long the untimed tail after the last timed replay lasts: an NVML edge read took 2.99 ms (median) and at most
# 17 ms on the H200, so the last edge, too, is read while the GPU runs.
READ_COVER_MS = 20.0


def queue_windows(count: int, warm: int, tail: int, replay: Callable[[], None], mark: Callable[[], Any],
                  wait: Callable[[Any], None], at_edge: Callable[[], None]) -> list[Any]:
    """Queue ``warm`` untimed replays, then ``count`` timed ones with a mark (a CUDA event) before the first and
    after each, then ``tail`` untimed ones; only then wait for each mark in turn and call ``at_edge`` right after
    it.  Returns the ``count + 1`` marks.  Apart so that the order is testable without a GPU."""
    for _ in range(warm):
        replay()
    edges = [mark()]
    for _ in range(count):
        replay()
        edges.append(mark())
    for _ in range(tail):
        replay()
    for edge in edges:
        wait(edge)
        at_edge()
    return edges


def _cuda() -> Any:
    """``torch.cuda``, whose Event and Stream carry no types."""
    import torch

    return torch.cuda


def _estimate_ms(fn: Callable[[], Any], before: Callable[[], None] = lambda: None) -> float:
    """One call's time from five, as triton's do_bench estimates it."""
    import torch

    start, end = _cuda().Event(enable_timing=True), _cuda().Event(enable_timing=True)
    start.record()
    for _ in range(5):
        before()
        fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / 5


def capture_or_restore(fn: Callable[[], Any], calls: int) -> Any:
    """A CUDA graph of ``calls`` calls of ``fn``; where capturing fails, the process is left as it was before.

    A capture that fails (a backward pass whose kernels run on another stream, a ``torch.cuda.synchronize()``
    in ``fn``) ends inside ``CUDAGraph.capture_end``, which raises before it does its own cleanup: the default
    CUDA generator stays marked as capturing (every later ``torch.rand`` then fails with "Offset increment outside
    graph capture encountered unexpectedly"), the capture stream stays the current stream, and the caching
    allocator keeps routing that stream's allocations to the graph's private pool.  Each is undone here: the
    generator gets a copy of its state taken before the capture, the stream before it is made current again, and
    the pool's routing is ended.  The direct timer's fallback, the next point and the next shape then run as if no
    capture had been tried.
    """
    import torch

    device = torch.cuda.current_device()
    generator = torch.cuda.default_generators[device]
    clone = getattr(generator, "clone_state", None)  # torch 2.4 and later, with graphsafe_set_state
    saved = clone() if clone is not None else None
    stream = torch.cuda.current_stream()
    graph = torch.cuda.CUDAGraph()
    pool = torch.cuda.graph_pool_handle()  # named here: a graph whose capture failed cannot tell its pool
    try:
        with torch.cuda.graph(graph, pool=pool):
            for _ in range(calls):
                fn()
    except BaseException:
        # Each step on its own: one that cannot be undone here is caught by the health probe after this
        # (``cuda_health_probe`` draws a random number), which moves the rest of the cell to a fresh process.
        undo: list[Callable[[], Any]] = [lambda: torch.cuda.set_stream(stream)]
        if saved is not None:
            undo.append(lambda: generator.graphsafe_set_state(saved))
        end_pool = getattr(torch._C, "_cuda_endAllocateToPool", None)
        if end_pool is not None:
            undo.append(lambda: end_pool(device, pool))  # raises where capture_end got as far as it
        for step in undo:
            try:
                step()
            except Exception:
                pass
        raise
    return graph


class GraphWindows:
    """A CUDA graph of as many calls as fill ``window_ms`` (triton's do_bench_cudagraph, captured once); a window
    is one timed replay and gives one sample, the replay's time per call."""

    timer: str = "cudagraph"
    marker: str | None = None
    reason: str | None = None
    queues: bool = True

    def __init__(self, fn: Callable[[], Any], window_ms: float) -> None:
        import torch

        self.stream = _cuda().Stream()
        self.queued: list[Any] = []  # an event after each replay ``keep_busy`` queued that may not have run yet
        with torch.cuda.stream(self.stream):
            fn()
            estimate = _estimate_ms(fn)
            self.calls = 1000 if estimate == 0 else max(1, int(window_ms / estimate))
            self.graph = capture_or_restore(fn, self.calls)
            torch.cuda.synchronize()
            # What a replay takes, for the warm-up and the tail of ``windows``: the estimate from plain launches is
            # no guide for a small kernel, whose launches cost more than it does.  The first replay also uploads
            # the graph: where it is short, that would weigh, so a second one is timed.
            replay_ms = self._replay_ms()
            if replay_ms < READ_COVER_MS:
                replay_ms = self._replay_ms()
            self.replay_ms = max(replay_ms, 1e-3)  # the warm-up and the tail divide by it

    def _replay_ms(self) -> float:
        """One replay, timed by events on the timer's stream."""
        import torch

        with torch.cuda.stream(self.stream):
            start, end = _cuda().Event(enable_timing=True), _cuda().Event(enable_timing=True)
            start.record()
            self.graph.replay()
            end.record()
            torch.cuda.synchronize()
        return float(start.elapsed_time(end))

    def window(self) -> Timed:
        return [self._replay_ms() / self.calls], self.calls

    def windows(self, count: int, at_edge: Callable[[], None], warm_s: float = 0.0) -> list[Timed]:
        """Untimed replays (at least one, about ``warm_s``), ``count`` timed replays and an untimed tail, all queued
        at once (``queue_windows``): the GPU never idles between windows, and each edge is read right after its
        event, while a later replay runs.  Read between windows with the GPU idle, NVML's reads (about 3 ms each
        on the H200) leave gaps in which a kernel at the power cap recovers and a small kernel's clock drops
        (docs/evidence/h200-nvml-edges-cost.txt).  Where a replay outlasts a read, every edge is read the same
        time after its event, so an energy delta spans one window's length; a window shorter than a read (a
        burst window of a small kernel) has its second edge read up to a read late, and its ``window_s`` says
        so."""
        import torch

        if count == 0:
            return []
        warm = max(1, math.ceil(warm_s * 1e3 / self.replay_ms))
        tail = max(1, math.ceil(READ_COVER_MS / self.replay_ms))

        def mark() -> Any:
            event = _cuda().Event(enable_timing=True)
            event.record()
            return event

        with torch.cuda.stream(self.stream):
            edges = queue_windows(count, warm, tail, self.graph.replay, mark, lambda event: event.synchronize(),
                                  at_edge)
        torch.cuda.synchronize()
        return [([float(a.elapsed_time(b)) / self.calls], self.calls) for a, b in zip(edges, edges[1:])]

    def run_for(self, seconds: float) -> None:
        import torch

        def replay() -> None:
            with torch.cuda.stream(self.stream):
                self.graph.replay()
            torch.cuda.synchronize()

        _busy(replay, seconds)

    def keep_busy(self, seconds: float) -> None:
        """Queue replays until about ``seconds`` of them wait on the stream behind the one running, without waiting:
        the GPU runs the kernel back to back while the caller reads NVML.  ``windows`` queues behind them on the
        same stream, so a steady run passes into its windows with no idle gap."""
        import torch

        self.queued = [event for event in self.queued if not event.query()]
        with torch.cuda.stream(self.stream):
            for _ in range(math.ceil(seconds * 1e3 / self.replay_ms) + 1 - len(self.queued)):
                self.graph.replay()
                event = _cuda().Event()
                event.record()
                self.queued.append(event)

    def drain(self) -> None:
        """Wait for the replays ``keep_busy`` queued: the next shape's inputs may take their memory."""
        self.stream.synchronize()
        self.queued = []


class DirectWindows:
    """Event timing of individual launches with L2 flushed between them (triton's do_bench loop); a window is as
    many launches as fill ``window_ms``, one sample each."""

    timer: str = "direct"
    marker: str | None = None
    reason: str | None = None
    queues: bool = False

    def __init__(self, fn: Callable[[], Any], window_ms: float, warmup_ms: float = 0.0) -> None:
        import torch
        from triton import runtime

        self.fn = fn
        fn()
        torch.cuda.synchronize()
        driver: Any = runtime.driver.active
        cache = driver.get_empty_cache_for_benchmark()
        self.clear: Callable[[], None] = lambda: driver.clear_cache(cache)
        estimate = _estimate_ms(fn, self.clear)
        self.calls = max(1, int(window_ms / estimate)) if estimate > 0 else 1000
        if warmup_ms > 0:
            self.run_for(warmup_ms / 1e3)  # do_bench's warm-up; a burst regime's idle gap follows it

    def window(self) -> Timed:
        import torch

        events = [(_cuda().Event(enable_timing=True), _cuda().Event(enable_timing=True))
                  for _ in range(self.calls)]
        for start, end in events:
            self.clear()
            start.record()
            self.fn()
            end.record()
        torch.cuda.synchronize()
        return [float(s.elapsed_time(e)) for s, e in events][:MAX_KEPT_SAMPLES], self.calls

    def windows(self, count: int, at_edge: Callable[[], None], warm_s: float = 0.0) -> list[Timed]:
        return windows_in_turn(self, count, at_edge, warm_s)

    def run_for(self, seconds: float) -> None:
        import torch

        def launches() -> None:
            for _ in range(self.calls):
                self.clear()
                self.fn()
            torch.cuda.synchronize()

        _busy(launches, seconds)

    def keep_busy(self, seconds: float) -> None:
        self.run_for(seconds)  # runs them: each launch is flushed and timed in turn, nothing queues ahead

    def drain(self) -> None:
        pass  # keep_busy ran its calls to the end


def cuda_health_probe() -> None:
    """Raise if the CUDA context or the current stream is no longer usable.

    A failed capture can leave a sticky error, a stream still in capture
    mode or the generator marked as capturing; a synchronize, one tiny kernel
    round trip and one random draw expose each.
    """
    import torch

    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("current stream is still capturing")
    torch.cuda.synchronize()
    probe = torch.ones(16, device="cuda") * 2
    if float(probe.sum().item()) != 32.0:
        raise RuntimeError("health probe kernel returned a wrong value")
    torch.rand(16, device="cuda")  # the CUDA generator: a capture that failed must not have left it capturing


def prepare_with_fallback(
    fn: Callable[[], Any],
    timer: str,
    window_ms: float,
    warmup_ms: float,
    op: str,
    shape_id: str,
    log: Callable[[str], None],
    graph_windows: Callable[[Callable[[], Any], float], Windows] = GraphWindows,
    direct_windows: Callable[[Callable[[], Any], float, float], Windows] = DirectWindows,
    probe: Callable[[], None] = cuda_health_probe,
) -> Windows:
    """One shape's timer with windows of about ``window_ms`` (the direct timer first warms up ``warmup_ms``),
    falling back when graph capture fails.

    Capture failed, context healthy: time directly, print
    BENCHMARK_DIRECT_NO_CUDAGRAPH.  Capture failed and the probe fails: print
    BENCHMARK_CAPTURE_POISONED and raise CapturePoisoned, so the caller can
    move the remaining shapes to a fresh process.  The timers and the probe
    are parameters so that this decision is testable without a GPU.
    """
    if timer == "wall":
        return WallWindows(fn)
    if timer == "direct":
        return direct_windows(fn, window_ms, warmup_ms)
    try:
        return graph_windows(fn, window_ms)
    except Exception as exc:  # capture failures surface as RuntimeError/CUDA errors of many kinds
        reason = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]
        try:
            probe()
        except Exception as probe_exc:
            detail = f"{reason}; health probe: {type(probe_exc).__name__}: {probe_exc}".replace("\n", " ")[:400]
            log(f"{BENCHMARK_CAPTURE_POISONED} op={op} shape={shape_id} reason={detail}")
            raise CapturePoisoned(detail) from exc
        log(f"{BENCHMARK_DIRECT_NO_CUDAGRAPH} op={op} shape={shape_id} reason={reason}")
        timing = direct_windows(fn, window_ms, warmup_ms)
        timing.marker = BENCHMARK_DIRECT_NO_CUDAGRAPH
        timing.reason = reason
        return timing
