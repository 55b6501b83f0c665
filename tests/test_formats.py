"""Each file a cell or session writes for another process carries a version; its reader checks it and each field.

A bad file (a newer version, a missing or ill-typed field) is refused with a
message naming the file and the field; a file without a version is the
layout from before versions and still reads.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pytest_abbench.checks import caliber, irgate
from pytest_abbench.core.cellfiles import (Shares, read_origin, read_shares, read_timing, write_shares,
                                           write_timing, Workers, read_workers, write_workers)
from pytest_abbench.core.fileio import CorruptFileError, FormatError
from pytest_abbench.core.identity import IDENTITY_SCHEMA, read_identity
from pytest_abbench.core.layout import CellKey, RootLayout
from pytest_abbench.core.outcome import CellOutcome
from pytest_abbench.core.plan import CampaignManifest, CampaignPlan, read_manifest, read_plan, write_manifest
from pytest_abbench.core.results import ShapeResult, append_result, read_results
from pytest_abbench.report.cost import read_timing as report_timing
from pytest_abbench.session.transport import ShippedCell
from pytest_abbench.spawn.runner import count_shapes

IDENTITY = {"backend": "cuda", "device": "H200", "timer": "cudagraph", "bench_level": "core", "shape_mode": "h",
            "tuner_cache": "per-cell", "direct_repeat": "r", "autotune_mode": "replay", "round": 2,
            "autotune_record": None}


NEWER = " (written by a newer pytest-abbench: read it with that one)"


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


# -- results.jsonl ---------------------------------------------------------------
def test_results_round_trip_with_their_version(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    ok = ShapeResult("n=4", "ok", {"n": 4}, 0, None, "cudagraph", [1.0, 2.0, 3.0], 2.0, 3, None)
    failed = ShapeResult("n=8", "error", {"n": 8}, 1, [64, 128], error="RuntimeError: no")
    append_result(path, ok)
    append_result(path, failed)
    assert list(read_results(path)) == [ok, failed]
    first = json.loads(path.read_text().splitlines()[0])
    assert first["schema"] == 1 and "error" not in first and "layout_pad_bytes" not in first


def test_results_without_a_version_still_read(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"shape": "s", "status": "ok", "timer": "cudagraph", "median_ms": 1,
                                "samples_ms": [1, 1]}) + "\n")
    (result,) = read_results(path)
    assert result.ok and result.median_ms == 1.0 and result.samples_ms == [1.0, 1.0]


@pytest.mark.parametrize("record, message", [
    ({"schema": 2, "shape": "s", "status": "ok"}, "results.jsonl:2: field 'schema': expected a format version up to 1, got 2" + NEWER),
    ({"status": "ok"}, "results.jsonl:2: field 'shape': missing (expected text)"),
    ({"shape": "s", "status": "ok", "median_ms": "fast"}, "results.jsonl:2: field 'median_ms': expected a number or null, got 'fast'"),
])
def test_a_bad_result_names_file_line_and_field(tmp_path: Path, record: dict[str, object], message: str) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"shape": "t", "status": "ok"}) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(FormatError) as caught:
        list(read_results(path))
    assert str(caught.value) == f"{tmp_path}/{message}"
    # The parent counts such a file as a failure, naming the problem (its existing path for corrupt files).
    success, failed, problems = count_shapes(tmp_path)
    assert (success, failed) == (1, 1) and problems == [f"{tmp_path}/{message}"]


# -- run_identity.json -------------------------------------------------------------
def test_an_identity_without_a_version_reads_and_one_of_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "run_identity.json", IDENTITY)
    assert read_identity(path) == IDENTITY
    _write(path, {**IDENTITY, "schema": IDENTITY_SCHEMA + 1})
    with pytest.raises(FormatError, match=rf"run_identity\.json: field 'schema': expected a format version up to "
                                          rf"{IDENTITY_SCHEMA}, got {IDENTITY_SCHEMA + 1}"):
        read_identity(path)


@pytest.mark.parametrize("change, message", [
    ({"timer": None}, "field 'timer': expected text, got None"),
    ({"round": "2"}, "field 'round': expected a whole number, got '2'"),
    ({"autotune_record": 3}, "field 'autotune_record': expected text or null, got 3"),
])
def test_an_ill_typed_identity_field_is_named(tmp_path: Path, change: dict[str, object], message: str) -> None:
    path = _write(tmp_path / "run_identity.json", {**IDENTITY, **change})
    with pytest.raises(FormatError) as caught:
        read_identity(path)
    assert str(caught.value) == f"{path}: {message}"


def test_the_caliber_check_names_a_missing_identity_field(tmp_path: Path) -> None:
    path = _write(tmp_path / "run_identity.json", {k: v for k, v in IDENTITY.items() if k != "device"})
    identity, why = caliber.load_identity(tmp_path)
    assert identity is None and why == f"{path}: field 'device': missing (expected text)"


# -- campaign.json and its plan -------------------------------------------------------
def test_a_manifest_round_trips_and_one_without_a_version_reads(tmp_path: Path) -> None:
    path = tmp_path / "campaign.json"
    manifest = CampaignManifest({"c.py": "abc"}, None, {"one": {"shapes": "h"}}, CampaignPlan(3, True, False,
                                                                                           {"one": "c.py"}))
    write_manifest(path, manifest)
    assert json.loads(path.read_text())["schema"] == 1
    assert read_manifest(path) == manifest
    auto = dataclasses.replace(manifest, plan=CampaignPlan(10, ops={"one": "c.py"}, auto_min=3, energy_target_pct=2.5))
    write_manifest(path, auto)
    assert read_manifest(path) == auto
    # The previous release's campaign.json: no version, the same fields.
    old = {"campaign_files": {"c.py": "abc"}, "switch_env": {"X": "1"}, "op_fingerprints": {"one": {"shapes": "h"}},
           "plan": {"rounds": 2, "control": False, "ir_only": False, "ops": {"one": "c.py"}}}
    _write(path, old)
    assert read_manifest(path) == CampaignManifest({"c.py": "abc"}, {"X": "1"}, {"one": {"shapes": "h"}},
                                                   CampaignPlan(2, False, False, {"one": "c.py"}))
    _write(path, {"campaign_files": {}, "switch_env": None})  # written before fingerprints and plans
    assert read_manifest(path) == CampaignManifest({}, None, None, None)
    assert read_plan(RootLayout(tmp_path)) is None


@pytest.mark.parametrize("data, message", [
    ({"schema": 5}, "field 'schema': expected a format version up to 1, got 5" + NEWER),
    ({"plan": {"control": True}}, "field 'plan.rounds': missing (expected a whole number)"),
    ({"plan": {"rounds": 2, "ops": {"one": 1}}}, "field 'plan.ops': expected an object of text values, got {'one': 1}"),
    ({"plan": {"rounds": 4, "auto_min": 3, "energy_target_pct": "5%"}},
     "field 'plan.energy_target_pct': expected a number or null, got '5%'"),
    ({"plan": {"rounds": 4, "auto_min": 3, "energy_target_pct": -1}},
     "field 'plan.energy_target_pct': expected a number of percentage points, 0 or more, got -1.0"),
    ({"op_fingerprints": {"one": "h"}}, "field 'op_fingerprints.one': expected an object of text values, got 'h'"),
    (["not", "an", "object"], "expected a JSON object, got list"),
])
def test_a_bad_manifest_names_file_and_field(tmp_path: Path, data: object, message: str) -> None:
    path = _write(tmp_path / "campaign.json", data)
    with pytest.raises(CorruptFileError) as caught:
        read_plan(RootLayout(tmp_path))
    assert str(caught.value) == f"{path}: {message}"


# -- the other files -------------------------------------------------------------------
def test_timing_shares_and_origin_carry_a_version_and_name_a_bad_field(tmp_path: Path) -> None:
    timing = tmp_path / "cell_timing.json"
    write_timing(timing, {"startup_s": 1.5, "autotune_bench_calls": 3})
    assert read_timing(timing) == {"schema": 1, "startup_s": 1.5, "autotune_bench_calls": 3}
    _write(timing, {"startup_s": 1.5})  # before versions
    assert report_timing(tmp_path) == {"startup_s": 1.5}
    _write(timing, {"startup_s": "slow"})
    with pytest.raises(FormatError, match=r"cell_timing\.json: field 'startup_s': expected a number, got 'slow'"):
        read_timing(timing)
    assert report_timing(tmp_path) == {}, "the report counts an unreadable timing file as none (as before)"

    shares = tmp_path / "shares.json"
    write_shares(shares, Shares(seconds={"share-1of2": 1.25}, failed=["share-2of2 rc 1"]))
    assert read_shares(shares) == {"seconds": {"share-1of2": 1.25}, "failed": ["share-2of2 rc 1"]}
    _write(shares, {"schema": 2, "seconds": {}, "failed": []})
    with pytest.raises(FormatError, match=r"shares\.json: field 'schema': expected a format version up to 1"):
        read_shares(shares)

    origin = _write(tmp_path / "origin.json", {"host": "h", "worker": "gw0"})
    with pytest.raises(FormatError, match=r"origin\.json: field 'cell_dir': missing \(expected text\)"):
        read_origin(origin)


def test_a_gate_decision_carries_a_version_and_a_bad_one_is_unavailable_naming_the_field(tmp_path: Path) -> None:
    decision = irgate.GateDecision("op", "diff", "switch changed generated code", "a", "b",
                                   [irgate.KernelDiff("k", "changed", {"tt.dot": 1}, {"tt.dot": 2})], "core")
    irgate.save_decision(tmp_path, decision)
    path = RootLayout(tmp_path).gate_decision("op")
    assert json.loads(path.read_text())["schema"] == 1
    assert irgate.load_decision(tmp_path, "op") == decision
    old = decision.to_json()
    del old["schema"]
    _write(path, old)
    assert irgate.load_decision(tmp_path, "op") == decision, "a decision written before versions"
    _write(path, {**old, "kernels": [{"kernel": "k"}]})
    loaded = irgate.load_decision(tmp_path, "op")
    assert loaded is not None and loaded.state == "unavailable"
    assert f"{path}: field 'kernels[0].state': missing (expected text)" in loaded.reason


def test_a_shipped_cell_round_trips_and_one_from_a_newer_worker_is_refused(tmp_path: Path) -> None:
    outcome = CellOutcome(CellKey(1, "op", "A"), tmp_path / "r1_A" / "op", "ok", "X=1", rc=0, elapsed_s=1.5)
    shipped = ShippedCell(outcome, "host", "gw0", 12, str(tmp_path), "c.py", None,
                          {"results.jsonl": {"text": "{}\n"}}, {}, {"b64": "AAE="}, 4, "f")
    assert ShippedCell.from_json(shipped.to_json()) == shipped
    newer = {**json.loads(shipped.to_json()), "schema": 2}
    with pytest.raises(FormatError, match=r"^shipped cell: field 'schema': expected a format version up to 1, got 2"):
        ShippedCell.from_json(json.dumps(newer))
    broken = json.loads(shipped.to_json())
    del broken["outcome"]["rc"]
    with pytest.raises(FormatError, match=r"^shipped cell: field 'outcome\.rc': missing \(expected a whole number\)"):
        ShippedCell.from_json(json.dumps(broken))


def test_workers_json_carries_a_version_and_a_bad_field_is_named(tmp_path: Path) -> None:
    path = tmp_path / "workers.json"
    write_workers(path, Workers(wall_s=12.5, workers={"gw0": {"gpu": "0", "busy_s": 10.0, "cells": 4, "ops": ["mm"]}}))
    assert json.loads(path.read_text())["schema"] == 1
    assert read_workers(path)["workers"]["gw0"]["cells"] == 4
    path.write_text(json.dumps({"schema": 1, "wall_s": "soon", "workers": {}}))
    with pytest.raises(FormatError, match=r"workers.json: field 'wall_s'"):
        read_workers(path)
    path.write_text(json.dumps({"schema": 2, "wall_s": 1.0, "workers": {}}))
    with pytest.raises(FormatError, match=r"workers.json: field 'schema'"):
        read_workers(path)
