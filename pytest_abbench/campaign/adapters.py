"""Files that are not campaign files, read as campaigns: one place that knows which adapter a spec names.

A cell is told its campaign's adapter spec (``CellConfig.adapter``, e.g. ``perf-report:torch,triton``) and
loads its file through ``load_for_cell``; pytest's process reads such files through the adapter's own
collection-side function (``perf_report.describe_script``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from pytest_abbench.campaign import perf_report
from pytest_abbench.campaign.model import Campaign, CampaignError, load_campaign, module_name_for


def load_for_cell(path: Path, module_name: str | None, adapter: str | None, side: str,
                  log: Callable[[str], None]) -> Campaign:
    """The campaign a cell runs: the campaign file itself, or the file read through ``adapter``."""
    if adapter is None:
        return load_campaign(path, module_name=module_name)
    kind = adapter.partition(":")[0]
    if kind == perf_report.KIND:
        return perf_report.load_for_cell(path, module_name or module_name_for(path), adapter, side, log)
    raise CampaignError(f"{path}: unknown adapter {adapter!r} (known: {perf_report.KIND})")
