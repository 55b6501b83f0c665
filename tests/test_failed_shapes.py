"""A shape that fails the same way on both sides in round 1 is not run again, and costs the op nothing else.

Real sessions on the interpreter.  Each build appends the shape it builds to a file per side, so the test sees
which shapes each later cell ran.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_abbench.core.status import read_status

FAST = ("--ab-ir-target", "none", "--ab-samples", "1", "-p", "no:cacheprovider")

# "alike" raises one error on both sides; "apart" raises an error that names the side (not alike, so it runs in
# every round); "fine" is timed.  The op "broken" fails every shape alike.
CAMPAIGN = '''
import os
from pathlib import Path

from pytest_abbench import Case, Op, Switch

SIDE = "B" if os.environ.get("ABBENCH_TEST_SWITCH") == "1" else "A"


def build(shape, device):
    import torch
    with Path(__file__).with_name("built-" + SIDE).open("a") as f:
        f.write(shape.id + "\\n")
    if shape["kind"] == "alike":
        raise ValueError("the point's own inputs cannot be made")
    if shape["kind"] == "apart":
        raise ValueError("side " + SIDE + " differs")
    x = torch.arange(4.0)
    return Case(run=lambda: x + 1)


def broken(shape, device):
    raise TypeError("broken everywhere")


OPS = [Op("mixed", build=build, shapes={"smoke": [{"kind": "fine"}, {"kind": "alike"}, {"kind": "apart"}]}),
       Op("broken", build=broken, shapes={"smoke": [{"n": 1}, {"n": 2}]})]
SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
'''


def test_a_shape_failing_alike_in_round_1_is_not_run_again_and_the_op_keeps_its_other_verdicts(
        campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    campaign_dir.makepyfile(c=CAMPAIGN)
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "3", "--ab-root", str(root), *FAST)
    out = result.stdout.str()
    # Round 1 ran every shape on both sides; rounds 2 and 3 left out the one that failed alike there.
    for side in "AB":
        built = (campaign_dir.path / f"built-{side}").read_text().split()
        assert built.count("kind=fine") == 3 and built.count("kind=apart") == 3, (side, built)
        assert built.count("kind=alike") == 1, (side, built)
    # The op that failed every shape alike ran round 1 only: its later cells are skipped as not needed.
    rows = {(r.op, r.round, r.side): r.status for r in read_status(root)}
    assert [rows[("broken", rnd, "A")] for rnd in (1, 2, 3)] == [
        "FAILED_SHAPES", "ROUND_ALL_SHAPES_FAILED", "ROUND_ALL_SHAPES_FAILED"], rows
    assert rows[("mixed", 2, "A")] == "FAILED_SHAPES"  # "apart" still fails there
    report = json.loads((root / "report.json").read_text())
    ops = {o["op"]: o for o in report["ops"]}
    # One failing point never costs the op its report: "fine" has its verdict, each failure is named once.
    assert ops["mixed"]["state"] == "verdict", out
    assert [s["shape"] for s in ops["mixed"]["shapes"]] == ["kind=fine"]
    assert ops["mixed"]["failed_shapes"] == [
        "kind=alike: failed alike on both sides in round 1, so later rounds did not run it: error: ValueError: the "
        "point's own inputs cannot be made",
        "kind=apart: failed in r1-A, r1-B, r2-A, r2-B, r3-A, r3-B: error: ValueError: side A differs; "
        "error: ValueError: side B differs"]
    assert ops["broken"]["state"] == "no_verdict" and ops["broken"]["stopped"] == "failed"
    assert ops["broken"]["rounds_expected"] == 1
    assert len(ops["broken"]["failed_shapes"]) == 2
    result.stdout.fnmatch_lines(["== broken: rounds 1 of up to 3 (every shape failed alike in round 1)*",
                                 "*failed shape kind=alike: failed alike on both sides in round 1*"])
    # The failures still fail the run: they are not hidden, only not repeated.
    assert result.ret == 1


def test_a_shape_left_out_after_round_1_is_named_even_where_round_1_later_passed() -> None:
    from pytest_abbench.report.build import failed_line

    skipped = "skipped: it failed alike on both sides in round 1"
    # A resume ran round 1 again and the shape passed there; rounds 2 and 3 had left it out.
    line = failed_line("n=8", {"r2-A": skipped, "r2-B": skipped, "r3-A": skipped, "r3-B": skipped})
    assert line == ("n=8: not run in r2-A, r2-B, r3-A, r3-B, where round 1 had failed it alike on both sides (start a "
                    "new root to time it in every round)")
    alike = failed_line("n=8", {"r1-A": "error: E: x", "r1-B": "error: E: x", "r2-A": skipped, "r2-B": skipped})
    assert alike == "n=8: failed alike on both sides in round 1, so later rounds did not run it: error: E: x"
