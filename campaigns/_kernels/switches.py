"""Compiler switches used by campaigns: setup functions run inside a cell before any kernel compiles."""

from __future__ import annotations

from typing import Any


def skip_remove_layout_conversions() -> None:
    """Compile TTGIR without Triton's remove-layout-conversions pass (a stages hook).

    Exactly the kind of pass experiment these campaigns exist for: the
    convert_layout ops the pass would have removed stay in the TTGIR.  This
    hook is not in Triton's cache key, which is why each side has its own
    TRITON_CACHE_DIR.
    """
    from triton import knobs
    from triton._C.libtriton import passes

    def hook(backend: Any, stages: dict, options: Any, language: Any, capability: Any) -> None:
        make_ttgir = stages.get("ttgir")
        if make_ttgir is None:
            return

        def ttgir_without_layout_cleanup(src: Any, metadata: Any) -> Any:
            saved = passes.ttgpuir.add_remove_layout_conversions
            passes.ttgpuir.add_remove_layout_conversions = lambda pm: None
            try:
                return make_ttgir(src, metadata)
            finally:
                passes.ttgpuir.add_remove_layout_conversions = saved

        stages["ttgir"] = ttgir_without_layout_cleanup

    knobs.runtime.add_stages_inspection_hook = hook
