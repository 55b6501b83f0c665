"""Triton's active driver where this process has no GPU to ask: Triton's interpreter on a CPU, or a compile-only
process compiling for an IR target (``--ab-ir-only``, the gate's capture without a GPU).

Scripts in the form of Triton's tutorials ask the driver at import: ``get_active_torch_device()`` for their
tensors' device, ``get_current_target()`` for the backend and architecture, ``utils.get_device_properties(i)``
for SM count, shared memory, registers and warp size, and ``torch.cuda.get_device_capability()``.  Here each
answers for the IR target (``--ab-ir-target``, default ``cuda:90``): the target itself, and that GPU's datasheet
values, keyed as the CUDA driver's ``cuDeviceGetAttribute`` answers reach Triton.  A compiled kernel is "loaded" by
reading its cubin (registers, spills) and launched in the interpreter where launches run (``launches_run``).
Anything else asked of it fails with a message that says why (an AttributeError, as Triton's own probes expect).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Sequence

from pytest_abbench.core import envnames
from pytest_abbench.core.cubin import kernel_resources

DEFAULT_TARGET = "cuda:90"  # --ab-ir-target's default

# Per IR target: the GPU its datasheet values come from, and the values as Triton's CUDA driver names them
# (max_shared_mem: the opt-in maximum per block; clock rates in kHz; the bus width in bits).
DATASHEETS: dict[str, tuple[str, dict[str, int]]] = {
    "cuda:80": ("NVIDIA A100 SXM4 80GB", {
        "max_shared_mem": 166912, "max_num_regs": 65536, "multiprocessor_count": 108, "warpSize": 32,
        "sm_clock_rate": 1410000, "mem_clock_rate": 1593000, "mem_bus_width": 5120}),
    "cuda:90": ("NVIDIA H100 80GB HBM3 (SXM5)", {
        "max_shared_mem": 232448, "max_num_regs": 65536, "multiprocessor_count": 132, "warpSize": 32,
        "sm_clock_rate": 1980000, "mem_clock_rate": 2619000, "mem_bus_width": 5120}),
}


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


def target_text() -> str:
    """The IR target this process answers for: the session's (``ABBENCH_IR_TARGET``), else the default."""
    return os.environ.get(envnames.ABBENCH_IR_TARGET) or DEFAULT_TARGET


def device_properties(target: str) -> dict[str, int]:
    """``utils.get_device_properties`` for ``target``: its datasheet values."""
    sheet = DATASHEETS.get(target)
    if sheet is None:
        raise RuntimeError(f"no GPU here to ask for device properties, and none are known for the IR target "
                           f"{target!r} (known: {', '.join(DATASHEETS)}; --ab-ir-target)")
    return dict(sheet[1])


class NoGpuHere(AttributeError):
    """What the stand-in says to a query only a GPU answers.  An AttributeError, so that ``hasattr`` and
    ``getattr(..., default)`` (Triton's own probes of a driver) still read it as absent."""


class _Utils:
    """``driver.active.utils``: the device properties; anything else needs a GPU."""

    def __init__(self, target: str) -> None:
        self._target = target

    def get_device_properties(self, device: Any = None) -> dict[str, int]:
        return device_properties(self._target)

    def load_binary(self, name: str, kernel: bytes, shared: int, device: int) -> tuple[int, int, int, int, int]:
        """What loading a compiled kernel tells Triton, read from its cubin here (no module is loaded): no handles,
        registers per thread, local memory per thread / 4 (Triton's ``n_spills``), and the most threads per block
        the registers allow on the target's datasheet register file (at most 1024)."""
        if not self._target.startswith("cuda:"):
            raise NoGpuHere(f"there is no GPU here to load {name!r} on, and only a CUDA kernel's cubin can be read "
                            f"without one (IR target {self._target})")
        used = kernel_resources(kernel, name)
        registers = device_properties(self._target)["max_num_regs"]
        max_threads = min(1024, registers // max(used.registers, 1) // 32 * 32)
        return 0, 0, used.registers, used.frame_bytes // 4, max_threads

    def __getattr__(self, name: str) -> Any:
        raise NoGpuHere(f"there is no GPU here: driver.active.utils.{name} needs one (this process answers "
                        f"for the IR target {self._target} without a GPU)")


class StandInDriver:
    """Triton's active driver for the IR target ``target`` (text such as ``cuda:90``), on a machine without one:
    tensors go to the CPU, where the interpreter runs the kernels or nothing runs (compile-only)."""

    def __init__(self, target: str) -> None:
        self.target_text = target
        self.target = parse_target(target)
        self.utils = _Utils(target)

    def is_active(self) -> bool:
        return True

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device: int) -> None:
        pass  # one stand-in device: nothing to select

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self.target

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    def launcher_cls(self, src: Any, metadata: Any) -> Any:
        """A compiled kernel's launcher: runs the kernel in Triton's interpreter where launches run here
        (``launches_run``), else nothing (a compile-only process)."""
        return _Launcher(src)

    def get_benchmarker(self) -> Any:
        """What Triton's autotuner times its candidates with: one call each by the wall clock (an interpreted kernel
        runs for milliseconds to seconds: one call tells which is faster on this CPU, which is all it can tell)."""
        return wall_bench

    def __getattr__(self, name: str) -> Any:
        raise NoGpuHere(f"there is no GPU here: the driver's {name!r} needs one (this process answers for the IR "
                        f"target {self.target_text} without a GPU)")


