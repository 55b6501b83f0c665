"""Layout shift: each cell pads its allocations differently, records the pads, and names the mode in its identity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import simple_campaign

from pytest_abbench.child.layout_shift import LARGE_STEPS, LARGE_UNIT, SMALL_STEPS, SMALL_UNIT, pad_sizes


def test_pad_sizes_are_stable_per_cell_and_differ_between_cells() -> None:
    assert pad_sizes("mm", 1, "A", 0) == pad_sizes("mm", 1, "A", 0)
    cells = {pad_sizes("mm", r, role, 0) for r in range(1, 7) for role in ("A", "B")}
    assert len(cells) == 12  # every round and side lands its buffers differently
    for small, large in cells:
        assert small % SMALL_UNIT == 0 and small <= SMALL_UNIT * SMALL_STEPS
        assert large % SMALL_UNIT == 0 and large % LARGE_UNIT != 0 and large < LARGE_UNIT * (LARGE_STEPS + 1)


def _pads(root: Path, cell: str) -> list[list[int]]:
    lines = (root / cell / "one" / "results.jsonl").read_text().splitlines()
    return [json.loads(line).get("layout_pad_bytes") for line in lines]


def test_cells_record_their_pads_and_the_mode(campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=simple_campaign(ops='"one"'))
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", str(root), "--ab-ir-target",
                                               "none", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    for cell in ("r1_A", "r1_B"):
        assert json.loads((root / cell / "one" / "run_identity.json").read_text())["layout_shift"] == "on"
    a, b = _pads(root, "r1_A"), _pads(root, "r1_B")
    assert all(p is not None for p in a + b) and a != b and a[0] != a[1]
