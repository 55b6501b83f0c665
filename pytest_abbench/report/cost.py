"""Where a campaign's time went: start-up, compile, autotune, timing, checks, the rest, and idle GPUs.

Each cell's child writes ``cell_timing.json`` (``child/measure.py``); its
status row's ``elapsed_s`` is the cell's wall time seen from the parent.  A
cell that ran is counted whole: what its timing file does not account for
(the fork or exec, the layout pads, the autotune record's save, a cell that
crashed before writing the file) is ``other``; an IR-only cell, which writes none, is compile.
``idle`` is worker time with no cell running: workers x session wall time
minus the cells' time (plugin, pytest, waiting).  ``kernels``: per side, the
kernels the cells (and the precompiles) loaded from Triton's cache and those
they compiled (``child/compilecount.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from pytest_abbench.core.cellfiles import KernelCounts, add_counts, kernel_counts_in, timing_kernel_counts
from pytest_abbench.core.cellfiles import read_timing as read_timing_file
from pytest_abbench.core.fileio import CorruptFileError
from pytest_abbench.core.layout import TIMING_FILE
from pytest_abbench.core.outcome import IR_ONLY, NO_IR_DIFF, CellOutcome

# The parts of a cell, in the order they are printed: (report key, cell_timing.json field, words).
# In the order a cell spends them: inputs is the op's build (its tensors), exit what the parent saw after the
# child's last stamp (the exit, CUDA teardown, reaping; runner.add_parent_timing).
PARTS = (("startup_s", "startup_s", "start-up"), ("inputs_s", "build_s", "inputs"), ("compile_s", None, "compile"),
         ("autotune_s", "autotune_s", "autotune"), ("timing_s", "timing_s", "timing"),
         ("checks_s", "check_s", "checks"), ("exit_s", "exit_s", "exit"), ("other_s", None, "other"))


def read_timing(cell_dir: Path) -> dict[str, Any]:
    """The cell's ``cell_timing.json``; empty when it is missing or unreadable."""
    try:
        return read_timing_file(cell_dir / TIMING_FILE)
    except (CorruptFileError, OSError):  # missing, torn, or not a timing file this version reads
        return {}


def cell_parts(timing: Mapping[str, Any], elapsed_s: float, status: str) -> dict[str, float] | None:
    """One cell's seconds per part (the keys of PARTS) from its ``read_timing``, summing to its whole time.

    None where the cell left no timing and is not IR-only: its time is all ``other``, but the caller says so.
    """
    if not timing:
        # IR-only: compiles its shapes and times nothing, so it writes no timing file.  A round-1 cell skipped by
        # a gate decided before round 1 (--ab-precompile) carries its op's precompile, which decided it.
        if status in (IR_ONLY, NO_IR_DIFF):
            return {**dict.fromkeys((key for key, _, _ in PARTS), 0.0), "compile_s": elapsed_s}
        return None
    parts = {key: float(timing.get(field) or 0.0) for key, field, _ in PARTS if field}
    # first_call_s is the first call of every shape: compilation, plus the autotuner's benchmarking.
    # precompile_s: the parallel compile before the op's round 1 (runner.precompile), in this cell's time;
    # ir_capture_s: an interpreter cell compiling its kernels again for the IR target (capture_ir_on_cpu).
    # Of precompile_s, precompile_wait_s went before any of its jobs could start: the sides' fork servers
    # importing torch, Triton and SERVER_IMPORTS, which every session pays once, compiling or not: start-up.
    precompile_s = float(timing.get("precompile_s") or 0.0)
    waited = min(precompile_s, float(timing.get("precompile_wait_s") or 0.0))
    parts["startup_s"] += waited
    parts["compile_s"] = max(0.0, float(timing.get("first_call_s") or 0.0) - parts["autotune_s"]) \
        + precompile_s - waited + float(timing.get("ir_capture_s") or 0.0)
    # The child's clock starts when the parent stamps the spawn, a moment before the parent's own clock, and
    # exit_s ends a moment after it: what the parts hold beyond the cell's time comes off the exit.
    excess = sum(parts.values()) - elapsed_s
    if excess > 0:
        parts["exit_s"] = max(0.0, parts["exit_s"] - excess)
    parts["other_s"] = max(0.0, elapsed_s - sum(parts.values()))
    return parts


def cell_kernels(cell: CellOutcome, timing: Mapping[str, Any]) -> dict[str, KernelCounts]:
    """The kernels a cell's processes loaded from Triton's cache and compiled, by side: its own (its timing, or
    an IR-only cell's counts file) and, for the cell that ran it, the op's precompile of both sides."""
    found = timing_kernel_counts(dict(timing))
    side = cell.key.side
    if isinstance(timing.get("kernels_loaded"), int) and isinstance(timing.get("kernels_compiled"), int):
        own: KernelCounts | None = KernelCounts(loaded=timing["kernels_loaded"], compiled=timing["kernels_compiled"])
    else:
        own = kernel_counts_in(cell.cell_dir) if cell.status == IR_ONLY else None
    if own is not None:
        found[side] = add_counts(found.get(side), own)
    return found


