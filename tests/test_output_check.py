"""The output check: a side's first cell checks each shape against its reference and keeps the output's
fingerprint; its later cells compare with it and compute no reference, and any change goes back to the reference.

Real pytest sessions on Triton's interpreter, with a real Triton kernel; the campaign counts its reference
computations in a file and, where told, adds a planted change to side A's output from its Nth cell on.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_abbench.child.outputcheck import OutputRecord, check_output, fingerprint

CAMPAIGN = '''
import os
from pytest_abbench import Case, Op, Switch

def build(shape, device):
    import torch, triton, triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, bump, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask) + bump,
                 mask=mask)

    side = "B" if os.environ.get("SIDE_IS_B") else "A"
    with open(os.environ["BUILDS"], "a+") as builds:  # this side's builds of this shape so far, this one included
        builds.write(f"{side} {shape.id}\\n")
        builds.seek(0)
        nth = sum(1 for line in builds if line.split() == [side, shape.id])
    plant_at = int(os.environ.get("PLANT_AT", "0"))
    bump = float(os.environ.get("PLANT", "0")) if side == "A" and plant_at and nth >= plant_at else 0.0
    n = shape["n"]
    x = torch.arange(n, dtype=torch.float32)
    y = torch.full((n,), 0.25)
    out = torch.empty_like(x)

    def expected():
        with open(os.environ["REFERENCES"], "a") as refs:
            refs.write(f"{side} {shape.id}\\n")
        return x + y

    def run():
        add[(triton.cdiv(n, 16),)](x, y, out, n, bump, BLOCK=16)
        return out
    return Case(run=run, expected=expected, atol=1e-6, rtol=1e-6)

OPS = [Op("add", build=build, shapes={"smoke": [{"n": 40}, {"n": 24}]})]
SWITCH = Switch(env_b={"SIDE_IS_B": "1"})
'''


def _session(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rounds: int,
             **env: str) -> tuple[pytest.RunResult, Path, list[str]]:
    builds, refs = tmp_path / "builds.txt", tmp_path / "references.txt"
    monkeypatch.setenv("BUILDS", str(builds))
    monkeypatch.setenv("REFERENCES", str(refs))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(outs=CAMPAIGN)
    root = tmp_path / "root"
    result = pytester.runpytest_subprocess("outs.py", "--ab-root", str(root), "--ab-ir-target", "none",
                                           "--ab-rounds", str(rounds), "-p", "no:cacheprovider")
    return result, root, refs.read_text().splitlines() if refs.exists() else []


def _statuses(root: Path) -> dict[str, dict[str, tuple[str, str | None]]]:
    """(status, error) per shape, per cell folder (``r2_A``)."""
    out: dict[str, dict[str, tuple[str, str | None]]] = {}
    for results in sorted(root.glob("r*_*/add/results.jsonl")):
        rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
        out[results.parent.parent.name] = {row["shape"]: (row["status"], row.get("error")) for row in rows}
    return out


def test_later_cells_compute_no_reference_when_their_output_is_the_first_cells(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, root, refs = _session(pytester, tmp_path, monkeypatch, rounds=3)
    statuses = _statuses(root)
    assert len(statuses) >= 6, statuses  # three rounds of both sides (and any A/A control cell)
    assert all(status == "ok" for cell in statuses.values() for status, _ in cell.values()), statuses
    # One reference per side and shape: in the side's first cell, never again.
    assert sorted(refs) == ["A n=24", "A n=40", "B n=24", "B n=40"] or sorted(refs) == sorted(
        f"{side} {shape}" for side in "AB" for shape in ("n=24", "n=40")), refs
    kept = json.loads((root / "outputs" / "side-A" / "add.json").read_text())["shapes"]
    assert set(kept) == set(statuses["r1_A"])
    log = (root / "r3_B" / "add" / "run.log").read_text()
    assert "2 shape(s) matched the side's first checked output" in log


def test_a_planted_change_in_a_later_cells_output_is_caught(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Side A's kernel adds 0.5 to its output from its second cell on: round 1 passes, round 2 must not.
    result, root, refs = _session(pytester, tmp_path, monkeypatch, rounds=2, PLANT_AT="2", PLANT="0.5")
    statuses = _statuses(root)
    assert all(status == "ok" for status, _ in statuses["r1_A"].values()), statuses
    assert all(status == "ok" for status, _ in statuses["r2_B"].values()), statuses
    for status, error in statuses["r2_A"].values():
        assert status == "wrong", statuses
        assert error is not None and "output changed since the side's first cell" in error
    # The change sent both of r2-A's shapes back to the reference, which decided.
    assert sorted(refs).count("A n=40") == 2 and sorted(refs).count("B n=40") == 1, refs


def test_an_output_that_varies_within_the_reference_is_checked_against_it_not_called_wrong(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A change far inside the tolerance (a kernel whose output varies between runs): the fingerprint differs, the
    # reference passes it, as a cell computing its reference every time would.
    result, root, refs = _session(pytester, tmp_path, monkeypatch, rounds=2, PLANT_AT="2", PLANT="5e-7")
    statuses = _statuses(root)
    assert all(status == "ok" for cell in statuses.values() for status, _ in cell.values()), statuses
    log = (root / "r2_A" / "add" / "run.log").read_text()
    assert "differs from the side's first checked one and still matches the reference" in log


def test_the_fingerprint_check_answers_as_the_reference_does_on_each_output() -> None:
    """Each output through the kept fingerprint and through the reference alone: the same problem or none."""
    import torch

    reference = torch.linspace(-1, 1, 1000)
    first = reference.clone()

    def reference_check(actual: torch.Tensor) -> str | None:
        try:
            torch.testing.assert_close(actual, reference, atol=1e-6, rtol=1e-6)
        except AssertionError as exc:
            return str(exc).splitlines()[0]
        return None

    changed_one = first.clone()
    changed_one[517] += 0.01  # between two sampled positions: the sums see it
    outputs = {"same": first.clone(), "one element": changed_one, "all": first + 0.5,
               "within tolerance": first + 1e-9, "nan": torch.where(torch.arange(1000) == 3, float("nan"), first)}
    record = OutputRecord(Path(os.devnull))
    record.by_shape["s"] = json.loads(json.dumps(fingerprint(first)))
    for name, output in outputs.items():
        alone = reference_check(output)
        problem, by_fingerprint = check_output(record, "s", output, True, lambda: reference_check(output),
                                               lambda _: None)
        assert (problem is None) == (alone is None), name
        assert by_fingerprint == (name == "same"), name


def test_a_corrupt_output_record_is_named(tmp_path: Path) -> None:
    path = tmp_path / "add.json"
    path.write_text('{"schema": 1, "shape": {}}')
    with pytest.raises(ValueError, match=r"add\.json: field 'shapes'"):
        OutputRecord.open(path)


def test_a_fingerprint_samples_inside_a_tensor_larger_than_float32_counts_exactly() -> None:
    """Past 2**24 elements float32 positions round up to one past the end (a device-side assert on a GPU)."""
    import torch

    big = torch.zeros(2**24 + 4)  # the last position, 2**24 + 3, is a float32 tie that rounds up
    big[-1] = 7.0
    kept = fingerprint(big)
    assert len(kept["values"]) == 64 and float.fromhex(kept["values"][-1]) == 7.0
    assert float.fromhex(kept["values"][0]) == 0.0
