"""Save the TTGIR of every kernel a cell compiles or loads from Triton's cache.

Two ways in, one hook: on a GPU the timed process itself reports each kernel
through ``knobs.runtime.jit_post_compile_hook`` (which fires on a disk-cache
hit too, since a fresh process always passes through ``_do_compile``).
Without a GPU a separate compile-only process installs a stand-in driver for
the IR target (e.g. ``cuda:90``) so Triton compiles for it on the CPU and
nothing is launched.

Next to each TTGIR file of a round-1 cell: a fingerprint of every compiler
stage (``.meta.json`` ``stages``), and, in a compile-only process, one of the IR before every MLIR
pass (``.passes.json``, from Triton's ``MLIR_ENABLE_DUMP``), so the IR gate
can say which stage and which pass first produced different code.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytest_abbench.child import standin_draws
from pytest_abbench.child.autotune_pin import benchmarking
from pytest_abbench.checks.irgate import PASSES_SUFFIX, stage_fingerprint, stage_order, strip_locations
from pytest_abbench.core import envnames, standin_driver
from pytest_abbench.core.cubin import CubinError, kernel_resources
from pytest_abbench.core.tritoncompat import PASS_DUMP_HEADER, PASS_DUMP_HEADER_RE, triton_version, without_stages_hook_entry

_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")

def variant_name(kernel: str, key: Any, options: Any) -> str:
    """A stable file stem: kernel name, warps/stages, and a hash of the specialization key.

    The key is Triton's in-process specialization key (argument types,
    divisibility, constexpr values, options), not a cache hash: the same
    kernel specialized the same way gets the same name in every process.
    A stages hook's entry is left out of the hash: a switch that installs the
    hook on one side only would otherwise rename every kernel of that side,
    and the IR gate would see byte-identical TTGIR as a different variant.
    """
    digest = hashlib.sha256(without_stages_hook_entry(str(key)).encode()).hexdigest()[:10]
    warps = getattr(options, "num_warps", "x")
    stages = getattr(options, "num_stages", "x")
    return f"{_SAFE.sub('_', kernel)}/w{warps}_s{stages}_{digest}"


_LOC_REF = re.compile(r" loc\(#loc\d*\)")  # the common form, removed by one regular expression


def dump_fingerprint(body: str) -> str:
    """A short hash of one dumped module without its locations, as the IR gate compares TTGIR.

    Locations name the source's path and, between Triton releases, move by a
    column: code that is the same must hash the same.  A dump is megabytes a
    kernel, so the common ``loc(#locN)`` goes by regular expression and only
    the lines left with a location take the exact (slower) removal.
    """
    lines = []
    for line in body.split("\n"):
        if line.startswith("#loc"):
            continue
        if "loc(" in line:
            line = _LOC_REF.sub("", line)
            if "loc(" in line:
                line = strip_locations(line)
        lines.append(line.rstrip())
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def split_pass_dump(text: str) -> list[list[str]]:
    """``[pass, pass argument, fingerprint of the IR before it]`` for each dump in ``text``, in order.

    A dump runs from its header line to the next one.  Other dumps (the
    software pipeliner's internal ones, on stderr in 3.6) are skipped.
    """
    passes: list[list[str]] = []
    starts = [0] if text.startswith(PASS_DUMP_HEADER) else []
    at = text.find("\n" + PASS_DUMP_HEADER)
    while at >= 0:  # str.find, not a multi-line regular expression: several times faster on megabytes
        starts.append(at + 1)
        at = text.find("\n" + PASS_DUMP_HEADER, at + 1)
    for begin, end in zip(starts, starts[1:] + [len(text)]):
        header_end = text.find("\n", begin, end)
        header = PASS_DUMP_HEADER_RE.match(text, begin, end if header_end < 0 else header_end)
        if header:
            passes.append([header.group(1), header.group(2), dump_fingerprint(text[header_end + 1:end])])
    return passes


class PassDump:
    """Triton's per-pass IR dump of each compile (``MLIR_ENABLE_DUMP=1`` into ``MLIR_DUMP_PATH``).

    LLVM buffers that file (one block, a few KB); stderr, the alternative, is
    unbuffered and makes a compile several times slower.  So at the
    post-compile hook the end of a compile's dump may still be in memory: it is
    complete once the next compile's first dump (the pipeline's first pass,
    the same in every compile) has been written.  The last compile's dump is
    read at exit, less its cut-off last module.  A hook that found no new dump
    saw a kernel from Triton's disk cache: nothing was compiled.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None
        self.read_to = 0
        self.data = b""  # read, not yet assigned to a compile; starts at a compile's first dump
        self.pending: list[Path] = []  # where each compile seen but not yet complete writes its passes
        self.first_pass: bytes | None = None
        self.broken = False

    def compiled(self, target: Path) -> None:
        """A kernel was reported: if it was compiled, its pass list goes to ``target`` once its dump is complete."""
        if self._read() and not self.broken:
            self.pending.append(target)
        self._assign(final=False)

    def finish(self) -> None:
        """At exit: the last compile's passes from what reached the file, then remove it."""
        self._read()
        self._assign(final=True)
        if self.fd is not None:
            os.close(self.fd)
        self.path.unlink(missing_ok=True)

    def _read(self) -> bool:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDWR)
            except FileNotFoundError:
                return False  # nothing compiled yet
        size = os.fstat(self.fd).st_size
        if size <= self.read_to:
            return False
        if size - self.read_to + len(self.data) > MAX_PASS_DUMP_BYTES:
            self.stop(f"{size - self.read_to} bytes of pass dumps for one kernel")
        else:
            self.data += os.pread(self.fd, size - self.read_to, self.read_to)
        self.read_to = size
        # LLVM writes on at its own offset: the file stays sparse instead of growing by megabytes a kernel.
        os.ftruncate(self.fd, 0)
        return True

    def stop(self, why: str) -> None:
        """No pass lists from here on (the IR gate then names the first differing stage only)."""
        if not self.broken:
            print(f"[abbench] per-pass IR dump stopped: {why}", file=sys.stderr, flush=True)
        os.environ.pop(envnames.MLIR_ENABLE_DUMP, None)
        self.broken, self.data, self.pending = True, b"", []

    def _assign(self, final: bool) -> None:
        """Write the pass list of every compile whose dump is complete (at exit: every compile)."""
        if self.broken or not self.data:
            return
        if self.first_pass is None:  # the first compile's first dump starts the file
            first = PASS_DUMP_HEADER_RE.match(self.data[:400].decode(errors="replace"))
            if first is None:
                self.stop("the dump file does not start with a pass dump")
                return
            self.first_pass = f"{PASS_DUMP_HEADER}IR Dump Before {first.group(1)}".encode()
        starts = [m.start() + 1 for m in re.finditer(b"\n" + re.escape(self.first_pass) + b"[ :]", self.data)]
        starts = [0, *starts] if self.data.startswith(self.first_pass) else starts
        if len(starts) != len(self.pending) or starts[:1] != [0]:
            # More compiles than reported kernels (a compile outside the JIT), or a pipeline that runs its
            # first pass twice: the dumps cannot be told apart, so none is kept from here on.
            self.stop(f"{len(starts)} compiles' dumps for {len(self.pending)} reported kernels")
            return
        ends = starts[1:] + [len(self.data)]
        complete = len(starts) if final else len(starts) - 1
        for begin, end, target in zip(starts[:complete], ends[:complete], self.pending[:complete]):
            chunk = self.data[begin:end]
            if end == len(self.data):  # the last dump may be cut off where LLVM's buffer was not yet written
                chunk = chunk[: chunk.rfind(b"\n" + PASS_DUMP_HEADER.encode()) + 1]
            passes = split_pass_dump(chunk.decode(errors="replace"))
            if passes:
                target.write_text(json.dumps(passes))
        self.data = self.data[starts[complete]:] if complete < len(starts) else b""
        self.pending = self.pending[complete:]


