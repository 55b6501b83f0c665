"""The persistent per-side kernel cache (``--ab-kernel-cache``): a second run compiles nothing, a changed
switch or campaign gets a key of its own, ``off`` keeps the root's own cache; compile counts reach the report.

Real sessions of a real Triton kernel in the interpreter: round 1 compiles it for cuda:90 (the IR capture),
through the side's Triton cache, and Triton's compile listener counts what was loaded and what was compiled.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import ADD_KERNEL_SOURCE, DOT_SOURCE

CAMPAIGN = DOT_SOURCE + ADD_KERNEL_SOURCE + '''

def build_add(shape, device):
    import torch
    x = torch.arange(shape["n"], device=device, dtype=torch.float32)
    y = torch.empty_like(x)
    return Case(run=lambda: (add_kernel[(1,)](x, y, N=shape["n"]), y)[1], expected=lambda: x + 1)


OPS = [Op("add", build=build_add, shapes={"smoke": [{"n": 16}]})]
SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
'''
ARGS = ("--ab-rounds", "1", "-p", "no:cacheprovider")


def kernels(pytester: pytest.Pytester, root: Path, *args: str) -> dict[str, dict[str, int]]:
    """Run a session of the campaign into ``root``; the report's compile counts by side."""
    result = pytester.runpytest_subprocess("kc.py", "--ab-root", str(root), *ARGS, *args)
    assert result.ret == 0, result.stdout.str()[-3000:]
    counts: dict[str, dict[str, int]] = json.loads((root / "report.json").read_text())["time_spent"]["kernels"]
    line = next(ln for ln in result.outlines if "compile cache:" in ln)
    for side, n in counts.items():
        assert f"side {side} {n['loaded']} kernel" in line and f"loaded, {n['compiled']} compiled" in line
    return counts


def kernel_entries(base: Path) -> list[Path]:
    """Triton's cache entries (one folder per compiled kernel) under every key folder of ``base``."""
    return [p for key in base.iterdir() for p in key.iterdir() if p.is_dir()] if base.is_dir() else []


