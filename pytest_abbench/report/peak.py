"""Achieved throughput and its share of the device's peak, for shapes whose campaign declares the work of a call
(``Op.work``: FLOPs, bytes moved, the FLOPs' data type).

The peaks are datasheet figures keyed by the device name torch reports (the identity's ``device``); a device not
in the table gets achieved rates only, with ``unknown device`` said.  Tensor-core figures are dense (NVIDIA's
datasheets print them with 2:4 sparsity, twice the dense rate) and hold at the maximum boost clock: under the
power cap (the steady regime of a compute-bound kernel) the attainable share is lower.
docs/reference/report.md ("% of peak") cites each source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from pytest_abbench.report.model import OpReport


@dataclass(frozen=True)
class Peak:
    """One device's peaks: TFLOP/s by data type, memory bandwidth in GB/s, and where the figures come from."""

    tflops: dict[str, float]
    gbps: float
    source: str


PEAKS: dict[str, Peak] = {
    # NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column): FP8 3,958, BF16/FP16 1,979, TF32 989 TFLOPS with
    # sparsity; FP32 67 TFLOPS; 4.8 TB/s HBM3e.
    "NVIDIA H200": Peak({"fp8": 1979.0, "bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0}, 4800.0,
                        "NVIDIA H200 datasheet, SXM, dense"),
    # NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column): the same tensor-core rates, 3.35 TB/s HBM3.
    "NVIDIA H100 80GB HBM3": Peak({"fp8": 1979.0, "bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0}, 3350.0,
                                  "NVIDIA H100 datasheet, SXM, dense"),
}


def describe(device: str) -> str:
    """The report's words for the peak it uses on ``device``."""
    found = PEAKS.get(device)
    if found is None:
        return f"unknown device {device!r}: achieved rates only, no % of peak"
    rates = ", ".join(f"{dtype} {value:g} TFLOP/s" for dtype, value in found.tflops.items())
    return f"{found.source}: {rates}, memory {found.gbps:g} GB/s"


def side_rates(work: dict[str, Any], ms: float, found: Peak | None) -> dict[str, float]:
    """One side's achieved TFLOP/s and GB/s at ``ms`` per call, each with its % of peak where the peak is known."""
    seconds = ms / 1e3
    out: dict[str, float] = {}
    flops, moved, dtype = work.get("flops"), work.get("bytes"), work.get("dtype")
    if isinstance(flops, (int, float)) and flops > 0 and seconds > 0:
        out["tflops"] = flops / seconds / 1e12
        if found is not None and isinstance(dtype, str) and dtype in found.tflops:
            out["tflops_pct"] = 100.0 * out["tflops"] / found.tflops[dtype]
    if isinstance(moved, (int, float)) and moved > 0 and seconds > 0:
        out["gbps"] = moved / seconds / 1e9
        if found is not None:
            out["gbps_pct"] = 100.0 * out["gbps"] / found.gbps
    return out


def apply(ops: Sequence[OpReport], device: str) -> None:
    """Each judged shape's ``throughput`` from its declared work and median times; its op's ``peak`` source."""
    found = PEAKS.get(device)
    for o in ops:
        shapes = [s for s in o.shapes if s.work]
        if not shapes:
            continue
        o.peak = describe(device)
        for s in shapes:
            s.throughput = {side: side_rates(s.work, ms, found) for side, ms in (("A", s.a_ms), ("B", s.b_ms))}


def _rate(rates: dict[str, float], name: str, unit: str) -> str:
    if name not in rates:
        return ""
    share = rates.get(f"{name}_pct")
    return f"{rates[name]:.4g} {unit}" + (f" ({share:.0f}%)" if share is not None else "")


def lines(o: OpReport) -> list[str]:
    """The op's throughput block: the peak's source, then per shape each side's rates and shares of peak."""
    shapes = [s for s in o.shapes if s.throughput]
    if not shapes:
        return []
    width = max(len(s.shape) for s in shapes)
    out = [f"   throughput from the campaign's work per call, % of peak ({o.peak}):"]
    for s in shapes:
        parts = []
        for name, unit in (("tflops", "TFLOP/s"), ("gbps", "GB/s")):
            a, b = _rate(s.throughput.get("A", {}), name, unit), _rate(s.throughput.get("B", {}), name, unit)
            if a or b:
                parts.append(f"A {a or '-'}, B {b or '-'}")
        out.append(f"     {s.shape:<{width}}  " + "; ".join(parts))
    return out