def time_spent(cells: Iterable[CellOutcome], wall_s: float | None = None, workers: int = 1) -> dict[str, Any]:
    """Seconds per part over every cell that ran; ``wall_s`` (the session's) adds ``idle_s`` and ``wall_s``."""
    spent = {key: 0.0 for key, _, _ in PARTS}
    cells_s, counted, without = 0.0, 0, 0
    kept_tuning_s = 0.0  # the tuning side A's kernel cache kept: a warm re-run carries it
    kernels: dict[str, KernelCounts] = {}  # by side: loaded from Triton's cache, compiled
    for cell in cells:
        gated_first = cell.status == NO_IR_DIFF and cell.elapsed_s > 0  # its op's precompile decided the gate
        if cell.resumed or not (cell.measured or gated_first) or cell.elapsed_s <= 0:
            continue  # run by an earlier session, skipped by the IR gate after round 1, or never started
        counted += 1
        timing = read_timing(cell.cell_dir)
        for side, counts in cell_kernels(cell, timing).items():
            kernels[side] = add_counts(kernels.get(side), counts)
        parts = cell_parts(timing, cell.elapsed_s, cell.status)
        if parts is None:
            without += 1
            parts = {"other_s": cell.elapsed_s}
        for key, value in parts.items():
            spent[key] += value
        cells_s += sum(parts.values())
        if timing.get("tuning_kept"):  # round 1 side A's choices, which its kernel cache kept (runner.keep_tuning)
            kept_tuning_s += parts.get("autotune_s", 0.0)
    out: dict[str, Any] = {key: round(value, 6) for key, value in spent.items()}  # a timed microsecond is not 0
    out.update(cells=counted, cells_without_timing=without, cells_s=round(cells_s, 6))
    if kept_tuning_s > 0:
        out["kept_tuning_s"] = round(kept_tuning_s, 6)
    if any(n["loaded"] or n["compiled"] for n in kernels.values()):  # a campaign without Triton kernels: none
        out["kernels"] = {side: dict(kernels[side]) for side in sorted(kernels)}
    if wall_s is not None:
        out["wall_s"] = round(wall_s, 3)
        out["workers"] = workers
        out["idle_s"] = round(max(0.0, workers * wall_s - cells_s), 3)
    return out


def warm_rerun(spent: dict[str, Any]) -> str:
    """What a re-run on this machine would spare once the kernels compiled here are in the cache: the cells'
    compile seconds (precompiles included) shared out by kernel count, compiled against loaded; empty where
    nothing was compiled.  A share by count, not a measurement: a compile costs more than a load (on the H200
    Liger-Kernel's cells spent 29.4 s compiling 84 kernels and loading 86, and 17.2 s loading 165 warm, so
    12.2 s less where this share says 14.5 s)."""
    kernels = spent.get("kernels") or {}
    compiled = sum(int(n["compiled"]) for n in kernels.values())
    loaded = sum(int(n["loaded"]) for n in kernels.values())
    tuned = float(spent.get("kept_tuning_s") or 0.0)
    parts = []
    if compiled:
        spared = float(spent.get("compile_s") or 0.0) * compiled / (compiled + loaded)
        parts.append(f"compiles none of these {compiled}: about {spared:.1f} s less compile, their share by kernel "
                     "count")
    if tuned >= 0.05:
        parts.append(f"tunes none of round 1 side A's autotune keys (its kernel cache keeps them): {tuned:.1f} s "
                     "less autotune")
    if not parts:
        return ""
    return f"; a warm re-run {' and '.join(parts)} (abbench kernels export carries them to another machine)"


def describe(spent: dict[str, Any], kernels_cached: bool = True) -> str:
    """One line: ``time: 12 cells 80.0 s: start-up 12%, compile 20%, ...; wall 90.0 s on 1 worker, idle 10%``.

    ``kernels_cached`` False (the interpreter): the kernels counted were compiled for the IR gate, and the per-pass
    dump its IR capture takes by default keeps them out of the kernel cache, so no warm re-run is promised."""
    total = float(spent.get("cells_s") or 0.0)
    if not spent.get("cells") or total <= 0:
        return ""
    parts = ", ".join(f"{words} {100 * float(spent[key]) / total:.0f}%" for key, _, words in PARTS)
    line = f"time: {spent['cells']} cells {total:.1f} s: {parts}"
    if spent.get("cells_without_timing"):
        line += f" ({spent['cells_without_timing']} cell(s) without cell_timing.json counted as other)"
    kernels = spent.get("kernels") or {}
    if kernels:
        line += "; compile cache: " + ", ".join(
            f"side {side} {n['loaded']} kernel{'s' if n['loaded'] != 1 else ''} loaded, {n['compiled']} compiled"
            for side, n in sorted(kernels.items()))
        line += (warm_rerun(spent) if kernels_cached else
                 " (compiled for the IR gate; a re-run loads them only with ABBENCH_PASS_DUMP=0: the per-pass dump "
                 "the interpreter's IR capture takes by default keeps them out of the kernel cache)")
    if "wall_s" in spent:
        capacity = float(spent["wall_s"]) * int(spent["workers"])
        idle = 100 * float(spent["idle_s"]) / capacity if capacity > 0 else 0.0
        workers = int(spent["workers"])
        line += (f"; wall {float(spent['wall_s']):.1f} s on {workers} worker{'s' if workers != 1 else ''}, "
                 f"idle {idle:.0f}%")
    return line
