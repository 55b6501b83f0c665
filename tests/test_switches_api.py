"""pytest_abbench.campaign.switches against the installed Triton: pass names, cache keys, and a real pipeline edit.

- An unknown pass name fails in the setup function, before any kernel
  compiles, naming the pass and the Triton version (and close names); a name
  in several groups of bindings asks for its group.
- The no-argument call (Triton 3.7+'s cache-key question) returns a
  ``(key, hash)`` pair that names the hook; different passes, stages, names or
  versions give different keys, the same hook the same key in every process.
- A second, different hook in one process is an error, not a silent replacement.
- ``without_pass("remove_layout_conversions")`` in a campaign, compiled for
  cuda:90 by the IR-only cell child, leaves more ``convert_layout`` ops than
  side A.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from helpers import ROWSUM_LAYOUT_CAMPAIGN, convert_layouts

from pytest_abbench.core.cellconfig import CHILD_MODULE, CellConfig
from pytest_abbench.core.layout import ir_dir
from pytest_abbench.campaign.switches import stages_hook, without_pass


@pytest.fixture
def knobs(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Triton's knobs, with the stages hook put back as it was after the test."""
    from triton import knobs

    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", None)
    module: ModuleType = knobs
    return module


def test_importing_the_api_imports_neither_torch_nor_triton() -> None:
    code = ("import sys, pytest_abbench.campaign.switches, pytest_abbench.core.tritoncompat; "
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_unknown_pass_is_an_error_in_setup_naming_pass_and_version(knobs: ModuleType) -> None:
    import triton

    setup = without_pass("remove_layout_conversion")  # one letter short
    assert knobs.runtime.add_stages_inspection_hook is None  # nothing resolved before setup runs
    with pytest.raises(RuntimeError) as raised:
        setup()
    message = str(raised.value)
    assert f"Triton {triton.__version__} has no pass 'remove_layout_conversion'" in message
    assert "(no add_remove_layout_conversion in any group of triton._C.libtriton[.<backend>].passes: " in message
    assert ", nvidia.ttnvgpuir, " in message and ", ttgpuir" in message
    assert re.search(r"close: .*\bremove_layout_conversions\b", message), message
    assert knobs.runtime.add_stages_inspection_hook is None

    with pytest.raises(RuntimeError, match=rf"Triton {re.escape(triton.__version__)} has no pass group 'nope'"):
        without_pass("nope.remove_layout_conversions")()
    # accelerate_matmul is a core TTGPU pass and an AMD one: the name must say which.
    with pytest.raises(RuntimeError, match=r"pass 'accelerate_matmul' is in several groups of Triton .*: "
                                           r"amd\.ttgpuir\.accelerate_matmul, ttgpuir\.accelerate_matmul; name one"):
        without_pass("accelerate_matmul")()


def test_no_argument_call_returns_a_key_and_hash_naming_the_hook(knobs: ModuleType) -> None:
    without_pass("remove_layout_conversions")()
    hook = knobs.runtime.add_stages_inspection_hook
    pair = hook()
    assert isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(p, str) and p for p in pair)
    key, digest = pair
    assert key == "pytest-abbench:without_pass:ttgir:ttgpuir.remove_layout_conversions:v1"
    assert hook() == pair  # stable; the qualified spelling and the add_ prefix name the same pass
    for same in (without_pass("ttgpuir.remove_layout_conversions"), without_pass("add_remove_layout_conversions")):
        knobs.runtime.add_stages_inspection_hook = None
        same()
        assert knobs.runtime.add_stages_inspection_hook() == pair


def test_different_hooks_get_different_keys(knobs: ModuleType) -> None:
    pairs = []
    for setup in (without_pass("remove_layout_conversions"), without_pass("remove_layout_conversions", stage="ttir"),
                  without_pass("ttgpuir.accelerate_matmul"), without_pass("ttgpuir.prefetch")):
        knobs.runtime.add_stages_inspection_hook = None
        setup()
        pairs.append(knobs.runtime.add_stages_inspection_hook())
    pairs += [stages_hook(lambda call: None, name="mine")(), stages_hook(lambda call: None, name="mine", version=2)(),
              stages_hook(lambda call: None, name="other")()]
    assert len({key for key, _ in pairs}) == len({digest for _, digest in pairs}) == len(pairs), pairs


def test_a_second_different_hook_is_an_error(knobs: ModuleType) -> None:
    without_pass("remove_layout_conversions")()
    without_pass("remove_layout_conversions")()  # the same switch twice is the same hook
    with pytest.raises(RuntimeError, match=r"a stages hook is already installed \(StagesHook\('pytest-abbench:"
                                           r"without_pass:ttgir:ttgpuir.remove_layout_conversions:v1'\)\)"):
        without_pass("ttgpuir.prefetch")()


def test_stages_hook_hands_the_edit_the_backends_call(knobs: ModuleType) -> None:
    from triton.backends.compiler import Language

    seen = []
    hook = stages_hook(lambda call: seen.append((call.is_triton_language, call.capability, sorted(call.stages))),
                       name="probe")
    assert hook("backend", {"ttgir": None, "ttir": None}, "options", Language.GLUON, 90) is None
    assert seen == [(False, 90, ["ttgir", "ttir"])]


def compile_side(folder: Path, source: str, op: str, side: str) -> Path:
    """The IR-only cell child for one side of ``source``, as --ab-ir-only runs it; its IR folder."""
    campaign = folder / "apicamp.py"
    campaign.write_text(source)
    out = folder / f"cell-{op}-{side}"
    config = CellConfig(campaign=campaign, op=op, round_no=1, side=side, role=side, out=out,
                        backend="interpreter", timer="wall", level="smoke", ir_target="cuda:90", ir_only=True)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "MLIR_ENABLE_DUMP", "MLIR_DUMP_PATH")}
    env["TRITON_CACHE_DIR"] = str(folder / f"triton-cache-{op}-{side}")
    env["ABBENCH_PASS_DUMP"] = "0"  # the op counts are the point here
    done = subprocess.run([sys.executable, "-m", CHILD_MODULE, *config.to_argv()], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return ir_dir(out)



ROWSUM_API_CAMPAIGN = ROWSUM_LAYOUT_CAMPAIGN.replace(
    "from _kernels.switches import skip_remove_layout_conversions",
    "from pytest_abbench.campaign.switches import without_pass").replace(
    "Switch(setup_b=skip_remove_layout_conversions)", 'Switch(setup_b=without_pass("remove_layout_conversions"))')


@pytest.mark.slow
def test_without_pass_removes_the_pass_from_real_compiles(tmp_path: Path) -> None:
    assert "without_pass(" in ROWSUM_API_CAMPAIGN
    a = convert_layouts(compile_side(tmp_path, ROWSUM_API_CAMPAIGN, "rowsum", "A"))
    b = convert_layouts(compile_side(tmp_path, ROWSUM_API_CAMPAIGN, "rowsum", "B"))
    assert b > a, (a, b)