_pass_dump: PassDump | None = None  # set in a compile-only process (enter_compile_only, install_capture)
PASS_DUMP_FILE = ".pass-dump.mlir"
MAX_PASS_DUMP_BYTES = 512 * 1024 * 1024  # one kernel's TTIR and TTGIR dumps; far beyond what a kernel needs


def _no_dump_in_llir() -> None:
    """Dump the TTIR and TTGIR passes only: no pass of each backend's ``make_llir``.

    Its LLVM-dialect modules are tens of times larger than the TTGIR: dumped
    before each of its passes, an unrolled top-k kernel without layout
    cleanup wrote gigabytes and compiled for many minutes.  Whether LLVM IR or
    assembly differ is told by the stage fingerprints.
    """
    from triton.backends import backends

    for backend in backends.values():
        make_llir = getattr(backend.compiler, "make_llir", None)
        if make_llir is None or getattr(make_llir, "abbench_no_dump", False):
            continue

        def without_dump(*args: Any, _make_llir: Any = make_llir, **kwargs: Any) -> Any:
            os.environ.pop(envnames.MLIR_ENABLE_DUMP, None)  # Triton reads it at each pass manager it builds
            try:
                return _make_llir(*args, **kwargs)
            finally:
                if _pass_dump is None or not _pass_dump.broken:
                    os.environ[envnames.MLIR_ENABLE_DUMP] = "1"

        setattr(without_dump, "abbench_no_dump", True)
        backend.compiler.make_llir = without_dump


