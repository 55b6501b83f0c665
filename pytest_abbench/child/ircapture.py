"""Save the TTGIR of every kernel a cell compiles or loads from Triton's cache.

Two ways in, one hook: on a GPU the timed process itself reports each kernel
through ``knobs.runtime.jit_post_compile_hook`` (which fires on a disk-cache
hit too, since a fresh process always passes through ``_do_compile``).
Without a GPU a separate compile-only process installs a stand-in driver for
the IR target (e.g. ``cuda:90``) so Triton compiles for it on the CPU and
nothing is launched.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from pytest_abbench.child.autotune_pin import benchmarking

_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")

# Triton 3.7+ (python/triton/runtime/jit.py, JITFunction.run) appends the
# string f'("custom_pipeline", {hash})' to the specialization list whenever
# knobs.runtime.add_stages_inspection_hook is set, just before it builds the
# key as str(specialization) + str(options); the key then reads
#   [('*fp32', 'D'), ..., '("custom_pipeline", HASH)']{'debug': False, ...}
# Triton 3.6 has the knob but leaves it out of the key: nothing to remove.
_CUSTOM_PIPELINE = re.compile(r"""(?:, )?'\("custom_pipeline", (?:[^'\\]|\\.)*\)'(?=\])""")


def variant_name(kernel: str, key: Any, options: Any) -> str:
    """A stable file stem: kernel name, warps/stages, and a hash of the specialization key.

    The key is Triton's in-process specialization key (argument types,
    divisibility, constexpr values, options), not a cache hash: the same
    kernel specialized the same way gets the same name in every process.
    A stages hook's entry is left out of the hash: a switch that installs the
    hook on one side only would otherwise rename every kernel of that side,
    and the IR gate would see byte-identical TTGIR as a different variant.
    """
    digest = hashlib.sha256(_CUSTOM_PIPELINE.sub("", str(key)).encode()).hexdigest()[:10]
    warps = getattr(options, "num_warps", "x")
    stages = getattr(options, "num_stages", "x")
    return f"{_SAFE.sub('_', kernel)}/w{warps}_s{stages}_{digest}"


def install_capture(ir_dir: Path) -> list[str]:
    """Write ``<ir_dir>/<kernel>/<variant>.ttgir`` (+ ``.meta.json``) for every compiled kernel.

    Returns the list the hook appends written stems to, for the cell's log.
    """
    from triton import knobs

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
                    "shared": getattr(meta, "shared", None),
                    "target": str(getattr(meta, "target", "")),
                    # Compiled as an autotune candidate: the IR gate counts it only if the other side has it.
                    "autotune_candidate": benchmarking(),
                }, sort_keys=True))
                written.append(stem)
        if previous is not None:
            return previous(key=key, repr=repr, fn=fn, compile=compile, is_manual_warmup=is_manual_warmup,
                            already_compiled=already_compiled)
        return None

    knobs.runtime.jit_post_compile_hook = capture
    return written


def parse_target(text: str) -> Any:
    """``cuda:90`` -> GPUTarget('cuda', 90, 32); ``hip:gfx942`` -> GPUTarget('hip', 'gfx942', 64)."""
    from triton.backends.compiler import GPUTarget

    backend, sep, arch = text.partition(":")
    if not sep or backend not in ("cuda", "hip") or not arch:
        raise ValueError(f"IR target {text!r} is not BACKEND:ARCH such as cuda:90 or hip:gfx942")
    if backend == "cuda":
        if not arch.isdigit():
            raise ValueError(f"IR target {text!r}: a CUDA arch is a number such as 90")
        return GPUTarget("cuda", int(arch), 32)
    return GPUTarget("hip", arch, 64)


class _TargetOnlyDriver:
    """Stands in for a GPU driver when compiling for a target this machine does not have."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def is_active(self) -> bool:
        return True

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self.target

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")


def enter_compile_only(target_text: str) -> None:
    """Make every kernel launch of this process compile for ``target_text`` and launch nothing.

    Outputs of an op run this way are garbage; only the captured IR counts.
    """
    from triton.runtime import jit
    from triton.runtime.driver import driver

    driver.set_active(_TargetOnlyDriver(parse_target(target_text)))
    original_run = jit.JITFunction.run

    def compile_only_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        return original_run(self, *args, grid=grid, warmup=True, **kwargs)

    jit.JITFunction.run = compile_only_run
