"""pytest_abbench/child/ircapture.py: variant names that pair the same code across sides.

- A stages hook's ``("custom_pipeline", hash)`` entry, which Triton 3.7+
  appends to every kernel's specialization key, does not change the variant
  name; everything else in the key (specialization, options) still does.
- A real element-wise kernel compiled for cuda:90 on the CPU (the IR-only
  cell child) without a stages hook on side A and with one that changes
  nothing on side B gets the same variant file names, and the IR gate says
  ``no_diff``; likewise with the real ``skip_remove_layout_conversions``
  switch, which has no conversion to keep in this kernel.
- The shares of a compile-only cell leave their IR where one process would:
  one file per variant, the longer of two pass lists, no pass-dump file.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_abbench.checks import irgate
from pytest_abbench.core.cellconfig import CHILD_MODULE, CellConfig
from pytest_abbench.child.ircapture import PASS_DUMP_FILE, merge_ir, variant_name
from pytest_abbench.core.layout import ir_dir

CAMPAIGNS = Path(__file__).resolve().parents[1] / "campaigns"

# Side B installs a stages hook; each call appends its number of arguments to
# HOOK_LOG, so the test sees that Triton consulted it (0: for the key, 3.7+;
# 5: to edit the pipeline, 3.6+).  The no-op hook leaves the stages alone.
HOOK_CAMPAIGN = '''
import sys
sys.path.insert(0, {campaigns!r})
import triton
import triton.language as tl
from triton import knobs
from pytest_abbench import Case, Op, Switch
from _kernels import switches

HOOK_LOG = {hook_log!r}


def log_calls(hook):
    def logged(*args):
        with open(HOOK_LOG, "a") as f:
            f.write(f"{{len(args)}}\\n")
        return hook(*args)
    return logged


def noop_stages_hook(*args):
    if not args:
        return "abbench-test:noop", "0123456789abcdef"
    return None


def install_noop():
    knobs.runtime.add_stages_inspection_hook = log_calls(noop_stages_hook)


def install_skip_layout():
    switches.skip_remove_layout_conversions()
    knobs.runtime.add_stages_inspection_hook = log_calls(knobs.runtime.add_stages_inspection_hook)


@triton.jit
def add_kernel(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) + 1)


def build_add(shape, device):
    import torch
    x = torch.arange(shape["n"], device=device, dtype=torch.float32)
    y = torch.empty_like(x)
    return Case(run=lambda: (add_kernel[(1,)](x, y, N=shape["n"]), y)[1], expected=lambda: x + 1)


OPS = [Op("add", build=build_add, shapes={{"smoke": [{{"n": 16}}]}})]
SWITCH = Switch(setup_b={setup_b})
'''


def triton_minor() -> tuple[int, int]:
    import triton

    major, minor = re.match(r"(\d+)\.(\d+)", triton.__version__).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


def jit_key(specialization: Sequence[object], options: dict[str, object], stages_hash: str | None = None) -> str:
    """The key as Triton's JITFunction.run builds it (3.7+ appends the hook's entry)."""
    specialization = list(specialization)
    if stages_hash is not None:
        specialization.append(f'("custom_pipeline", {stages_hash})')
    return str(specialization) + str(options)


class Meta:
    num_warps = 4
    num_stages = 3


SPEC = [("*fp32", "D"), ("*fp32", "D"), ("constexpr", 16)]
OPTIONS = {"debug": False, "instrumentation_mode": ""}


def test_stages_hook_entry_does_not_change_the_variant_name() -> None:
    plain = variant_name("add_kernel", jit_key(SPEC, OPTIONS), Meta)
    assert variant_name("add_kernel", jit_key(SPEC, OPTIONS, "0123abcd"), Meta) == plain
    assert variant_name("k", jit_key([], OPTIONS, "0123abcd"), Meta) == variant_name("k", jit_key([], OPTIONS), Meta)
    # Quotes in a hook's hash come through str() of the list escaped.
    assert variant_name("add_kernel", jit_key(SPEC, OPTIONS, "it's"), Meta) == plain


def test_names_without_a_stages_hook_are_unchanged_and_still_tell_specializations_apart() -> None:
    key = jit_key(SPEC, OPTIONS)
    assert variant_name("add_kernel", key, Meta) == f"add_kernel/w4_s3_{hashlib.sha256(key.encode()).hexdigest()[:10]}"
    other = jit_key([("*fp32", "D"), ("*fp32", ""), ("constexpr", 16)], OPTIONS, "0123abcd")
    assert variant_name("add_kernel", other, Meta) != variant_name("add_kernel", key, Meta)
    assert variant_name("add_kernel", jit_key(SPEC, {**OPTIONS, "debug": True}), Meta) != \
        variant_name("add_kernel", key, Meta)


def compile_side(folder: Path, side: str, setup_b: str) -> Path:
    """The IR-only cell child for ``side`` of HOOK_CAMPAIGN (own Triton cache per side); its TTGIR folder."""
    folder.mkdir(parents=True, exist_ok=True)
    campaign = folder / "hookcamp.py"
    campaign.write_text(HOOK_CAMPAIGN.format(campaigns=str(CAMPAIGNS), hook_log=str(folder / "hook-calls.txt"),
                                             setup_b=setup_b))
    out = folder / f"cell-{side}"
    config = CellConfig(campaign=campaign, op="add", round_no=1, side=side, role=side, out=out,
                        backend="interpreter", timer="wall", level="smoke", ir_target="cuda:90", ir_only=True)
    argv = [sys.executable, "-m", CHILD_MODULE, *config.to_argv()]
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "DISABLE_MMA_V3")}
    env["TRITON_CACHE_DIR"] = str(folder / f"triton-cache-{side}")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return ir_dir(out)


@pytest.mark.slow
@pytest.mark.parametrize("setup_b", ["install_noop", "install_skip_layout"])
def test_stages_hook_on_side_b_keeps_names_and_no_diff(tmp_path: Path, setup_b: str) -> None:
    ir_a = compile_side(tmp_path, "A", setup_b)
    ir_b = compile_side(tmp_path, "B", setup_b)
    calls = (tmp_path / "hook-calls.txt").read_text().split()
    assert "5" in calls  # side B compiled through the hook...
    if triton_minor() >= (3, 7):
        assert "0" in calls  # ...and, from 3.7 on, its key carries the hook's entry
    names_a = [p.relative_to(ir_a).as_posix() for p in irgate.ttgir_files(ir_a)]
    names_b = [p.relative_to(ir_b).as_posix() for p in irgate.ttgir_files(ir_b)]
    assert len(names_a) == 1 and names_a[0].startswith("add_kernel/")
    assert names_b == names_a
    decision = irgate.decide("add", ir_a, ir_b)
    assert decision.state == "no_diff", decision.headline()


def test_shares_ir_merges_into_the_cell_ir_folder(tmp_path: Path) -> None:
    cell_ir = tmp_path / "ir"
    shares = [tmp_path / "share-1of2" / "ir", tmp_path / "share-2of2" / "ir"]
    # Both shares compiled variant v1; share 1's copy was its last compile (no last dump), share 2's was not.
    files = {0: {"k/v1.ttgir": "code 1", "k/v1.passes.json": '[["A", "a", "1"]]', "k/v0.ttgir": "code 0",
                 PASS_DUMP_FILE: "left by a share that died"},
             1: {"k/v1.ttgir": "code 1", "k/v1.passes.json": '[["A", "a", "1"], ["B", "b", "2"]]',
                 "k/v2.ttgir": "code 2", "k/v2.meta.json": "{}"}}
    for i, share in enumerate(shares):
        for name, text in files[i].items():
            (share / name).parent.mkdir(parents=True, exist_ok=True)
            (share / name).write_text(text)
    for share in shares:
        merge_ir(share, cell_ir)
        assert not share.exists()
    merged = {p.relative_to(cell_ir).as_posix(): p.read_text() for p in cell_ir.rglob("*") if p.is_file()}
    assert merged == {"k/v0.ttgir": "code 0", "k/v1.ttgir": "code 1", "k/v2.ttgir": "code 2", "k/v2.meta.json": "{}",
                      "k/v1.passes.json": '[["A", "a", "1"], ["B", "b", "2"]]'}