def fingerprints_stages(round_no: int) -> bool:
    """Whether a cell of this round fingerprints each compile stage: the IR gate compares round 1's cells, so a
    later cell keeps only its TTGIR.  Fingerprinting is a pass over every stage of every kernel a cell loads (0.67 s
    a cell for topk's side B on the H200, whose 5 kernels carry 41 MB of IR)."""
    return round_no == 1


def install_capture(ir_dir: Path, stages: bool = True) -> list[str]:
    """Write ``<ir_dir>/<kernel>/<variant>.ttgir`` (+ ``.meta.json``) for every compiled kernel.

    In a compile-only process also ``.passes.json``, the IR before each MLIR
    pass.  ``stages``: the meta also holds a fingerprint of each compile stage
    (``fingerprints_stages``).  Returns the list the hook appends written stems
    to, for the cell's log.
    """
    import atexit

    from triton import knobs

    global _pass_dump
    if _pass_dump is None and _pass_dump_wanted:
        ir_dir.mkdir(parents=True, exist_ok=True)
        _pass_dump = PassDump(ir_dir / PASS_DUMP_FILE)
        os.environ[envnames.MLIR_DUMP_PATH] = str(_pass_dump.path)  # LLVM opens it at the first compile
        atexit.register(_pass_dump.finish)
        # MLIR_DUMP_PATH is in Triton's cache key and names this process's own file: a kernel compiled with the
        # dump on is never loaded by another process (and one loaded would have no pass list).  Those compiles
        # go to a folder of this process, removed at exit, not into the side's kernel cache, which they would
        # only fill with entries that never hit.
        scratch = tempfile.mkdtemp(prefix="abbench-dumped-compiles-")
        os.environ[envnames.TRITON_CACHE_DIR] = scratch  # Triton reads it at each compile
        atexit.register(shutil.rmtree, scratch, True)
    pass_dump = _pass_dump
    written: list[str] = []
    previous = knobs.runtime.jit_post_compile_hook

    def capture(*, key: Any, repr: str, fn: Any, compile: dict[str, Any], is_manual_warmup: bool,
                already_compiled: bool) -> Any:
        jit_fn = fn.jit_function
        kernel = jit_fn.device_caches[compile["device"]][0].get(key)
        if kernel is not None and hasattr(kernel, "result"):
            kernel = kernel.result()  # async compile mode hands back a future
        if kernel is not None:
            asm = getattr(kernel, "asm", {})
            ttgir = asm.get("ttgir")
            if ttgir is not None:
                stem = variant_name(fn.name, key, kernel.metadata)
                path = ir_dir / f"{stem}.ttgir"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(ttgir)
                meta = kernel.metadata
                (ir_dir / f"{stem}.meta.json").write_text(json.dumps({
                    "kernel": fn.name,
                    "num_warps": getattr(meta, "num_warps", None),
                    "num_stages": getattr(meta, "num_stages", None),
                    "num_ctas": getattr(meta, "num_ctas", None),
                    "shared": getattr(meta, "shared", None),
                    **compiled_resources(asm, getattr(meta, "name", fn.name), ttgir),
                    "target": str(getattr(meta, "target", "")),
                    # Compiled as an autotune candidate: the IR gate counts it only if the other side has it.
                    "autotune_candidate": benchmarking(),
                    "triton": triton_version(),
                    **({"stages": {stage: stage_fingerprint(stage, asm[stage])
                                   for stage in stage_order(asm) if isinstance(asm[stage], str)}} if stages else {}),
                }, sort_keys=True))
                if pass_dump is not None:
                    pass_dump.compiled(ir_dir / f"{stem}{PASSES_SUFFIX}")
                written.append(stem)
        if previous is not None:
            return previous(key=key, repr=repr, fn=fn, compile=compile, is_manual_warmup=is_manual_warmup,
                            already_compiled=already_compiled)
        return None

    knobs.runtime.jit_post_compile_hook = capture
    return written


_MMA_VERSION = re.compile(r"nvidia_mma<\{versionMajor = (\d+)")


