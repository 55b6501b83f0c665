"""The kernels one call of a shape launches, with their device time: a profiling pass after the shape's timed
windows, never inside one (``ABBENCH_KERNEL_SPLIT=1``; ``report/kernelsplit.py`` matches the sides).

torch.profiler (CUPTI) records ``CALLS`` calls, each inside a ``record_function`` range.  A kernel belongs to the
call whose range holds the CPU launch it correlates with (a CUDA graph's kernels to its ``cudaGraphLaunch``), so a
call's kernels are told apart even when the GPU runs behind the CPU.  Each kernel's name, grid and duration come
from the profiler's trace; the calls' lists are averaged position by position over the calls that launched the
most common sequence of names.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from pytest_abbench.core.fileio import append_jsonl
from pytest_abbench.core.kernellaunch import Launch, average_common
from pytest_abbench.core.layout import KERNELS_FILE

CALLS = 5  # calls profiled per shape: enough to average out one slow launch, few enough to cost milliseconds
_CALL = "abbench_call_"  # the record_function names of the profiled calls


LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")  # the trace's categories of a CPU-side launch


def profile_calls(run: Callable[[], Any], calls: int = CALLS) -> tuple[list[Launch], str]:
    """The kernels of one call of ``run`` in launch order, averaged over ``calls`` calls; and a note ("" when every
    call launched the same kernels)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            with record_function(f"{_CALL}{i}"):
                run()
        torch.cuda.synchronize()
    fd, name = tempfile.mkstemp(suffix=".json", prefix="abbench-trace-")
    os.close(fd)
    try:
        prof.export_chrome_trace(name)
        trace = json.loads(Path(name).read_text())
    finally:
        os.unlink(name)
    return per_call(trace.get("traceEvents", []), calls)


def per_call(events: list[dict[str, Any]], calls: int) -> tuple[list[Launch], str]:
    """``profile_calls``'s answer from a chrome trace's events (separate, so it is tested without a GPU)."""
    ranges = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), int(e["name"][len(_CALL):]))
                    for e in events if str(e.get("name", "")).startswith(_CALL) and e.get("ph") == "X"
                    and e.get("cat") != "gpu_user_annotation")
    launches: dict[int, int] = {}  # correlation id -> call
    for e in events:
        # ATen launches through the runtime API (cudaLaunchKernel), Triton through the driver's (cuLaunchKernelEx)
        if e.get("cat") in LAUNCH_CATEGORIES and "correlation" in e.get("args", {}):
            ts = float(e["ts"])
            call = next((c for start, end, c in ranges if start <= ts <= end), None)
            if call is not None:
                launches[int(e["args"]["correlation"])] = call
    by_call: dict[int, list[tuple[float, Launch]]] = {c: [] for c in range(calls)}
    for e in events:
        if e.get("cat") != "kernel":
            continue
        call = launches.get(int(e.get("args", {}).get("correlation", -1)))
        if call is None:
            continue
        grid = e["args"].get("grid")
        by_call[call].append((float(e["ts"]), Launch(str(e["name"]), tuple(int(g) for g in grid) if grid else None,
                                                     float(e.get("dur", 0.0)))))
    sequences = {c: [launch for _, launch in sorted(found, key=lambda item: item[0])] for c, found in by_call.items()}
    averaged, count = average_common(list(sequences.values()))
    note = "" if count == calls else (f"{calls - count} of {calls} profiled calls launched other kernels; averaged "
                                      f"over the {count} that launched the most common sequence")
    return averaged, note


def record_shape(cell_dir: Path, shape: str, run: Callable[[], Any], log: Callable[[str], None]) -> None:
    """Profile ``shape``'s calls and append its record to the cell's ``kernels.jsonl``; a failure is logged, never
    the shape's (the timed windows are already recorded)."""
    try:
        launches, note = profile_calls(run)
    except Exception as exc:  # the profiler is a diagnosis: its failure costs only the split
        log(f"[abbench] shape {shape}: kernel split not recorded: {type(exc).__name__}: {exc}")
        return
    append_jsonl(cell_dir / KERNELS_FILE, {"shape": shape, "calls": CALLS, "note": note,
                                           "kernels": [k.to_json() for k in launches]})
    total = sum(k.us for k in launches)
    log(f"[abbench] shape {shape}: {len(launches)} kernel launch(es) per call, {total:.1f} us of kernel time"
        + (f" ({note})" if note else ""))