_run_launches = False  # whether a launch through the stand-in runs the kernel (in the interpreter)


@contextlib.contextmanager
def launches_run() -> Iterator[None]:
    """Inside, kernels launched without a GPU also run, in Triton's interpreter, on the CPU tensors.

    The interpreter runs them anyway; a compile-only process turns this on while it imports a script: Triton's
    tutorials check their kernel's output at import (``assert torch.allclose``), and a launch that only compiles
    leaves the output unwritten.  Its shapes' own launches stay compile-only.
    """
    global _run_launches
    before, _run_launches = _run_launches, True
    try:
        yield
    finally:
        _run_launches = before


def runs_launches() -> bool:
    return _run_launches


def interpret(fn: Any, grid: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """Run the ``@triton.jit`` function ``fn`` (its Python function) on ``grid`` in Triton's interpreter.

    In a process that is not the interpreter's, ``triton.language``'s own ``@jit`` helpers (``tl.max``'s combine
    function) are compiled functions, which refuse a call outside a kernel: while this runs, such a call runs
    its function in the interpreter, as it would under ``TRITON_INTERPRET=1``.
    """
    from triton.runtime import interpreter
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    interpreted: dict[Any, Any] = {}

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        helper = interpreted.get(self.fn)
        if helper is None:
            helper = interpreted[self.fn] = InterpretedFunction(self.fn)
        # The helper's module gets the interpreter's language, undone after the call (InterpretedFunction's own
        # call leaves it: under TRITON_INTERPRET=1 nothing compiles afterwards, here the shapes do).
        scope = interpreter._patch_lang(self.fn)
        try:
            return helper.rewrite()(*args, **kwargs)
        finally:
            if scope is not None:
                scope.restore()

    original = JITFunction.__call__
    JITFunction.__call__ = call
    try:
        InterpretedFunction(fn).run(*args, grid=grid, warmup=False, **kwargs)
    finally:
        JITFunction.__call__ = original


class _Launcher:
    """What ``launcher_cls`` makes: Triton's launcher arguments, the kernel's own arguments last."""

    def __init__(self, src: Any) -> None:
        self.fn = src.fn.fn  # the ASTSource's JITFunction's Python function

    def __call__(self, grid_x: int, grid_y: int, grid_z: int, stream: Any, function: Any, packed_metadata: Any,
                 launch_metadata: Any, enter_hook: Any, exit_hook: Any, *args: Any) -> None:
        if _run_launches:
            interpret(self.fn, (grid_x, grid_y, grid_z), args, {})


def wall_bench(fn: Any, warmup: Any = None, rep: Any = None, grad_to_none: Any = None, quantiles: Any = None,
               return_mode: str = "mean") -> Any:
    """``do_bench``'s answer for one call of ``fn`` timed by the wall clock, in ms."""
    import time

    start = time.perf_counter()
    fn()
    ms = (time.perf_counter() - start) * 1e3
    if quantiles is not None:
        return [ms for _ in quantiles]
    return [ms] if return_mode == "all" else ms


def answer_torch_queries(target: str) -> None:
    """Where torch has no CUDA: ``torch.cuda.get_device_capability()`` answers the CUDA IR target's (9, 0 for
    ``cuda:90``), as scripts that pick a kernel by architecture ask it (Triton's fused-attention tutorial), and
    ``torch.cpu.set_stream`` exists, a no-op as torch's other CPU stream functions are (they "exist to facilitate
    device-agnostic code", and the fused-softmax tutorial calls ``getattr(torch, DEVICE.type).set_stream``)."""
    import torch

    if torch.cuda.is_available():
        return
    if not hasattr(torch.cpu, "set_stream"):
        setattr(torch.cpu, "set_stream", lambda stream: None)
    if not target.startswith("cuda:"):
        return
    arch = int(target.partition(":")[2])

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        return arch // 10, arch % 10

    torch.cuda.get_device_capability = get_device_capability


def install(target: str, interpreter: bool = False) -> StandInDriver:
    """Make a ``StandInDriver`` for ``target`` Triton's active driver (and torch's capability answer it);
    ``interpreter``: under Triton's interpreter, where every launch runs."""
    global _run_launches
    from triton.runtime.driver import driver

    stand_in = StandInDriver(target)
    driver.set_active(stand_in)
    answer_torch_queries(target)
    if interpreter:
        _run_launches = True
        _compile_on_warmup()
    return stand_in


@contextlib.contextmanager
def _compilable_helpers(kernel: Any) -> Iterator[None]:
    """While a kernel compiles in the interpreter's process, ``triton.language`` is as without the interpreter:

    - the ``@jit`` functions a kernel may call (``triton.language``'s own, such as ``tl.max``, and those of the
      kernel's module) are compiled functions: under ``TRITON_INTERPRET=1`` they were made interpreted functions,
      which the compiler would call as Python;
    - the language's builtins are its own: an interpreted ``@jit`` helper's call patches them for the interpreter
      and leaves them patched (Triton restores only a kernel launch's patches).
    """
    import sys

    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    modules: list[Any] = [m for name, m in list(sys.modules.items()) if name == "triton.language" or
                          name.startswith("triton.language.")]
    modules.append(sys.modules.get(kernel.__module__))
    swapped: list[tuple[Any, str, Any]] = []
    for obj, name, original in list(_pristine.values()):
        swapped.append((obj, name, getattr(obj, name, _ABSENT)))
        _set_or_delete(obj, name, original)
    for module in modules:
        for name, value in list(vars(module).items()) if module is not None else []:
            if isinstance(value, InterpretedFunction):
                swapped.append((module, name, value))
                setattr(module, name, _compiled_twin(value, JITFunction))
    try:
        yield
    finally:
        for obj, name, value in reversed(swapped):
            _set_or_delete(obj, name, value)


_ABSENT = object()
# Each attribute the interpreter ever patched in this process, with its value before the first patch.
_pristine: dict[tuple[int, str], tuple[Any, str, Any]] = {}


def _set_or_delete(obj: Any, name: str, value: Any) -> None:
    if value is _ABSENT:
        if hasattr(obj, name):
            delattr(obj, name)
    else:
        setattr(obj, name, value)


def _note_pristine_values() -> None:
    """Record the value each interpreter patch replaces, the first time it is replaced (``_compilable_helpers``)."""
    from triton.runtime import interpreter

    scope_cls = getattr(interpreter, "_LangPatchScope", None)
    if scope_cls is None or getattr(scope_cls.set_attr, "notes_pristine", False):
        return
    set_attr = scope_cls.set_attr

    def noting_set_attr(self: Any, obj: object, name: str, value: object) -> None:
        _pristine.setdefault((id(obj), name), (obj, name, getattr(obj, name, _ABSENT)))
        set_attr(self, obj, name, value)

    setattr(noting_set_attr, "notes_pristine", True)
    scope_cls.set_attr = noting_set_attr


_twins: dict[Any, Any] = {}  # an interpreted function's compiled twin, made once (it caches what it compiles)


def _compiled_twin(interpreted: Any, jit_function: Any) -> Any:
    twin = _twins.get(interpreted.fn)
    if twin is None:
        twin = _twins[interpreted.fn] = jit_function(interpreted.fn, **interpreted.kwargs)
    return twin


def _compile_on_warmup() -> None:
    """Under the interpreter, ``kernel.warmup(...)`` compiles the kernel for the IR target, as it would on that GPU,
    instead of returning None: Triton's fused-softmax tutorial reads ``n_regs`` and ``metadata.shared`` from what
    ``warmup`` returns to size its grid, then launches it (here: in the interpreter, through ``_Launcher``)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if getattr(InterpretedFunction.run, "compiles_on_warmup", False):
        return
    _note_pristine_values()
    original = InterpretedFunction.run

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if not warmup:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        with _compilable_helpers(self.fn):
            return _compiled_twin(self, JITFunction).run(*args, grid=grid, warmup=True, **kwargs)

    setattr(run, "compiles_on_warmup", True)
    setattr(InterpretedFunction, "run", run)