def compiled_resources(asm: dict[str, Any], name: str, ttgir: str) -> dict[str, Any]:
    """What a compiled kernel uses, for the IR line's resource diff: registers per thread and spills (local memory
    per thread / 4, as Triton counts ``n_spills``) from its cubin (``core/cubin.py``; none where there is no cubin,
    a HIP kernel), and the MMA its TTGIR lays out (``mma v3`` is Hopper's wgmma, ``mma v2`` Ampere's mma.sync)."""
    found: dict[str, Any] = {}
    cubin = asm.get("cubin")
    if isinstance(cubin, bytes):
        try:
            used = kernel_resources(cubin, name)
            found.update(registers=used.registers, spills=used.frame_bytes // 4)
        except CubinError:
            pass  # a cubin of another layout: the diff shows what the other fields say
    versions = sorted(set(_MMA_VERSION.findall(ttgir)))
    if versions:
        found["mma"] = "+".join(f"v{v}" for v in versions)
    return found


def merge_ir(share_ir: Path, ir_dir: Path) -> None:
    """Move what one share of a cell captured into the cell's ``ir_dir``, as if one process had compiled it all.

    A variant's name is the same in every process: a file already in
    ``ir_dir`` came from the same compile in another share.  Of two pass
    lists of one variant the longer is kept: a process's last compile lacks
    its last dump (``PassDump``); one a share loaded from Triton's cache has
    none.  A pass-dump file left by a share that died is no IR: it goes.
    """
    if not share_ir.is_dir():
        return
    for path in sorted(p for p in share_ir.rglob("*") if p.is_file()):
        target = ir_dir / path.relative_to(share_ir)
        longer = path.name.endswith(PASSES_SUFFIX) and target.exists() and \
            path.stat().st_size > target.stat().st_size
        if path.name == PASS_DUMP_FILE or (target.exists() and not longer):
            path.unlink()
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
    for folder in sorted((p for p in share_ir.rglob("*") if p.is_dir()), reverse=True):
        folder.rmdir()
    share_ir.rmdir()


_pass_dump_wanted = False  # enter_compile_only switched Triton's dump on for this process


def _cpu_tensors_select_no_gpu() -> None:
    """Let ``torch.cuda.device(t.device)`` take a CPU tensor's device, as the no-op it is given ``-1``.

    Libraries enter it around each op (FlagGems: ``with torch_device_fn.device(x.device)``).  Here the
    tensors are on the CPU, the stand-in driver's device, and torch refuses a CPU device ("Expected a cuda
    device"), so every FlagGems op failed to compile.  Nothing is launched in this process: no GPU needs
    selecting.
    """
    import torch

    cuda_device = torch.cuda.device
    if getattr(cuda_device, "_abbench_takes_cpu", False):
        return

    class device(cuda_device):  # type: ignore[misc, valid-type]  # torch.cuda.device is untyped
        _abbench_takes_cpu = True

        def __init__(self, device: Any) -> None:
            if isinstance(device, (str, torch.device)) and torch.device(device).type == "cpu":
                self.idx = self.prev_idx = -1  # a negative index: entering and leaving change nothing
                return
            super().__init__(device)

    torch.cuda.device = device  # type: ignore[misc]


def enter_compile_only(target_text: str) -> None:
    """Make every kernel launch of this process compile for ``target_text`` and launch nothing.

    Outputs of an op run this way are garbage; only the captured IR counts.
    Its large random inputs are stand-ins tiled from a small draw
    (``standin_draws``), unless ``ABBENCH_EXACT_DRAWS=1``.  Triton's per-pass IR dump is switched on (``MLIR_ENABLE_DUMP=1``; the
    file: ``install_capture``), unless the environment asks for a dump of its
    own (``MLIR_ENABLE_DUMP``, ``MLIR_DUMP_PATH``) or sets ``ABBENCH_PASS_DUMP=0``.
    """
    from triton.runtime import jit

    global _pass_dump_wanted
    if not ({envnames.MLIR_ENABLE_DUMP, envnames.MLIR_DUMP_PATH} & set(os.environ)) and os.environ.get(envnames.ABBENCH_PASS_DUMP) != "0":
        os.environ[envnames.MLIR_ENABLE_DUMP] = "1"  # read by Triton's pass managers at each compile
        _pass_dump_wanted = True
        _no_dump_in_llir()
    standin_driver.install(target_text)
    _cpu_tensors_select_no_gpu()
    if os.environ.get(envnames.ABBENCH_EXACT_DRAWS) != "1":
        standin_draws.install()
    original_run = jit.JITFunction.run

    def compile_only_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        kernel = original_run(self, *args, grid=grid, warmup=True, **kwargs)
        if standin_driver.runs_launches() and not warmup:
            standin_driver.interpret(self.fn, grid, args, kwargs)
        return kernel

    jit.JITFunction.run = compile_only_run
