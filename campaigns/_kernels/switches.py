"""Compiler switches used by campaigns: setup functions run inside a cell before any kernel compiles."""

from __future__ import annotations

import hashlib
from typing import Any

# Names this switch's edit in Triton's cache keys (Triton 3.7+).  Bump the
# suffix whenever the edit below changes, so old cache entries stop matching.
SKIP_LAYOUT_KEY = "pytest-abbench:skip_remove_layout_conversions:v1"
SKIP_LAYOUT_HASH = hashlib.sha256(SKIP_LAYOUT_KEY.encode()).hexdigest()

_PASS = "add_remove_layout_conversions"


def _triton_version() -> str:
    import triton

    return getattr(triton, "__version__", "unknown")


def _pass_module() -> Any:
    """``triton._C.libtriton.passes.ttgpuir``, or a clear error naming what this Triton lacks."""
    from triton._C.libtriton import passes

    ttgpuir = getattr(passes, "ttgpuir", None)
    if ttgpuir is None or not callable(getattr(ttgpuir, _PASS, None)):
        where = "triton._C.libtriton.passes" + ("" if ttgpuir is None else ".ttgpuir")
        missing = "ttgpuir" if ttgpuir is None else _PASS
        raise RuntimeError(f"skip_remove_layout_conversions: Triton {_triton_version()} has no {where}.{missing}; "
                           "the switch cannot skip the remove-layout-conversions pass on this Triton")
    return ttgpuir


def skip_layout_stages_hook(*args: Any) -> Any:
    """Triton's ``add_stages_inspection_hook`` for this switch, in both of its calling conventions.

    No arguments (Triton 3.7+, ``runtime/jit.py`` and ``compiler/compiler.py``):
    return ``(key, hash)`` for the kernel cache key.  Five arguments
    ``(backend, stages, options, language, capability)`` (3.6+, from
    the backend's ``add_stages``): replace the ``ttgir`` stage by one that runs
    the same pipeline with the remove-layout-conversions pass left out.
    """
    if not args:
        # Triton 3.7+ adds these to its in-memory and on-disk cache keys: a
        # kernel compiled through this hook gets its own entry, so it is never
        # served the unmodified pipeline's binary from a cache (or vice versa),
        # even when both sides share one TRITON_CACHE_DIR.
        return SKIP_LAYOUT_KEY, SKIP_LAYOUT_HASH
    _backend, stages, _options, language, _capability = args
    ttgpuir = _pass_module()
    make_ttgir = stages.get("ttgir")
    if make_ttgir is None:
        raise RuntimeError(f"skip_remove_layout_conversions: Triton {_triton_version()} gave the stages hook no "
                           f"'ttgir' stage (stages: {sorted(stages)}); nothing to skip the pass in")
    # Only the Triton language's pipeline schedules the pass; Gluon kernels carry their own layouts.
    expect_pass = getattr(language, "name", "TRITON") == "TRITON"

    def ttgir_without_layout_cleanup(src: Any, metadata: Any) -> Any:
        calls = [0]

        def skipped(pm: Any, *rest: Any, **kw: Any) -> None:  # 3.9 adds an optional argument
            calls[0] += 1

        saved = getattr(ttgpuir, _PASS)
        setattr(ttgpuir, _PASS, skipped)
        try:
            result = make_ttgir(src, metadata)
        finally:
            setattr(ttgpuir, _PASS, saved)
        if expect_pass and calls[0] == 0:
            # The pipeline no longer looks the pass up where it is patched: the switch would change nothing.
            raise RuntimeError(f"skip_remove_layout_conversions: Triton {_triton_version()}'s make_ttgir never "
                               f"called passes.ttgpuir.{_PASS}; the switch would leave the TTGIR unchanged")
        return result

    stages["ttgir"] = ttgir_without_layout_cleanup
    return None


def skip_remove_layout_conversions() -> None:
    """Compile TTGIR without Triton's remove-layout-conversions pass (a stages hook).

    Exactly the kind of pass experiment these campaigns exist for: the
    convert_layout ops the pass would have removed stay in the TTGIR.  Triton
    3.6 does not put this hook in its cache key, which is why each side has
    its own TRITON_CACHE_DIR; 3.7+ does (see ``skip_layout_stages_hook``).
    """
    try:
        from triton import knobs
    except ImportError:
        knobs = None
    # Before 3.6 Triton never reads this knob: setting it would compile side B unchanged.
    if knobs is None or not hasattr(type(knobs.runtime), "add_stages_inspection_hook"):
        raise RuntimeError(f"skip_remove_layout_conversions: Triton {_triton_version()} has no "
                           "triton.knobs.runtime.add_stages_inspection_hook (Triton 3.6 added it)")
    _pass_module()  # fail in setup, before any kernel compiles, if this Triton lacks the pass
    knobs.runtime.add_stages_inspection_hook = skip_layout_stages_hook
