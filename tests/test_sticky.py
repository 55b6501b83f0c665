"""A sticky CUDA error costs one shape: the cell records it and measures the rest in a fresh process.

Without a GPU no CUDA context can be poisoned, so the first shape's build raises the
error text CUDA gives for an out-of-bounds write (a fake standing for the real
fault; the H200 check is benchmarks/gpu/gpu_sticky.sh).  A device out-of-memory
error is not sticky: the shapes after it run in the same process.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

CAMPAIGN = textwrap.dedent('''
    import os
    from pytest_abbench import Case, Op, Switch

    BUILT_HERE = []  # shapes this process built: empty again in a fresh interpreter

    def build(shape, device):
        import torch
        with open(os.environ["PID_LOG"], "a") as f:
            f.write(f"{shape['n']} {len(BUILT_HERE)}\\n")
        BUILT_HERE.append(shape["n"])
        if shape["n"] == 1:
            raise RuntimeError(os.environ["FAULT_TEXT"])
        x = torch.ones(shape["n"])
        return Case(run=lambda: x * 2, expected=lambda: torch.full((shape["n"],), 2.0))

    OPS = [Op("op", build=build, shapes={"smoke": [{"n": 1}, {"n": 2}, {"n": 3}]})]
    SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
''')


@pytest.mark.parametrize("fault, fresh", [
    ("CUDA error: an illegal memory access was encountered", True),
    ("CUDA out of memory. Tried to allocate 512.00 GiB", False),
])
def test_one_bad_shape_costs_one_shape(campaign_dir: pytest.Pytester, tmp_path: Path, fault: str,
                                       fresh: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    campaign_dir.makepyfile(c=CAMPAIGN)
    root, pid_log = tmp_path / "root", tmp_path / "pids"
    monkeypatch.setenv("PID_LOG", str(pid_log))
    monkeypatch.setenv("FAULT_TEXT", fault)
    result = campaign_dir.runpytest_subprocess("c.py", "-k", "r1-A", "--ab-rounds", "1", "--ab-root", str(root),
                                               "--ab-ir-target", "none", "-p", "no:cacheprovider")
    assert result.ret == 1  # the cell failed one shape, and says which
    records = [json.loads(line) for line in (root / "r1_A" / "op" / "results.jsonl").read_text().splitlines()]
    assert [(r["shape"], r["status"]) for r in records] == [("n=1", "error"), ("n=2", "ok"), ("n=3", "ok")]
    # How many shapes the building process had built before: 0 again for n=2 in a fresh interpreter.
    built_before = [int(line.split()[1]) for line in pid_log.read_text().splitlines()]
    assert built_before == ([0, 0, 1] if fresh else [0, 1, 2])
    log = (root / "r1_A" / "op" / "run.log").read_text()
    assert ("measuring the remaining shapes in a fresh process" in log) is fresh
