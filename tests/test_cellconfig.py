"""The cell process's parameters: one argv format written by the plugin and read by the child."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_abbench.core.cellconfig import CellConfig, autotune_mode_for, side_record_mode_for

EVERY_FIELD = CellConfig(
    campaign=Path("/campaigns/mm.py"), op="-mm.v2", round_no=3, side="A", role="A2", out=Path("/root/r3_A2/mm"),
    backend="cuda", timer="direct", level="core", samples=7, direct_rep=80, direct_warmup=10,
    autotune_mode="replay", autotune_file=Path("/root/autotune/mm.json"), autotune_side_mode="replay",
    autotune_seed_file=Path("/earlier/autotune/mm.json"), candidate_procs=4, autotune_screen=0,
    autotune_side_file=Path("/root/autotune/side-B/mm.json"), output_record=Path("/root/outputs/side-B/mm.json"),
    tuner_seed_base="fresh", switch="DISABLE_MMA_V3=1 A:X=2",
    tuner_cache="shared:/tmp/tuner", ir_target="cuda:90", ir_only=True,
    ir_level="comprehensive", shard="1/3", shares=4, spawn="fork", regime="both",
    campaign_module="abbench_campaign__campaigns__mm",
    # A pytest-benchmark spec: JSON with spaces, quotes and a value starting with "-" must survive as one value.
    skip_shapes='["M=512,N=512", "n=1"]',
    adapter='pytest-benchmark:{"import_mode": "prepend", "inifile": null, "overrides": ["-x=1"], "rootdir": "/r s"}',
)


def test_every_field_set_survives_the_argv_round_trip() -> None:
    for f in dataclasses.fields(CellConfig):
        if f.default is not dataclasses.MISSING:
            assert getattr(EVERY_FIELD, f.name) != f.default, f"{f.name} is left at its default"
    assert CellConfig.from_argv(EVERY_FIELD.to_argv()) == EVERY_FIELD


def test_defaults_fill_what_the_argv_leaves_out() -> None:
    required = ["--campaign", "c.py", "--op", "o", "--round", "1", "--side", "B", "--role", "B", "--out", "o",
                "--backend", "interpreter", "--timer", "wall", "--level", "smoke"]
    config = CellConfig.from_argv(required)
    assert (config.samples, config.autotune_mode, config.autotune_file, config.ir_only) == (3, "off", None, False)
    assert CellConfig.from_argv(config.to_argv()) == config


@pytest.mark.parametrize("flag, bad", [("--timer", "fast"), ("--backend", "rocm"), ("--autotune-mode", "tune"),
                                       ("--role", "C"), ("--round", "first")])
def test_a_bad_value_is_named(flag: str, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        CellConfig.from_argv([*EVERY_FIELD.to_argv(), flag, bad])
    assert exc.value.code == 2
    error = capsys.readouterr().err
    assert f"argument {flag}" in error and repr(bad) in error


def test_only_round_1_side_a_records() -> None:
    assert autotune_mode_for(1, "A") == "record"
    assert [autotune_mode_for(r, role) for r, role in ((1, "B"), (1, "A2"), (2, "A"), (2, "B"))] == ["replay"] * 4


def test_round_1_side_b_records_the_keys_only_side_b_has_and_side_a_keeps_no_supplement() -> None:
    assert [side_record_mode_for(r, role) for r, role in ((1, "B"), (2, "B"), (5, "B"))] == ["record", "replay", "replay"]
    assert [side_record_mode_for(r, role) for r, role in ((1, "A"), (2, "A"), (1, "A2"))] == [None] * 3


def test_the_parent_side_loads_neither_torch_nor_the_child() -> None:
    probe = ("import sys, pytest_abbench.core.cellconfig, pytest_abbench.core.identity\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton')"
             " or m.startswith('pytest_abbench.child')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_ir_only_without_a_target_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = dataclasses.replace(EVERY_FIELD, ir_target=None).to_argv()
    with pytest.raises(SystemExit):
        CellConfig.from_argv(argv)
    assert "--ir-only needs --ir-target" in capsys.readouterr().err
