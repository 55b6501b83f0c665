"""Compile an op's kernels for both sides in parallel before its round 1 is timed (``--ab-precompile``).

Round 1 otherwise compiles every shape's kernels one after another inside
the timed cells while the host's other cores idle.  Before an op's first
round-1 cell, the runner starts compile-only children (the ``--ab-ir-only``
machinery: a stand-in driver for the GPU's target, nothing launched), one
share of the shapes each, for both sides, each with exactly its side's cell
environment, so they fill each side's own ``TRITON_CACHE_DIR`` under the
keys the timed cells look up.  Autotuned kernels compile every candidate
config (``autotune_mode=compile-all``); nothing is chosen or recorded.  The
timed cells then load kernels from the cache.  A failed precompile costs
nothing but time: the cell compiles what is missing itself.

An op's own jobs seldom fill the host: two sides times a share per shape
(four processes for two shapes on sixteen cores), each share compiling its
kernels one after another.  So the runner pools them with the jobs of the
ops it will start round 1 of later (``run_groups``): one wait compiles them
all, and nothing compiles while a cell is timed.
"""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from pytest_abbench.spawn.cellrun import StartedCell, kill_group, start_process
from pytest_abbench.core import envnames, gpuinfo
from pytest_abbench.core.cellconfig import CellConfig
from pytest_abbench.core.cellfiles import KernelCounts, add_counts, kernel_counts_in, read_shares
from pytest_abbench.core.fileio import CorruptFileError
from pytest_abbench.spawn.forkserver import ForkServer, ForkServerError
from pytest_abbench.core.layout import SHARES_FILE

# The pass dump of IR triage (MLIR_ENABLE_DUMP) would change nothing in the cache key but cost time.
QUIET_ENV = {envnames.ABBENCH_PASS_DUMP: "0"}

_KILLED_WAIT_S = 10.0  # how long a killed compile job's exit status is waited for


def gpu_target(gpu: str | None) -> str | None:
    """The Triton target of the GPU cells time on (an index or a UUID; ``cuda:90`` for an H200); None if unknown."""
    found = gpuinfo.name_and_capability(gpu)
    return f"cuda:{found[1]}{found[2]}" if found else None


@dataclass
class Job:
    """One compile-only child: a side's share of the shapes, or (forked) all of a side's shares."""

    name: str  # e.g. "B-2of6": side B, share 2 of 6; "B": side B, its shares forked inside
    argv: list[str]  # the whole command; forked from ``server``: what follows ``python -m``
    env: dict[str, str]
    log: Path
    server: ForkServer | None = None
    processes: int = 1  # compile processes it runs at once (a forked side forks its shares): its part of the cores

    def start(self) -> StartedCell:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        if self.server is not None:
            return self.server.spawn(self.argv, self.env, self.log)
        with open(self.log, "wb") as log:
            return start_process(self.argv, self.env, log)


def exec_job(name: str, python: str, config: CellConfig, env_at: Callable[[Path], dict[str, str]],
             processes: int = 1) -> Job:
    """A compile-only job in a fresh interpreter, writing to ``config.out`` with its environment for that folder."""
    return Job(name, [python, "-m", *config.module_argv()], env_for(env_at(config.out)),
               config.out / "compile.log", processes=processes)


@dataclass
class PrecompileResult:
    seconds: float
    jobs: int
    failed: list[str]  # "B-2of6 rc 1 (log ...)"
    job_seconds: dict[str, float] = field(default_factory=dict)  # each finished share's own wall time
    kernels: dict[str, KernelCounts] = field(default_factory=dict)  # by side: loaded from the cache, compiled
    cut_by_timeout: int = 0  # jobs the pool's timeout killed or never started: not all of theirs was compiled

    def line(self, op: str) -> str:
        text = f"[abbench] precompiled {op} for both sides: {self.jobs} compile-only processes in {self.seconds:.1f}s"
        if self.kernels:
            text += " (" + "; ".join(f"side {side}: {n['loaded']} kernels loaded from the cache, {n['compiled']} compiled"
                                    for side, n in sorted(self.kernels.items())) + ")"
        if self.job_seconds:
            slowest = max(self.job_seconds, key=self.job_seconds.__getitem__)
            # The sum is about what one process compiling the shares one after another would have taken
            # (an exec'd share's time includes its own imports).
            text += (f" (slowest {slowest} {self.job_seconds[slowest]:.1f}s; the shares one after another: "
                     f"{sum(self.job_seconds.values()):.1f}s)")
        if self.failed:
            text += f"; failed (the cells compile those kernels themselves): {'; '.join(self.failed)}"
        return text


