"""``python -m pytest_abbench.session.benchmark_cell``: a cell of a pytest-benchmark campaign (``--ab-pytest-benchmark``).

Such a cell runs the user's test under pytest, in its own process, to take the callable the test hands
``benchmark`` (``campaign/benchmark_tests.py``).  It is the child's cell (``python -m pytest_abbench.child``) with
that loader: starting it here keeps pytest out of every other campaign's cells.
"""

from __future__ import annotations

import sys
from typing import Callable, Sequence

from pytest_abbench.campaign import benchmark_tests
from pytest_abbench.campaign.loader import module_name_for
from pytest_abbench.campaign.model import Campaign, CampaignError
from pytest_abbench.child.__main__ import main as cell_main
from pytest_abbench.core.cellconfig import CellConfig


def load_benchmark_tests(config: CellConfig, log: Callable[[str], None], compile_only: bool) -> Campaign:
    """The cell's file collected as pytest does, each op's build running its test."""
    if config.adapter is None:
        raise CampaignError(f"{config.campaign}: a pytest-benchmark cell needs its --adapter spec")
    return benchmark_tests.load_for_cell(config.campaign, config.campaign_module or module_name_for(config.campaign),
                                         config.adapter, config.side, log, compile_only=compile_only)


def main(argv: Sequence[str] | None = None) -> int:
    return cell_main(argv, load=load_benchmark_tests)


if __name__ == "__main__":
    sys.exit(main())
