"""Terminal wording: counts read as English."""

from __future__ import annotations

import pytest

from helpers import simple_campaign


@pytest.mark.parametrize("ops, rounds, line", [
    ('"one"', "1", "abbench: 2 cells, 1 op, 1 round, backend *"),
    ('"one", "two"', "2", "abbench: 8 cells, 2 ops, 2 rounds, backend *"),
])
def test_collection_line_counts_in_singular_and_plural(campaign_dir: pytest.Pytester, ops: str, rounds: str,
                                                       line: str) -> None:
    campaign_dir.makepyfile(c=simple_campaign(ops))
    result = campaign_dir.runpytest("c.py", "--collect-only", "-q", "--ab-rounds", rounds)
    result.stdout.fnmatch_lines([line])
