"""On a GPU only: a CUDA graph capture that fails leaves the process as it was, and the cell times directly.

Real CUDA graphs, real sessions.  A callable that calls ``torch.cuda.synchronize()`` cannot be captured (common in
pytest-benchmark GPU tests); neither could the layer-norm tutorial's backward pass.  Before the fix every later
``torch.rand`` in the process failed ("Offset increment outside graph capture encountered unexpectedly").
"""

from __future__ import annotations

import textwrap

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: it captures CUDA graphs")

from pytest_abbench.child.timers import DirectWindows, GraphWindows, prepare_with_fallback  # noqa: E402
from pytest_abbench.core.markers import BENCHMARK_DIRECT_NO_CUDAGRAPH  # noqa: E402
from pytest_abbench.core.results import read_results  # noqa: E402
from pytest_abbench.core.status import read_status  # noqa: E402


def test_a_failed_capture_leaves_the_generator_stream_and_allocator_as_they_were() -> None:
    x = torch.randn(1 << 16, device="cuda")

    def syncs() -> None:
        (x * 2).sum()
        torch.cuda.synchronize()  # not allowed while the stream captures

    stream = torch.cuda.current_stream()
    lines: list[str] = []
    timer = prepare_with_fallback(syncs, "cudagraph", 5.0, 0.0, "op", "shape", lines.append)
    assert isinstance(timer, DirectWindows) and timer.marker == BENCHMARK_DIRECT_NO_CUDAGRAPH, lines
    assert torch.cuda.current_stream() == stream
    assert not torch.cuda.is_current_stream_capturing()
    torch.rand(1024, device="cuda")  # raised "Offset increment outside graph capture" before the fix
    samples, calls = timer.window()
    assert calls >= 1 and min(samples) > 0
    # The next shape captures as if nothing had been tried.
    graph = GraphWindows(lambda: x * 3, 5.0)
    assert graph.window()[0][0] > 0


SCRIPT = textwrap.dedent('''
    import torch
    import triton

    DEVICE = triton.runtime.driver.active.get_active_torch_device()


    @triton.testing.perf_report(triton.testing.Benchmark(
        x_names=['n'], x_vals=[1024, 2048, 4096], line_arg='provider', line_vals=['torch'], line_names=['Torch'],
        ylabel='ms', plot_name='syncs', args={}))
    def syncs(n, provider):
        x = torch.rand(n, device=DEVICE)  # every point draws: a poisoned generator fails the points after the first

        def step():
            y = x * 2
            torch.cuda.synchronize()
            return y

        return triton.testing.do_bench(step)
''')


def plugin_args() -> list[str]:
    """``-p pytest_abbench.plugin`` where the package runs from its folder (PYTHONPATH, as on a GPU machine) rather
    than installed: pytest then finds no entry point for it."""
    from importlib.metadata import entry_points

    installed = any(e.value.startswith("pytest_abbench") for e in entry_points(group="pytest11"))
    return [] if installed else ["-p", "pytest_abbench.plugin"]


def test_points_after_a_failed_capture_run_and_are_timed_directly(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(syncs=SCRIPT)
    result = pytester.runpytest_subprocess(*plugin_args(), "syncs.py", "--ab-providers", "torch",
                                           "--ab-switch-env", "ABBENCH_TEST_SWITCH=1", "--ab-allow-no-ir-diff",
                                           "--ab-rounds", "2", "--ab-regime", "burst", "--ab-root", "root",
                                           "-p", "no:cacheprovider")
    rows = read_status(pytester.path / "root")
    assert sorted((r.round, r.side, r.status, r.success, r.failed) for r in rows) == [
        (1, "A", "ok", 3, 0), (1, "B", "ok", 3, 0), (2, "A", "ok", 3, 0), (2, "B", "ok", 3, 0)], result.stdout.str()
    shapes = list(read_results(pytester.path / "root" / "r1_A" / "syncs" / "results.jsonl"))
    assert [(r.shape, r.status) for r in shapes] == [("n=1024", "ok"), ("n=2048", "ok"), ("n=4096", "ok")]
    log = (pytester.path / "root" / "r1_A" / "syncs" / "run.log").read_text()
    assert log.count(BENCHMARK_DIRECT_NO_CUDAGRAPH) == 3 and "Offset increment" not in log
