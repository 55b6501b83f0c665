"""campaigns/_kernels/switches.py against the installed Triton: both hook calling conventions, real TTGIR.

- The no-argument call (how Triton 3.7+ asks a stages hook for its cache-key
  part) returns the same ``(key, hash)`` pair of strings every time.
- A Triton without the pass or without the stages-hook knob (before 3.6), or
  a pipeline that no longer calls the pass where the switch patches it, is an
  error naming the Triton version, not a switch that silently changes nothing.
- A tiny row-sum kernel compiled for cuda:90 on the CPU (the IR-only cell
  child, as ``--ab-ir-only`` runs it) keeps more ``convert_layout`` ops with
  the switch than without: the five-argument call really edits the pipeline.
- On Triton 3.7+ the hook's cache-key part gives the switched kernel its own
  entry, so side B still gets its own TTGIR when both sides share one
  TRITON_CACHE_DIR (on 3.6 it would be served side A's binary).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from helpers import ROWSUM_LAYOUT_CAMPAIGN, convert_layouts

from pytest_abbench.checks import irgate
from pytest_abbench.core.cellconfig import CHILD_MODULE, CellConfig
from pytest_abbench.core.layout import ir_dir

CAMPAIGNS = Path(__file__).resolve().parents[1] / "campaigns"

SWITCH_CAMPAIGN = ROWSUM_LAYOUT_CAMPAIGN


def load_switches() -> ModuleType:
    spec = importlib.util.spec_from_file_location("abbench_test_switches", CAMPAIGNS / "_kernels" / "switches.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def knobs(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Triton's knobs, with the stages hook put back as it was after the test."""
    from triton import knobs

    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", None)
    module: ModuleType = knobs
    return module


def triton_minor() -> tuple[int, int]:
    import triton

    major, minor = re.match(r"(\d+)\.(\d+)", triton.__version__).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


def compile_side(folder: Path, side: str, cache: Path) -> Path:
    """The IR-only cell child for ``side`` of SWITCH_CAMPAIGN; returns its TTGIR folder."""
    folder.mkdir(parents=True, exist_ok=True)
    campaign = folder / "switchcamp.py"
    campaign.write_text(SWITCH_CAMPAIGN)
    out = folder / f"cell-{side}"
    config = CellConfig(campaign=campaign, op="rowsum", round_no=1, side=side, role=side, out=out,
                        backend="interpreter", timer="wall", level="smoke", ir_target="cuda:90", ir_only=True)
    argv = [sys.executable, "-m", CHILD_MODULE, *config.to_argv()]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(cache)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return ir_dir(out)



def test_no_argument_call_returns_a_stable_key_and_hash(knobs: ModuleType) -> None:
    switches = load_switches()
    switches.skip_remove_layout_conversions()
    hook = knobs.runtime.add_stages_inspection_hook
    first, second = hook(), hook()
    assert first == second
    key, digest = first
    assert isinstance(key, str) and isinstance(digest, str) and key and digest
    assert "remove_layout_conversions" in key
    # Another import of the module (another cell process) gives the same pair.
    knobs.runtime.add_stages_inspection_hook = None
    load_switches().skip_remove_layout_conversions()
    assert knobs.runtime.add_stages_inspection_hook() == first


def test_missing_pass_is_an_error_naming_the_triton_version(knobs: ModuleType,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import triton
    from triton._C.libtriton import passes

    switches = load_switches()
    monkeypatch.delattr(passes.ttgpuir, "add_remove_layout_conversions")
    with pytest.raises(RuntimeError, match=rf"Triton {re.escape(triton.__version__)} has no pass "
                                           r"'ttgpuir\.remove_layout_conversions' "
                                           r"\(no triton\._C\.libtriton\.passes\.ttgpuir\.add_remove_layout_conversions"):
        switches.skip_remove_layout_conversions()
    assert knobs.runtime.add_stages_inspection_hook is None


def test_triton_without_the_stages_hook_knob_is_an_error(knobs: ModuleType,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import triton

    switches = load_switches()
    monkeypatch.delattr(type(knobs.runtime), "add_stages_inspection_hook")  # as in Triton 3.4 and 3.5
    with pytest.raises(RuntimeError, match=rf"Triton {re.escape(triton.__version__)} has no "
                                           r"triton\.knobs\.runtime\.add_stages_inspection_hook"):
        switches.skip_remove_layout_conversions()


def test_pipeline_that_never_calls_the_pass_is_an_error(knobs: ModuleType) -> None:
    import triton
    from triton.backends.compiler import Language

    load_switches().skip_remove_layout_conversions()
    stages = {"ttgir": lambda src, metadata: src}  # a pipeline that does not look the pass up
    knobs.runtime.add_stages_inspection_hook(None, stages, None, Language.TRITON, 90)
    with pytest.raises(RuntimeError, match=rf"Triton {re.escape(triton.__version__)}'s ttgir stage never called "
                                           r"triton\._C\.libtriton\.passes\.ttgpuir\.add_remove_layout_conversions"):
        stages["ttgir"]("mod", {})


@pytest.mark.slow
def test_switch_keeps_layout_conversions_in_real_ttgir(tmp_path: Path) -> None:
    ir_a = compile_side(tmp_path, "A", tmp_path / "cache-A")
    ir_b = compile_side(tmp_path, "B", tmp_path / "cache-B")
    assert convert_layouts(ir_b) > convert_layouts(ir_a)
    decision = irgate.decide("rowsum", ir_a, ir_b)
    assert decision.state == "diff"
    assert re.match(r"rowsum_kernel: convert_layout \d+ -> \d+ \(\+\d+\)", decision.headline()[0])


@pytest.mark.slow
def test_switched_kernel_has_its_own_cache_entry_on_triton_3_7_and_later(tmp_path: Path) -> None:
    if triton_minor() < (3, 7):
        pytest.skip("Triton < 3.7 leaves stages hooks out of its cache key: each side needs its own cache dir")
    shared = tmp_path / "cache"
    ir_a = compile_side(tmp_path, "A", shared)
    ir_b = compile_side(tmp_path, "B", shared)
    assert convert_layouts(ir_b) > convert_layouts(ir_a)
