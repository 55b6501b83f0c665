"""Files that are not campaign files, read as campaigns in a cell: the campaign file itself or a perf_report script.

A cell is told its campaign's adapter spec (``CellConfig.adapter``, e.g. ``perf-report:torch,triton``) and
loads its file through ``load_for_cell``; pytest's process reads such files through the adapter's own
collection-side function (``perf_report.describe_script``, ``benchmark_tests.describe_tests``).  A pytest-benchmark
campaign's cells run the user's test under pytest: they start through their own module
(``CellConfig.module``, ``session/benchmark_cell.py``), which loads the file itself, so no other cell reaches pytest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from pytest_abbench.campaign import perf_report
from pytest_abbench.campaign.loader import load_campaign, module_name_for
from pytest_abbench.campaign.model import Campaign, CampaignError
from pytest_abbench.core.cellconfig import PYTEST_BENCHMARK_ADAPTER, PYTEST_BENCHMARK_CELL_MODULE


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
    if kind == PYTEST_BENCHMARK_ADAPTER:
        raise CampaignError(f"{path}: a {kind} cell starts through python -m {PYTEST_BENCHMARK_CELL_MODULE}, "
                            "which runs the file's tests under pytest")
    raise CampaignError(f"{path}: unknown adapter {adapter!r} (known: {perf_report.KIND}, {PYTEST_BENCHMARK_ADAPTER})")