def run_groups(groups: Mapping[str, Sequence[Job]], parallel: int, timeout_s: float,
               check: Callable[[], None] | None = None) -> dict[str, PrecompileResult]:
    """Run the jobs of every group (an op's) as one pool, the first group's first, their processes at most
    ``parallel`` at a time (a job with more runs alone); each group's result, its seconds from the pool's start to
    its last job's end.  At ``timeout_s`` what runs is killed and what waits is never started."""
    started = time.monotonic()
    deadline = started + timeout_s
    order = [(name, job) for name, group in groups.items() for job in group]
    pending = list(range(len(order)))
    running: dict[int, tuple[StartedCell, float]] = {}
    failed: dict[int, str] = {}
    took: dict[int, float] = {}
    ended: dict[int, float] = {}
    cut: set[int] = set()  # jobs the timeout killed or never started

    def busy() -> int:
        return sum(order[i][1].processes for i in running)

    try:
        while pending or running:
            # In order: a job waits until its processes fit beside those running (one that needs more runs alone).
            while pending and (not running or busy() + order[pending[0]][1].processes <= parallel):
                index = pending.pop(0)
                try:
                    running[index] = (order[index][1].start(), time.monotonic())
                except (ForkServerError, OSError) as exc:  # a dead server: this job fails, the pool goes on
                    failed[index] = f"{order[index][1].name} not started: {exc}"
                    ended[index] = time.monotonic()
            for index, (proc, began) in list(running.items()):
                try:
                    proc.wait(timeout=0)
                except subprocess.TimeoutExpired:
                    continue
                del running[index]
                ended[index] = time.monotonic()
                took[index] = ended[index] - began
                kill_group(proc.pid)
                if proc.returncode != 0:
                    failed[index] = f"{order[index][1].name} rc {proc.returncode} (log {order[index][1].log})"
            if time.monotonic() > deadline:
                failed.update({i: f"{order[i][1].name} timed out after {timeout_s:g}s" for i in running})
                failed.update({i: f"{order[i][1].name} not started (timeout)" for i in pending})
                cut.update(running, pending)
                pending.clear()
                break
            if check is not None:
                check()
            time.sleep(0.05)
    finally:
        for index, (proc, _) in running.items():
            kill_group(proc.pid, signal.SIGKILL)
            ended[index] = time.monotonic()
            try:  # bounded: a fork server that never reports the killed job must not hang the session
                proc.wait(timeout=_KILLED_WAIT_S)
            except subprocess.TimeoutExpired:
                failed[index] = f"{order[index][1].name}: no exit status {_KILLED_WAIT_S:g}s after it was killed"
    results: dict[str, PrecompileResult] = {}
    for name, group in groups.items():
        indices = [i for i, (owner, _) in enumerate(order) if owner == name]
        last = max((ended[i] for i in indices if i in ended), default=started)
        results[name] = _group_result(group, [took.get(i) for i in indices], [failed[i] for i in indices if i in failed],
                                      last - started, sum(i in cut for i in indices))
    return results


def _group_result(jobs: Sequence[Job], took: Sequence[float | None], failed: list[str], seconds: float,
                  cut_by_timeout: int) -> PrecompileResult:
    """One group's result: each finished share's time (a forked side's from its shares file) and kernel counts."""
    job_seconds: dict[str, float] = {}
    for job, seconds_taken in zip(jobs, took):
        if seconds_taken is None:
            continue
        shares = job.log.parent / SHARES_FILE
        if job.server is not None and shares.exists():  # a forked side's shares timed themselves (run_shares)
            try:
                job_seconds.update({f"{job.name}-{k}": v for k, v in read_shares(shares)["seconds"].items()})
                continue
            except CorruptFileError:
                pass  # the side keeps its one figure; the compile log says what went wrong
        job_seconds[job.name] = seconds_taken
    kernels: dict[str, KernelCounts] = {}
    for job in jobs:  # a job's name starts with its side ("B-2of6", "B")
        counts = kernel_counts_in(job.log.parent)
        if counts is not None:
            kernels[job.name[0]] = add_counts(kernels.get(job.name[0]), counts)
    return PrecompileResult(seconds, len(jobs), failed, job_seconds, kernels, cut_by_timeout)


def shares(shape_count: int, parallel: int) -> int:
    """Shares per side: every process gets work, and both sides together fit the cores when they can."""
    return max(1, min(shape_count, max(1, parallel // 2)))


def env_for(env: Mapping[str, str]) -> dict[str, str]:
    return {**env, **QUIET_ENV}
