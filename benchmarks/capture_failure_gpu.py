"""On a GPU: a callable that synchronizes during graph capture, through the cell's real timing path.

    python benchmarks/capture_failure_gpu.py

Prints which marker the decision code chose and whether a later measurement
in the same process still works.
"""

from __future__ import annotations

import torch

from pytest_abbench.child.timers import CapturePoisoned, time_with_fallback

x = torch.randn(1 << 20, device="cuda")


def syncs_during_capture() -> torch.Tensor:
    y = x * 2
    torch.cuda.synchronize()  # illegal while the stream is capturing
    return y


lines: list[str] = []
try:
    timing = time_with_fallback(syncs_during_capture, "cudagraph", 50, 10, 3, "probe", "sync", lines.append)
    print("timer used:", timing.timer, "marker:", timing.marker, "median ms:", sorted(timing.samples_ms)[len(timing.samples_ms) // 2])
except CapturePoisoned as exc:
    print("poisoned:", exc.reason)
print("\n".join(lines))
ok = time_with_fallback(lambda: x * 2, "cudagraph", 50, 10, 3, "probe", "after", lines.append)
print("next shape timer:", ok.timer, "marker:", ok.marker)
