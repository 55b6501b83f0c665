"""What differs between Triton releases, for the code that reaches into Triton's internals.

One place for the version knowledge (``docs/triton-versions.md`` has the
sources and the runs behind each item):

- ``knobs.runtime.add_stages_inspection_hook``: absent before 3.6; from 3.6
  the backend's ``add_stages`` calls it with ``(backend, stages, options,
  language, capability)``; from 3.7 Triton also calls it with no arguments and
  puts the ``(key, hash)`` it returns into its cache keys.
- The 3.7+ ``("custom_pipeline", hash)`` entry that ends the specialization
  key ``jit_post_compile_hook`` is given while such a hook is set.
- Where the pass bindings live (``triton._C.libtriton.passes.<group>``, and
  ``triton._C.libtriton.<backend>.passes.<group>``), and that 3.9 calls some
  of them with an extra argument.
- The header of each module in MLIR's per-pass dump (3.6 and 3.8 spell it
  differently).

Imported at pytest start-up by nothing; it imports triton only inside functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Sequence

BACKENDS_WITH_PASSES = ("nvidia", "amd")  # triton._C.libtriton.<backend>.passes


def triton_version() -> str:
    """The running Triton's version string ("unknown" for a build without one)."""
    import triton

    return str(getattr(triton, "__version__", "unknown"))


def runtime_knobs_with_stages_hook(who: str) -> Any:
    """``triton.knobs.runtime``, or a RuntimeError naming ``who`` and the version when it lacks the stages hook.

    Before 3.6 Triton never reads the knob: setting it would change nothing.
    """
    try:
        from triton import knobs
    except ImportError:
        knobs = None
    if knobs is None or not hasattr(type(knobs.runtime), "add_stages_inspection_hook"):
        raise RuntimeError(f"{who}: Triton {triton_version()} has no "
                           "triton.knobs.runtime.add_stages_inspection_hook (Triton 3.6 added it)")
    return knobs.runtime


@dataclass(frozen=True)
class StagesCall:
    """One call of a stages hook by a backend: ``stages`` maps a stage name ("ttir", "ttgir", ...) to its function."""

    backend: Any
    stages: dict[str, Callable[[Any, Any], Any]]
    options: Any
    language: Any
    capability: Any  # the CUDA compute capability; None from the AMD backend

    @property
    def is_triton_language(self) -> bool:
        """A ``@triton.jit`` kernel, not Gluon (whose kernels carry their own layouts and pipelines)."""
        return getattr(self.language, "name", "TRITON") == "TRITON"


def stages_hook_call(args: Sequence[Any]) -> StagesCall | None:
    """Read one call of a stages hook: None for 3.7+'s cache-key call (no arguments), else the backend's call."""
    if not args:
        return None
    if len(args) != 5:
        raise TypeError(f"Triton {triton_version()} called a stages hook with {len(args)} arguments; "
                        "known: none (3.7+, the cache key) or (backend, stages, options, language, capability)")
    backend, stages, options, language, capability = args
    return StagesCall(backend, stages, options, language, capability)


# Triton 3.7+ (python/triton/runtime/jit.py, JITFunction.run) appends the
# string f'("custom_pipeline", {hash})' to the specialization list whenever
# knobs.runtime.add_stages_inspection_hook is set, just before it builds the
# key as str(specialization) + str(options); the key then reads
#   [('*fp32', 'D'), ..., '("custom_pipeline", HASH)']{'debug': False, ...}
# Triton 3.6 has the knob but leaves it out of the key: nothing to remove.
_CUSTOM_PIPELINE = re.compile(r"""(?:, )?'\("custom_pipeline", (?:[^'\\]|\\.)*\)'(?=\])""")


def without_stages_hook_entry(key: str) -> str:
    """A specialization key as it reads without a stages hook set (unchanged on 3.6 and without a hook)."""
    return _CUSTOM_PIPELINE.sub("", key)


# One module in MLIR's per-pass dump (MLIR_ENABLE_DUMP=1) starts with a header line:
# 3.6 ``// -----// IR Dump Before Canonicalizer (canonicalize) ...``,
# 3.8 ``// -----// IR Dump Before CanonicalizerPass: canonicalize{options} ...``.
PASS_DUMP_HEADER = "// -----// "
PASS_DUMP_HEADER_RE = re.compile(r"// -----// IR Dump Before (\w+):? \(?([\w.-]*)")


def pass_groups() -> dict[str, ModuleType]:
    """Every module of pass bindings by the name ``without_pass`` spells it with.

    ``ttgpuir`` is ``triton._C.libtriton.passes.ttgpuir``; ``nvidia.ttnvgpuir``
    is ``triton._C.libtriton.nvidia.passes.ttnvgpuir``.  A pipeline looks its
    passes up on these modules at call time, which is what lets a switch
    replace one for the length of a stage.
    """
    from triton._C import libtriton

    groups: dict[str, ModuleType] = {}
    for prefix, holder in [("", getattr(libtriton, "passes", None)),
                           *((f"{b}.", getattr(getattr(libtriton, b, None), "passes", None))
                             for b in BACKENDS_WITH_PASSES)]:
        if holder is None:
            continue
        for name in dir(holder):
            module = getattr(holder, name)
            if not name.startswith("_") and isinstance(module, ModuleType):
                groups[prefix + name] = module
    return groups


def pass_module_path(group: str) -> str:
    """A pass group's import path: ``nvidia.ttnvgpuir`` -> ``triton._C.libtriton.nvidia.passes.ttnvgpuir``."""
    backend, dot, name = group.rpartition(".")
    return f"triton._C.libtriton.{backend}{dot}passes.{name}"


def no_op_pass(calls: list[int]) -> Callable[..., None]:
    """A stand-in for a pass binding ``add_<pass>(pm, ...)`` that adds nothing and counts its calls.

    It takes any further arguments: 3.9 calls ``add_remove_layout_conversions(pm, True)``
    in its sanitizer pipelines.
    """
    def skipped(pm: Any, *rest: Any, **kwargs: Any) -> None:
        calls[0] += 1

    return skipped
