"""Compiler switches used by campaigns: setup functions run inside a cell before any kernel compiles."""

from __future__ import annotations

from pytest_abbench.campaign.switches import without_pass

_without_layout_cleanup = without_pass("ttgpuir.remove_layout_conversions", stage="ttgir")


def skip_remove_layout_conversions() -> None:
    """Compile TTGIR without Triton's remove-layout-conversions pass.

    Exactly the kind of pass experiment these campaigns exist for: the
    convert_layout ops the pass would have removed stay in the TTGIR.
    """
    _without_layout_cleanup()
