"""Run one cell from the parent side: its environment and argv, the child, and the CellOutcome it leaves.

No pytest item is involved: the cell fixture calls ``CellRunner.run`` and
decides what the test reports.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

from pytest_abbench.spawn import precompile
from pytest_abbench.spawn.precompile import Job as CompileJob

from pytest_abbench.core import tunercache
from pytest_abbench.campaign.model import Campaign, source_hash
from pytest_abbench.campaign.probe import campaign_env
from pytest_abbench.spawn.kernelcache import KernelCaches
from pytest_abbench.core import autotunerecord, envnames, kernelcache
from pytest_abbench.core.cores import worker_share
from pytest_abbench.core.cellconfig import CellConfig, autotune_mode_for, side_record_mode_for, skip_shapes_arg
from pytest_abbench.spawn.cellrun import ChildResult, log_tail
from pytest_abbench.core.exitcodes import describe, status_word
from pytest_abbench.spawn import strategy
from pytest_abbench.spawn.forkserver import ForkServerError, ForkServers, ServerKey, server_key
from pytest_abbench.core.fileio import CorruptFileError
from pytest_abbench.core.cellfiles import (KERNEL_COUNTS_FILE, CellTiming, KernelCounts, add_counts, read_timing,
                                           write_timing)
from pytest_abbench.core.results import SKIPPED, failed_alike, read_results
from pytest_abbench.checks.irgate import ttgir_files
from pytest_abbench.core.layout import (SHARES_FILE, SIDES, TIMING_FILE, CellKey, RootLayout, ir_dir, markers_log,
                                        results_file, run_log)
from pytest_abbench.core.markers import count_markers, count_undecodable
from pytest_abbench.core.settings import Settings
from pytest_abbench.core.outcome import ALL_FAILED, FAILED_SHAPES, IR_ONLY, NO_SHAPES, OK, CellOutcome



@dataclass
class CellRun:
    """The outcome of one cell and, when it failed, the message that says why."""

    outcome: CellOutcome
    failure: str | None
    notices: list[str] = field(default_factory=list)  # lines for the terminal (a refused SERVER_IMPORTS module)
    kernel_cache: Path | None = None  # the side's Triton cache folder (origin.json keeps it: abbench kernels export)


MAX_CANDIDATE_PROCS = 4  # forks of a precompile share that compile one kernel's autotune candidates


@dataclass
class PrecompileSpent:
    """What an op's precompile cost, until its first cell counts it: its seconds, the part of them before its jobs
    could start (the sides' fork servers importing), and its kernels loaded and compiled, by side."""

    seconds: float
    wait_s: float
    kernels: dict[str, KernelCounts]

    def timing(self) -> CellTiming:
        """These, as the first cell's cell_timing.json keeps them."""
        timing: CellTiming = {"precompile_s": self.seconds,
                              "precompile_wait_s": round(min(self.wait_s, self.seconds), 3)}
        if self.kernels:
            timing["precompile_kernels"] = {side: {"loaded": n["loaded"], "compiled": n["compiled"]}
                                            for side, n in self.kernels.items()}
        return timing


class CellRunner:
    """Starts cell children for one session: settings, root layout and this worker's GPU are fixed."""

    def __init__(self, settings: Settings, layout: RootLayout, gpu: str | None,
                 check: Callable[[], None] | None = None,
                 finished_before: Callable[[CellKey], bool] = lambda key: False) -> None:
        self.settings = settings
        self.layout = layout
        self.gpu = gpu
        self.check = check  # called while a child runs: stops the session when it must not go on
        self.servers = ForkServers(layout.servers) if settings.spawn == "fork" else None  # None: exec
        self.kernel_caches = KernelCaches(settings.kernel_cache, layout, settings.backend, gpu,
                                          settings.kernel_imports)
        self._sources: dict[Path, str] = {}  # campaign file -> source hash, read once per session
        self.precompiled: set[str] = set()
        self.precompile_spent: dict[str, PrecompileSpent] = {}  # op -> its precompile's cost, until its cell counts it
        self.precompile_ir: dict[str, tuple[Path, Path]] = {}  # op -> each side's IR from a precompile that all ran
        self.precompiled_ahead: dict[str, str] = {}  # op compiled in an earlier op's pool -> its first cell's log line
        self.round_one: dict[Path, dict[CellKey, None]] = {}  # campaign file -> its round-1 cells planned, in order
        self.finished_before = finished_before  # a cell a resumed root finished: its op needs no precompile
        self.planned_servers: list[tuple[Campaign, CellKey]] = []
        # Cells of this process still to end, by (campaign file, side): a serial session's selected cells, or an
        # xdist worker's ops handed over so far (it learns them one op at a time).  A server no cell left needs
        # is not started ahead, and ends with its last cell.
        self.cells_left: Counter[tuple[Path, str]] = Counter()
        self.retirement_held = False  # ``hold_retirement``
        self._held: set[tuple[Path, str]] = set()  # (campaign file, side) whose last cell ended while held
        self._campaigns: dict[Path, Campaign] = {}
        self._target: str | None | bool = False  # the GPU's Triton target, looked up once (False: not yet)

    def close(self) -> None:
        """End the session's fork servers (they would also die with this process)."""
        if self.servers is not None:
            self.servers.close()

    def plan_servers(self, cells: Iterable[tuple[Campaign, CellKey]]) -> None:
        """The fork servers to start ahead, once the first cell's own are ready (``_start_planned_servers``).

        A server spends seconds importing torch and Triton.  Started when the
        first cell of its switch comes (an op of another campaign, midway
        through the session), that is seconds of the cell's start-up with the
        GPU idle; started once the first cell's servers are ready, it imports
        while that cell compiles, and does not slow the imports the first cell
        waits for.  Only the servers of cells this process still has start
        ahead: on an xdist worker, those of the ops it was handed so far
        (``AbbenchSession.ops_coming``, which also warms the next op's servers).
        """
        self.planned_servers = list(cells)

    def _start_planned_servers(self) -> None:
        """Start the planned servers in the background, as many as the spawn has room for."""
        planned, self.planned_servers = self.planned_servers, []
        for campaign, key in planned:
            if strategy.room(self.servers) == 0:
                return
            self._start_server(campaign, key, self.layout.cell(key))

    def _start_server(self, campaign: Campaign, key: CellKey, cell_dir: Path) -> None:
        """Start the server of ``key``'s side (a cell in ``cell_dir``) under fork spawn if a cell of this
        process still needs it; does not wait for it."""
        if self.servers is None or (self.cells_left and not self.cells_left[(campaign.path, key.side)]):
            return  # exec spawn, or its cells have ended (or were deselected): it would only hold memory
        self.servers.start(self.python(campaign, key), self.env(campaign, key, cell_dir), f"side-{key.side}",
                           campaign.server_imports)

    def warm_op(self, campaign: Campaign, op: str) -> None:
        """Start the servers of both sides of ``op`` (the next op of this process) in the background."""
        for side in SIDES:
            key = CellKey(1, op, side)
            self._start_server(campaign, key, self.layout.cell(key))

    def plan_cells(self, cells: Iterable[tuple[Campaign, CellKey]]) -> None:
        """The cells this process will end (run, skip or fail), so a side's fork server ends with its last one."""
        for campaign, key in cells:
            self._campaigns[campaign.path] = campaign
            self.cells_left[(campaign.path, key.side)] += 1
            if key.round == 1:
                self.round_one.setdefault(campaign.path, {})[key] = None

    def cell_ended(self, campaign: Campaign, key: CellKey) -> None:
        """``key`` ended: end the fork server of its side once no cell left needs it.

        Cells of two campaigns whose sides have one environment share a server:
        it ends with the last cell of either.  A server that is still needed
        after all (a cell run again) is started again.
        """
        self.round_one.get(campaign.path, {}).pop(key, None)  # an op whose round 1 ended is not compiled ahead
        where = (campaign.path, key.side)
        if self.cells_left[where] <= 0:
            return
        self.cells_left[where] -= 1
        if self.cells_left[where]:
            return
        if self.retirement_held:
            self._held.add(where)
            return
        self._retire_unneeded(where)

    def hold_retirement(self, hold: bool) -> None:
        """Hold (True) or let go (False) the servers whose last cell ended, while this process does not know
        its next op (an xdist worker in the middle of an op: ``AbbenchSession.ops_coming``); let go, each one
        that no cell planned since needs ends now."""
        self.retirement_held = hold
        if not hold:
            held, self._held = self._held, set()
            for where in held:
                self._retire_unneeded(where)

    def _retire_unneeded(self, where: tuple[Path, str]) -> None:
        """End the server of (campaign file, side) unless a cell left, of any campaign that shares it, needs it."""
        if self.cells_left[where]:
            return
        path, side = where
        campaign = self._campaigns[path]
        python, env, label = self._server_args(campaign, side)
        server = self._server_key(python, env, label, campaign.server_imports)
        if any(self.server_of(self._campaigns[other], other_side) == server
               for (other, other_side), left in self.cells_left.items() if left):
            return
        if self.servers is not None:
            self.servers.retire(python, env, label, campaign.server_imports)

    def _server_args(self, campaign: Campaign, side: str) -> tuple[str, dict[str, str], str]:
        """The interpreter, environment and label a side's fork server is keyed by (``forkserver.server_key``)."""
        key = CellKey(1, campaign.ops[0].name, side)
        return self.python(campaign, key), self.env(campaign, key, self.layout.cell(key)), f"side-{side}"

    def _server_key(self, python: str, env: dict[str, str], label: str, imports: tuple[str, ...]) -> ServerKey:
        held = imports if self.servers is None else self.servers.held_imports(python, env, label, imports)
        return server_key(python, env, label, held)

    def server_of(self, campaign: Campaign, side: str) -> ServerKey:
        """The fork server a side's cells are forked from (``forkserver.server_key``)."""
        return self._server_key(*self._server_args(campaign, side), campaign.server_imports)

    def env(self, campaign: Campaign, key: CellKey, cell_dir: Path) -> dict[str, str]:
        """The child's environment, as an explicit merge (README "Cell environment").

        Start from this process's environment; drop every variable either
        side's switch sets (so a variable exported in the shell cannot leak
        one side's switch into the other); apply this side's switch; then the
        plugin's own: the interpreter flag, the package path, and last the
        side's TRITON_CACHE_DIR (``spawn.kernelcache``: the persistent folder of
        the side's key, or the root's own per side; never one for both sides,
        since many switches are not in Triton's cache key).
        """
        switch = campaign.switch
        env = dict(os.environ)
        for name in set(switch.env_a) | set(switch.env_b):
            env.pop(name, None)
        env.update(switch.env(key.side))
        env.pop(envnames.TRITON_CACHE_DIR, None)  # set below, from everything else
        # Library tuners (FlagGems' LibTuner): a cache of the cell's own, or the one shared folder asked for.
        tuner_cache = self.settings.tuner_cache
        shared = tuner_cache.removeprefix("shared:") if tuner_cache.startswith("shared:") else None
        env[envnames.FLAGGEMS_CACHE_DIR] = shared or str(cell_dir / tunercache.CELL_CACHE_DIR)
        env = campaign_env(env, self.settings.backend == "interpreter" and not self.settings.ir_only,
                           self.settings.ir_target)
        env[envnames.PYTHONUNBUFFERED] = "1"
        if self.gpu is not None:
            env[envnames.CUDA_VISIBLE_DEVICES] = self.gpu
        env[envnames.TRITON_CACHE_DIR] = str(self.triton_cache(campaign, key.side, env))
        env[envnames.ABBENCH_SPAWN_TIME] = repr(time.time())
        return env

    def triton_cache(self, campaign: Campaign, side: str, env: dict[str, str]) -> Path:
        """The side's Triton cache folder for a cell environment ``env`` (``spawn.kernelcache``)."""
        source = self._sources.get(campaign.path)
        if source is None:
            source = self._sources[campaign.path] = source_hash(campaign.path)
        return self.kernel_caches.folder(campaign.path, source, side, campaign.switch.python(side) or sys.executable,
                                         campaign.switch.env(side), env)

    def config(self, campaign: Campaign, key: CellKey, cell_dir: Path) -> CellConfig:
        """What the child is told."""
        s = self.settings
        ir_target = s.ir_target_for(key.round)
        op_shapes = campaign.op(key.op).shapes
        ir_level = s.ir_level_for(op_shapes) if ir_target else None
        shares = 1
        side_mode = side_record_mode_for(key.round, key.role)
        if s.ir_only:
            # An IR-only cell compiles its shapes in parallel, one share each: the op's cells run one after
            # another, so one cell may use every core of this worker.  A level the op lacks: the child says so.
            shares = max(1, min(len(op_shapes.get(ir_level or s.level) or ()), worker_share()))
        return CellConfig(
            campaign=campaign.path, campaign_module=campaign.module.__name__, op=key.op, round_no=key.round, side=key.side, role=key.role, out=cell_dir,
            backend=s.backend, timer=s.timer, level=s.level, samples=s.samples, direct_rep=s.direct_rep_ms,
            direct_warmup=s.direct_warmup_ms,
            autotune_mode=autotune_mode_for(key.round, key.role), autotune_file=self.layout.autotune_record(key.op),
            autotune_seed_file=self.autotune_seed(campaign, key, cell_dir),
            autotune_screen=s.autotune_screen_ms,
            autotune_side_mode=side_mode, tuner_seed_base=self.tuner_seed_base(campaign, key, side_mode),
            autotune_side_file=self.layout.autotune_side_record(key.op, key.side) if side_mode else None,
            output_record=self.layout.output_record(key.op, key.side),
            switch=campaign.switch.describe(), tuner_cache=self.settings.tuner_cache, ir_target=ir_target,
            ir_only=s.ir_only, ir_level=ir_level, shares=shares, spawn=s.spawn, regime=s.regime,
            adapter=campaign.adapter, skip_shapes=skip_shapes_arg(self.failed_alike(key)),
        )

    def all_failed(self, campaign: Campaign, key: CellKey) -> str | None:
        """Why ``key`` need not run: every shape it would run failed alike on both sides in round 1 (None: some
        shape is left to run)."""
        failed = self.failed_alike(key)
        if not failed:
            return None
        ids = [shape.id for shape in campaign.op(key.op).shapes_for(self.settings.level)]
        if not set(ids) <= set(failed):
            return None
        return (f"{ALL_FAILED}: every shape of {key.op} ({', '.join(ids)}) failed alike on both sides in round 1; "
                "the report names the error")

    def failed_alike(self, key: CellKey) -> list[str]:
        """The shapes a cell after round 1 leaves out: those that raised the same error on both sides in round 1
        (``core.results.failed_alike``); none for round 1 and for an IR-only cell."""
        if key.round == 1 or self.settings.ir_only:
            return []
        first = [results_file(self.layout.cell(CellKey(1, key.op, side))) for side in SIDES]
        return sorted(failed_alike(*first))

    def autotune_seed(self, campaign: Campaign, key: CellKey, cell_dir: Path) -> Path | None:
        """For round 1 side A, the record whose configs it carries instead of tuning: the op's in
        ``--ab-autotune-from``'s root; else, unless ``--ab-retune``, the one side A's kernel cache kept from the
        last round 1 on its key (``keep_tuning``), where there is one.  None for every other cell."""
        s = self.settings
        if autotune_mode_for(key.round, key.role) != "record":
            return None
        if s.autotune_from:
            return RootLayout(s.autotune_from).autotune_record(key.op)
        kept = None if s.retune else self.kept_tuning(campaign, key, cell_dir)
        return kept if kept is not None and kept.is_file() else None

    def kept_tuning(self, campaign: Campaign, key: CellKey, cell_dir: Path) -> Path | None:
        """Where side A's kernel cache keeps the op's autotune record (``core.kernelcache.kept_tuning``); None
        when the kernel cache is off (the root's own Triton cache lives no longer than the root)."""
        if self.kernel_caches.base is None:
            return None
        folder = self.triton_cache(campaign, key.side, self.env(campaign, key, cell_dir))
        if folder == self.layout.triton_cache(key.side):  # the side's key could not be probed: no cache of its own
            return None
        return kernelcache.kept_tuning(folder, key.op)

    def keep_tuning(self, campaign: Campaign, key: CellKey, cell_dir: Path) -> bool:
        """After round 1 side A ended well: its kernel cache keeps the op's record for the next session on the
        key, merged into what it kept before (this run's choices win; a smaller level's run keeps the other
        shapes' keys), atomically: two sessions may keep one at once.  Not a record that carried configs from
        ``--ab-autotune-from``'s root: those were chosen there, not on this key.  True once kept."""
        kept = self.kept_tuning(campaign, key, cell_dir)
        record = autotunerecord.read_record_or_none(self.layout.autotune_record(key.op))
        if kept is None or record is None or self.settings.autotune_from:
            return False
        before = autotunerecord.read_record_or_none(kept) or autotunerecord.AutotuneRecord()
        merged = autotunerecord.AutotuneRecord(
            {**before.entries, **record.entries}, recorded_by=record.recorded_by,
            sources={**{i: src for i, src in before.sources.items() if i not in record.entries}, **record.sources})
        try:
            autotunerecord.write_record(kept, merged)
        except OSError as exc:  # a cache that cannot be written costs the next session its tuning, nothing more
            with open(run_log(cell_dir), "a", encoding="utf-8") as log:
                log.write(f"[abbench] autotune: could not keep the record in side A's kernel cache: {kept}: "
                          f"{exc.strerror or exc}\n")
            return False
        return True

    def tuner_seed_base(self, campaign: Campaign, key: CellKey, side_mode: str | None) -> str | None:
        """For a cell whose library tuner starts from its side's record: the op's record that one grew from
        (content hash, "fresh": none), which side A's cells start from.  None for any other cell."""
        if side_mode != "replay" or self.settings.tuner_cache != "per-cell":
            return None
        root = self.layout.root
        if tunercache.seed_source(root, key.op, key.side) == tunercache.record_dir(root, key.op):
            return None
        return tunercache.content_hash(tunercache.record_dir(root, key.op)) or "fresh"

    def python(self, campaign: Campaign, key: CellKey) -> str:
        return campaign.switch.python(key.side) or sys.executable

    def argv(self, campaign: Campaign, key: CellKey, cell_dir: Path) -> list[str]:
        config = self.config(campaign, key, cell_dir)
        return [self.python(campaign, key), "-m", *config.module_argv()]

    def start_cell(self, campaign: Campaign, key: CellKey, cell_dir: Path, log_path: Path) -> ChildResult:
        """Run the cell's child the session's way (``--ab-spawn``), to its end or its timeout."""

        def warm_others() -> None:
            for side in SIDES:  # the other side's server imports while this cell runs
                if side != key.side:
                    self._start_server(campaign, CellKey(key.round, key.op, side), cell_dir)
            self._start_planned_servers()

        return strategy.run_cell(self.servers, self.argv(campaign, key, cell_dir), self.env(campaign, key, cell_dir),
                                 f"side-{key.side}", campaign.server_imports, log_path,
                                 self.settings.budget.child_s, self.check, warm_others)

    def precompile(self, campaign: Campaign, key: CellKey, log_path: Path) -> None:
        """Before an op's first round-1 cell on a GPU (or, with ``--ab-precompile on`` without one, for the IR
        target): compile its kernels for both sides in parallel, pooled with the ops of its campaign whose round 1
        this process starts later (``ops_ahead``), so the host's cores are used and one wait compiles them all.

        Its seconds, waits for the sides' servers included, go to the op's first cell (``precompile_spent``);
        each side's IR, where every job of that op ran, to ``precompile_ir`` (the gate-first decision); the cell's
        log says what it did, and an op compiled ahead says so in its own first cell's log.  Called again for the
        op: nothing more.
        """
        s = self.settings
        if key.round != 1 or not s.precompile or s.ir_only:
            return  # --ab-precompile off says nothing: no cause to name
        if key.op in self.precompiled:
            note = self.precompiled_ahead.pop(key.op, None)
            if note is not None:
                with open(log_path, "a", encoding="utf-8") as log:
                    log.write(note + "\n")
            return
        if s.backend == "cuda" and self._target is False:
            self._target = precompile.gpu_target(self.gpu)
        target = s.gate_first_target(self._target if isinstance(self._target, str) else None)
        if s.backend != "cuda" and target is None:
            return
        self.precompiled.add(key.op)
        if target is None:
            with open(log_path, "a", encoding="utf-8") as log:
                log.write("[abbench] precompile skipped: nvidia-smi did not give the GPU's compute capability\n")
            return
        started = time.monotonic()
        parallel = worker_share()
        for side in SIDES:  # both sides' servers (if any) import at once; the jobs below wait for each
            self._start_server(campaign, CellKey(1, key.op, side), self.layout.precompile(key.op) / side)
        groups = {key.op: self._precompile_jobs(campaign, key.op, target, parallel)}
        for op in self.ops_ahead(campaign, key.op):
            try:
                groups[op] = self._precompile_jobs(campaign, op, target, parallel)
            except (ForkServerError, OSError):
                break  # the side's server is gone: the op's own round 1 precompiles it, and says why
        for job in (job for jobs in groups.values() for job in jobs):  # an earlier session's counts are not these
            for name in (KERNEL_COUNTS_FILE, SHARES_FILE):
                (job.log.parent / name).unlink(missing_ok=True)
        self._start_planned_servers()
        ready = time.monotonic() - started  # building a forked job waited for its side's server to import
        results = precompile.run_groups(groups, parallel, s.budget.precompile_s, self.check)
        seconds = time.monotonic() - started
        ops = list(groups)
        with open(log_path, "a", encoding="utf-8") as log:
            forked = any(job.server is not None for jobs in groups.values() for job in jobs)
            log.write(f"[abbench] precompile: {seconds:.1f}s, of which {ready:.1f}s before its jobs could start"
                      + (" (a side's fork server imports torch, Triton and the campaign's SERVER_IMPORTS first)"
                         if forked else "") + f" and {seconds - ready:.1f}s compiling\n")
            log.write(results[key.op].line(key.op) + "\n")
            if len(ops) > 1:
                log.write(f"[abbench] pooled with the precompile of {len(ops) - 1} op(s) whose round 1 comes later "
                          f"({', '.join(ops[1:])}): {seconds:.1f}s for all, counted in this cell\n")
        kernels: dict[str, KernelCounts] = {}
        for op in ops:
            result = results[op]
            if op != key.op:
                if result.cut_by_timeout:  # the pool's deadline came first: its own round 1 precompiles it again
                    continue
                self.precompiled.add(op)
                self.precompiled_ahead[op] = (f"{result.line(op)} (ahead, in the precompile of {key.op}: its "
                                              f"{seconds:.1f}s are counted in {key.op}'s first cell)")
            for side, counts in result.kernels.items():
                kernels[side] = add_counts(kernels.get(side), counts)
            sides = tuple(ir_dir(self.layout.precompile(op) / side) for side in SIDES)
            if not result.failed and all(folder.is_dir() for folder in sides):  # one IR folder per side: forked shares
                self.precompile_ir[op] = (sides[0], sides[1])
        self.precompile_spent[key.op] = PrecompileSpent(seconds, ready, kernels)

    def carry_precompile(self, op: str, cell_dir: Path) -> float:
        """For a cell that runs no child (skipped by the gate the precompile decided): write the op's precompile
        seconds and kernel counts as the cell's timing, so the time line counts both; returns the seconds."""
        spent = self.precompile_spent.pop(op, None)
        if spent is None or not spent.seconds:
            return 0.0
        write_timing(cell_dir / TIMING_FILE, spent.timing())
        return spent.seconds

    def ops_ahead(self, campaign: Campaign, op: str) -> list[str]:
        """The ops of ``campaign`` after ``op`` whose round 1 this process will start, none precompiled yet, in the
        order they come: a round-1 cell planned here that has not ended and did not finish before (a resumed
        root's)."""
        ahead = []
        for key in self.round_one.get(campaign.path, {}):
            if key.op == op or key.op in self.precompiled or key.op in ahead or self.finished_before(key):
                continue
            ahead.append(key.op)
        return ahead

    def _precompile_jobs(self, campaign: Campaign, op: str, target: str, parallel: int) -> list[CompileJob]:
        """Both sides' compile-only jobs of ``op`` for ``target``: every shape, every autotune candidate."""
        jobs: list[CompileJob] = []
        for side in SIDES:
            side_key = CellKey(1, op, side)
            config = self.config(campaign, side_key, self.layout.precompile(op))
            n = precompile.shares(len(campaign.op(op).shapes_for(config.level)), parallel)
            # What the shares leave of this op's part of the cores compiles a kernel's autotune candidates side by
            # side: on the H200 host one share compiled its shape's 32 candidates one after another in 26.6 s.
            # The pool does not count these forks (most ops have no autotuned kernel, and it cannot know which
            # before compiling), so at most MAX_CANDIDATE_PROCS: where several ops' shares meet autotuned kernels
            # at once, up to that many times the cores compile, each fork sharing its parent's memory until it writes.
            compile_all = replace(config, ir_only=True, ir_target=target, ir_level=None,
                                  autotune_mode="compile-all", autotune_side_mode=None,
                                  candidate_procs=max(1, min(MAX_CANDIDATE_PROCS, parallel // (len(SIDES) * n))))
            if self.settings.backend != "cuda":  # the cells run in the interpreter; this compiles without it, for the gate
                def compiled_env(out: Path, side_key: CellKey = side_key) -> dict[str, str]:
                    env = self.env(campaign, side_key, out)
                    env.pop(envnames.TRITON_INTERPRET, None)
                    return env

                jobs.append(precompile.exec_job(side, self.python(campaign, side_key),
                                                replace(compile_all, out=self.layout.precompile(op) / side, shares=n),
                                                compiled_env, processes=n))
                continue
            jobs += strategy.precompile_jobs(self.servers, side, compile_all, self.python(campaign, side_key),
                                             partial(self.env, campaign, side_key),
                                             self.layout.precompile(op), n, campaign.server_imports)
        return jobs

    def write_notices(self, campaign: Campaign, key: CellKey, cell_dir: Path, log_path: Path) -> Path:
        """Say in the cell's log which kernel cache its side uses, and anything that went wrong finding it (or
        seeding it from a kernel file); returns the folder."""
        folder = self.triton_cache(campaign, key.side, self.env(campaign, key, cell_dir))
        with open(log_path, "a", encoding="utf-8") as log:
            for notice in self.kernel_caches.notices:
                log.write(f"[abbench] {notice}\n")
            log.write(f"[abbench] side {key.side} kernel cache: {folder}\n")
        self.kernel_caches.notices.clear()
        return folder

    def kernel_import_refusal(self, campaign: Campaign, key: CellKey, session_campaigns: Iterable[Path]) -> str | None:
        """With ``--ab-kernel-import``: look up both sides' kernel cache keys of ``key``'s campaign (seeding each
        side's folder from the file of its key) and say why its cells must not run, if a file is refused."""
        if not self.kernel_caches.imports:
            return None
        for side in SIDES:
            side_key = CellKey(key.round, key.op, side)
            self.env(campaign, side_key, self.layout.cell(side_key))
        return self.kernel_caches.import_refusal(campaign.path, {path.stem for path in session_campaigns})

    def run(self, campaign: Campaign, key: CellKey) -> CellRun:
        """Run the cell's child to the end (or its timeout) and read what it left."""
        started = time.perf_counter()
        cell_dir = self.layout.cell(key)
        log_path = run_log(cell_dir)
        cell_dir.mkdir(parents=True, exist_ok=True)
        self.layout.output_record(key.op, key.side).parent.mkdir(parents=True, exist_ok=True)  # the cell writes no folder
        self.precompile(campaign, key, log_path)
        spent = self.precompile_spent.pop(key.op, None)
        precompile_s = spent.seconds if spent is not None else 0.0
        per_cell_tuner = self.settings.tuner_cache == "per-cell"
        records_tuning = autotune_mode_for(key.round, key.role) == "record"
        side_mode = side_record_mode_for(key.round, key.role)
        if per_cell_tuner and not records_tuning:
            tunercache.seed_from_record(self.layout.root, key.op, cell_dir / tunercache.CELL_CACHE_DIR,
                                        key.side if side_mode == "replay" else None)
        (cell_dir / TIMING_FILE).unlink(missing_ok=True)  # an earlier attempt's parts are not this one's
        kernel_cache = self.write_notices(campaign, key, cell_dir, log_path)
        child = self.start_cell(campaign, key, cell_dir, log_path)
        ended = time.time()
        # No campaign name: a server may have been started ahead for another campaign's cells, or be shared by
        # several; the line names the side and the module, which is what it is about.
        said: list[str] = []
        if self.servers is not None:
            said, self.servers.said = self.servers.said, []
        notices = [f"abbench: {line}" for line in said]
        if precompile_s:
            child = ChildResult(child.rc, child.elapsed_s + precompile_s)
        if per_cell_tuner and records_tuning:
            tunercache.keep_record(cell_dir / tunercache.CELL_CACHE_DIR, self.layout.root, key.op)
        if per_cell_tuner and side_mode == "record":
            tunercache.keep_side_record(cell_dir / tunercache.CELL_CACHE_DIR, self.layout.root, key.op, key.side)
        problems: list[str]
        if self.settings.ir_only:
            success, failed, problems = len(ttgir_files(ir_dir(cell_dir))), 0, []
        else:
            success, failed, problems = count_shapes(cell_dir)
        # Markers come from the child's own channel (markers.log); run.log only for its bytes that are not UTF-8.
        markers = count_markers(markers_log(cell_dir))
        undecodable = count_undecodable(log_path)
        status = status_word(child.rc)
        if child.rc == 0 and self.settings.ir_only:
            status = IR_ONLY
        elif child.rc == 0 and failed:
            status = FAILED_SHAPES
        elif child.rc == 0 and not success:
            status = NO_SHAPES
        kept = records_tuning and status == OK and self.keep_tuning(campaign, key, cell_dir)
        add_parent_timing(cell_dir, spent if precompile_s else None, ended, child.elapsed_s, tuning_kept=kept)
        outcome = CellOutcome(key, cell_dir, status, campaign.switch.describe(), str(campaign.path), child.rc,
                              child.elapsed_s, success, failed, markers, undecodable)
        # The plugin's own cost of this cell: everything here except the child (benchmarks/plugin_scale.py).
        outcome.overhead_ms = round((time.perf_counter() - started - child.elapsed_s) * 1000, 2)
        failure = None
        if status not in (OK, IR_ONLY):
            header = f"cell {key} failed: {describe(child.rc)}"
            if child.rc == 0:
                header = f"cell {key} failed: {status} ({failed} failed, {success} ok shapes)"
            detail = "\n".join(problems[:20])
            failure = (f"{header} after {child.elapsed_s:.1f}s\n{detail}\n"
                       f"--- tail of {log_path} ---\n{log_tail(log_path)}")
        return CellRun(outcome, failure, notices, kernel_cache)


def add_parent_timing(cell_dir: Path, precompile: PrecompileSpent | None, ended: float, elapsed_s: float,
                      tuning_kept: bool = False) -> None:
    """Add the parts only the parent sees to the cell's cell_timing.json, if the child wrote one.

    ``precompile``: the parallel compile before the op's round 1 (None for other cells).  ``exit_s``: from the
    child's last stamp to the parent seeing it end (``ended``, the parent's ``time.time()``): the process's exit
    and CUDA teardown, the cell supervisor's reaping and the wait's latency; never more than the cell's
    ``elapsed_s`` (the wall clock, unlike the parent's monotonic one, can step).  ``tuning_kept``: side A's kernel
    cache kept the cell's autotune record (``keep_tuning``), so the time line's warm re-run figure counts its tuning.
    """
    path = cell_dir / TIMING_FILE
    try:
        timing = read_timing(path)
    except (CorruptFileError, OSError):  # missing, torn, or not a timing file this version reads
        return
    added: dict[str, Any] = dict(precompile.timing()) if precompile is not None else {}
    try:
        exit_s = ended - float(timing["spawned_at"]) - float(timing["total_s"])
    except (KeyError, TypeError, ValueError):
        exit_s = -1.0  # written by a child of an older version (a resumed root): its exit stays in "other"
    if 0.0 <= exit_s <= elapsed_s:
        added["exit_s"] = round(exit_s, 3)
    if tuning_kept:
        added["tuning_kept"] = True
    if added:
        write_timing(path, {**timing, **added})


def count_shapes(cell_dir: Path) -> tuple[int, int, list[str]]:
    """(measured, failed, problem lines) from a cell's results.jsonl; a corrupt file counts as a failure."""
    path = results_file(cell_dir)
    success = failed = 0
    problems: list[str] = []
    if not path.exists():
        return 0, 0, [f"{path}: missing (the child wrote no result)"]
    try:
        for rec in read_results(path):
            if rec.ok:
                success += 1
            elif rec.status == SKIPPED:  # --skip-shapes: round 1's failure, not this cell's
                continue
            else:
                failed += 1
                problems.append(f"shape {rec.shape}: {rec.status}: {rec.error or ''}")
    except CorruptFileError as exc:
        failed += 1
        problems.append(str(exc))
    return success, failed, problems
