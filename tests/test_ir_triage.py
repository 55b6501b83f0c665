"""IR triage on a CPU machine predicts the GPU: it compiles the shapes the GPU run would time.

TILE_CAMPAIGN's dot kernel takes its tile from the shape: 16x16 at the smoke
level, 64x64 at core.  For cuda:90 only the 64-row tile becomes a Hopper
warpgroup MMA, so DISABLE_MMA_V3=1 changes its code at core and not at
smoke, the property of router_gemm (BM 16 at its smoke shape, 64 at core)
at a fraction of its compile time.  (An op without core shapes compiles its
smoke ones: the IR-only tests of test_irgate.py run such a campaign.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_abbench.layout import IDENTITY_FILE

FAST = ("-p", "no:cacheprovider")

TILE_CAMPAIGN = '''
import triton
import triton.language as tl
from pytest_abbench import Case, Op, Switch


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs[:, None] * N + offs[None, :])
    b = tl.load(b_ptr + offs[:, None] * N + offs[None, :])
    tl.store(c_ptr + offs[:, None] * N + offs[None, :], tl.dot(a, b))


def build_dot(shape, device):
    import torch
    n = shape["n"]
    a = torch.randn(n, n, device=device, dtype=torch.float16)
    b = torch.randn(n, n, device=device, dtype=torch.float16)
    c = torch.empty(n, n, device=device, dtype=torch.float32)
    return Case(run=lambda: (dot_kernel[(1,)](a, b, c, N=n), c)[1], expected=lambda: a.float() @ b.float(),
                atol=1e-2, rtol=1e-2)


OPS = [Op("dot", build=build_dot, shapes={"smoke": [{"n": 16}], "core": [{"n": 64}]})]
SWITCH = Switch(env_b={"DISABLE_MMA_V3": "1"})
'''

CHANGED = "IR: dot_kernel: dot 0 -> 1 (+1), warp_group_dot 1 -> 0 (-1)"


def test_ir_only_triage_compiles_the_gpu_level_unless_a_level_is_given(pytester: pytest.Pytester,
                                                                       tmp_path: Path) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(tilecamp=TILE_CAMPAIGN)
    result = pytester.runpytest_subprocess("tilecamp.py", "--ab-ir-only", "--ab-ir-target", "cuda:90",
                                           "--ab-root", str(tmp_path / "auto"), *FAST)
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    # The README's laptop line: the dot's core tile is a wgmma that the switch turns off.
    assert "IR triage: the switch changes the generated code of 1 of 1 ops: dot (worth GPU time)" in out
    assert CHANGED in out

    # --ab-level names the shapes: at smoke the 16-row tile is no wgmma on either side.
    result = pytester.runpytest_subprocess("tilecamp.py", "--ab-ir-only", "--ab-ir-target", "cuda:90",
                                           "--ab-level", "smoke", "--ab-root", str(tmp_path / "smoke"), *FAST)
    result.assert_outcomes(passed=2)
    assert "IR triage: the switch changes the generated code of 0 of 1 ops" in result.stdout.str()


def test_interpreter_run_times_smoke_and_gates_on_the_gpu_level(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(tilecamp=TILE_CAMPAIGN)
    root = tmp_path / "root"
    result = pytester.runpytest_subprocess("tilecamp.py", "--ab-rounds", "1", "--ab-root", str(root), *FAST)
    result.assert_outcomes(passed=2)
    assert CHANGED in result.stdout.str()
    for side in ("A", "B"):
        cell = root / f"r1_{side}" / "dot"
        # The interpreter timed the smoke shape; round 1's compile-only capture compiled the core one.
        assert json.loads((cell / IDENTITY_FILE).read_text())["bench_level"] == "smoke"
        assert [json.loads(line)["shape"] for line in (cell / "results.jsonl").read_text().splitlines()] == ["n=16"]
