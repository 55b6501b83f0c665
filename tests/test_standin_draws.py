"""Stand-in draws: a compile-only process tiles its large random inputs from a small draw (real torch, real Triton)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pytest_abbench.checks.irgate import normalize_ttgir
from pytest_abbench.child.standin_draws import BLOCK, stood_in
from pytest_abbench.core.cellconfig import CHILD_MODULE, CellConfig

LARGE = 4 * BLOCK + 3  # the smallest draw stood in, plus a tail that is not a whole block


def test_a_large_cpu_draw_keeps_its_shape_dtype_bounds_and_distribution_and_repeats_one_block() -> None:
    with stood_in() as count:
        x = torch.randn(2, LARGE, generator=torch.Generator().manual_seed(1), dtype=torch.bfloat16,
                        requires_grad=True)
        flat = x.detach().view(-1)
        assert (x.shape, x.dtype, x.requires_grad, x.device.type) == ((2, LARGE), torch.bfloat16, True, "cpu")
        assert torch.equal(flat[:BLOCK], flat[BLOCK:2 * BLOCK]) and torch.equal(flat[:3], flat[4 * BLOCK:4 * BLOCK + 3])
        assert abs(float(flat[:BLOCK].float().mean())) < 0.01 and 0.99 < float(flat[:BLOCK].float().std()) < 1.01
        u = torch.rand((LARGE,))
        assert 0.0 <= float(u.min()) and float(u.max()) < 1.0 and 0.49 < float(u[:BLOCK].mean()) < 0.51
        for ints, low, high in ((torch.randint(3, 9, (LARGE,)), 3, 8), (torch.randint(7, size=(LARGE,)), 0, 6),
                                (torch.randint(low=2, high=5, size=[2, LARGE]), 2, 4)):
            assert (ints.dtype, int(ints.min()), int(ints.max())) == (torch.int64, low, high)
        assert (count.draws, count.values) == (5, 2 * LARGE + LARGE + LARGE + LARGE + 2 * LARGE)
        assert "5 input draws" in count.summary()


def test_small_draws_and_calls_it_does_not_read_are_torchs_own_and_torch_gets_them_back() -> None:
    exact = torch.randn(LARGE, generator=torch.Generator().manual_seed(3))
    exact_small = torch.randn(10, generator=torch.Generator().manual_seed(3))
    with stood_in() as count:
        small = torch.randn(10, generator=torch.Generator().manual_seed(3))
        into = torch.empty(LARGE)
        torch.randn(LARGE, generator=torch.Generator().manual_seed(3), out=into)  # out=: torch's own
        assert torch.equal(small, exact_small) and torch.equal(into, exact)
        assert count.draws == 0 and count.summary() == ""
    assert not hasattr(torch.randn, "__wrapped__") and not hasattr(torch.randint, "__wrapped__")
    again = torch.randn(LARGE, generator=torch.Generator().manual_seed(3))
    assert torch.equal(again, exact)  # restored: a large draw is torch's whole draw again


# A Triton kernel whose input is large enough to be stood in, and whose launch reads a value of it (a count, as
# an op that skips ignored targets does): the compile-only child must compile what it compiles with exact draws.
DRAW_CAMPAIGN = f'''
import triton
import triton.language as tl
from pytest_abbench import Case, Op, Switch

@triton.jit
def scale_kernel(x_ptr, y_ptr, n, positive, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * positive, mask=mask)

def build_scale(shape, device):
    import torch
    x = torch.randn(shape["n"], generator=torch.Generator(device=device).manual_seed(5), device=device)
    y = torch.empty_like(x)
    positive = int((x > -10).sum())  # every value: the launch's integer argument is n either way
    return Case(run=lambda: (scale_kernel[(triton.cdiv(shape["n"], 1024),)](x, y, shape["n"], positive,
                                                                            BLOCK=1024), y)[1])

OPS = [Op("scale", build=build_scale, shapes={{"smoke": [{{"n": {LARGE}}}]}})]
SWITCH = Switch(env_b={{"DISABLE_MMA_V3": "1"}})
'''


def _compile_only(folder: Path, exact: bool) -> tuple[str, dict[str, str]]:
    """The real cell child in IR-only mode: its output and its TTGIR files (name -> text)."""
    folder.mkdir(parents=True)
    campaign = folder / "draws.py"
    campaign.write_text(DRAW_CAMPAIGN)
    config = CellConfig(campaign=campaign, op="scale", round_no=1, side="A", role="A", out=folder / "cell",
                        backend="interpreter", timer="wall", level="smoke", ir_target="cuda:90", ir_only=True)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "ABBENCH_EXACT_DRAWS")}
    env.update(TRITON_CACHE_DIR=str(folder / "triton-cache"), ABBENCH_PASS_DUMP="0",
               **({"ABBENCH_EXACT_DRAWS": "1"} if exact else {}))
    done = subprocess.run([sys.executable, "-m", CHILD_MODULE, *config.to_argv()], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr, {p.name: normalize_ttgir(p.read_text())
                                       for p in (folder / "cell" / "ir").rglob("*.ttgir")}


def test_a_compile_only_cell_stands_in_for_its_draws_and_compiles_what_exact_draws_compile(tmp_path: Path) -> None:
    tiled_log, tiled_ir = _compile_only(tmp_path / "tiled", exact=False)
    exact_log, exact_ir = _compile_only(tmp_path / "exact", exact=True)
    assert f"inputs: 1 input draw ({LARGE:,} values) tiled from {BLOCK:,}-value draws" in tiled_log
    assert "inputs:" not in exact_log
    assert tiled_ir and tiled_ir == exact_ir
