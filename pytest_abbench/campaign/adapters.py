"""Files that are not campaign files, read as campaigns: one place that knows which adapter a spec names.

A cell is told its campaign's adapter spec (``CellConfig.adapter``, e.g. ``perf-report:torch,triton``) and
loads its file through ``load_for_cell``; pytest's process reads such files through the adapter's own
collection-side function (``perf_report.describe_script``, ``benchmark_tests.describe_tests``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from pytest_abbench.campaign import benchmark_tests, perf_report
from pytest_abbench.campaign.model import Campaign, CampaignError, load_campaign, module_name_for


def load_for_cell(path: Path, module_name: str | None, adapter: str | None, side: str,
                  log: Callable[[str], None], compile_only: bool = False) -> Campaign:
    """The campaign a cell runs: the campaign file itself, or the file read through ``adapter``.

    ``compile_only``: the cell compiles for an IR target and launches nothing, so outputs are garbage.
    """
    if adapter is None:
        return load_campaign(path, module_name=module_name)
    kind = adapter.partition(":")[0]
    if kind == perf_report.KIND:
        return perf_report.load_for_cell(path, module_name or module_name_for(path), adapter, side, log)
    if kind == benchmark_tests.KIND:
        return benchmark_tests.load_for_cell(path, module_name or module_name_for(path), adapter, side, log,
                                             compile_only=compile_only)
    raise CampaignError(f"{path}: unknown adapter {adapter!r} (known: {perf_report.KIND}, {benchmark_tests.KIND})")