def test_second_run_on_a_new_root_compiles_nothing(campaign_dir: pytest.Pytester, kernel_cache_home: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    campaign_dir.makepyfile(kc=CAMPAIGN)
    base = kernel_cache_home / "pytest-abbench" / "kernels"

    # With the per-pass dump on (the default IR capture without a GPU), each compile's key holds its own dump
    # file: those compiles stay out of the persistent cache, where they could never be loaded.
    dumped = kernels(campaign_dir, campaign_dir.path / "root0")
    assert dumped["A"]["compiled"] > 0 and dumped["B"]["compiled"] > 0, dumped
    assert kernel_entries(base) == []

    monkeypatch.setenv("ABBENCH_PASS_DUMP", "0")
    first = kernels(campaign_dir, campaign_dir.path / "root1")
    assert first["A"]["compiled"] > 0 and first["B"]["compiled"] > 0, first
    folders = sorted(p.name for p in base.iterdir())
    assert len(folders) == 2 and folders[0].startswith("kc-A-") and folders[1].startswith("kc-B-"), folders
    assert len(kernel_entries(base)) == first["A"]["compiled"] + first["B"]["compiled"]
    assert not (campaign_dir.path / "root1" / "cache").exists()  # nothing compiled into the root

    second = kernels(campaign_dir, campaign_dir.path / "root2")
    assert second["A"] == {"loaded": first["A"]["compiled"], "compiled": 0}, second
    assert second["B"] == {"loaded": first["B"]["compiled"], "compiled": 0}, second
    assert sorted(p.name for p in base.iterdir()) == folders


def test_off_keeps_the_roots_own_cache_per_side(campaign_dir: pytest.Pytester, kernel_cache_home: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABBENCH_PASS_DUMP", "0")
    campaign_dir.makepyfile(kc=CAMPAIGN)
    root = campaign_dir.path / "root"
    counts = kernels(campaign_dir, root, "--ab-kernel-cache", "off")
    assert counts["A"]["compiled"] > 0 and counts["B"]["compiled"] > 0, counts
    for side in "AB":
        assert any((root / "cache" / f"triton_{side}").iterdir())
    assert not (kernel_cache_home / "pytest-abbench").exists()


def test_keys_follow_side_switch_environment_source_and_device(tmp_path: Path) -> None:
    """A real probe of this interpreter's Triton; each part of the key moves the folder, the sides never share."""
    import os
    import sys

    from pytest_abbench.campaign.model import source_hash
    from pytest_abbench.core.layout import RootLayout
    from pytest_abbench.spawn.kernelcache import KernelCaches

    campaign = tmp_path / "camp.py"
    campaign.write_text("OPS = []\n")
    env = dict(os.environ)
    caches = KernelCaches(str(tmp_path / "kc"), RootLayout(tmp_path / "root"), "interpreter", None)

    def folder(side: str = "A", switch: dict[str, str] | None = None, source: str | None = None,
               environ: dict[str, str] | None = None, into: KernelCaches = caches) -> Path:
        return into.folder(campaign, source or source_hash(campaign), side, sys.executable, switch or {},
                           environ or env)

    base = folder()
    assert base == folder() and base.parent == tmp_path / "kc" and base.name.startswith("camp-A-")
    assert folder("B") != base  # the same everything else: never one folder for both sides
    assert folder(switch={"DISABLE_MMA_V3": "1"}) != base
    assert folder(environ={**env, "TRITON_F32_DEFAULT": "ieee"}) != base  # an inherited Triton knob
    assert folder(environ={**env, "UNRELATED": "1"}) == base
    campaign.write_text("OPS = []  # edited\n")
    assert folder() != base
    helpers = tmp_path / "_helpers"
    helpers.mkdir()
    (helpers / "__init__.py").write_text("")
    campaign.write_text("from _helpers import x\nOPS = []  # edited\n")
    before = folder()
    (helpers / "__init__.py").write_text("x = 1\n")  # a helper beside the campaign is part of its source
    assert folder() != before
    on_gpu = KernelCaches(str(tmp_path / "kc"), RootLayout(tmp_path / "root"), "cuda", None)
    on_gpu._device = "NVIDIA H200 cuda:90"  # nvidia-smi is not on a machine without a GPU
    assert folder(into=on_gpu) != folder()
    off = KernelCaches("off", RootLayout(tmp_path / "root"), "interpreter", None)
    assert folder(into=off) == tmp_path / "root" / "cache" / "triton_A"
    assert json.loads((base / "abbench-key.json").read_text())["side"] == "A"


def export(root: Path, side: str, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``abbench kernels export ROOT --side SIDE -o OUT``: its exit code and what it printed."""
    from pytest_abbench.cli import main

    code = main(["kernels", "export", str(root), "--side", side, "-o", str(out)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_export_names_what_it_cannot_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A root without the record, and one whose side compiled into the root's own cache (``off``)."""
    root = tmp_path / "root"
    cell = root / "r1_A" / "add"
    cell.mkdir(parents=True)
    code, said = export(root, "A", tmp_path / "a.tgz", capsys)
    assert code == 2 and "no cell of side A" in said and "names its kernel cache" in said, said
    own = root / "cache" / "triton_A"
    (own / "abc").mkdir(parents=True)
    (own / "abc" / "k.cubin").write_bytes(b"x")
    (cell / "origin.json").write_text(json.dumps({"schema": 1, "host": "h", "worker": "main", "cell_dir": str(cell),
                                                  "kernel_cache": str(own), "campaign": "kc.py"}))
    code, said = export(root, "A", tmp_path / "a.tgz", capsys)
    assert code == 2 and f"side A compiled into {own}, which has no kernel cache key" in said, said
    assert not (tmp_path / "a.tgz").exists()

