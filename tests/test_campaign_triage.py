"""IR triage on the repository's own campaigns, compiled for cuda:90 on the CPU (nothing runs on a GPU).

- The README's laptop line, as written there (run on one campaign file to
  keep it cheap), reports ``router_gemm`` changed under its switch,
  DISABLE_MMA_V3=1: at the GPU's shapes its 64-row tile is a Hopper
  warpgroup MMA on side A only.  The smoke shapes (a 16-row tile) would say
  "no change"; the gate line says which level it compiled.
- ``mm`` under DISABLE_MMA_V3=1 names the first pass whose output differs:
  TritonGPUAccelerateMatmul.  At the default level (core; one compile per
  side, about as cheap as smoke here).
- ``topk`` under its layout switch names the pass side B leaves out.  At
  ``--ab-level smoke``: at core, side B without layout cleanup compiles for
  many minutes (docs/triton-versions.md), and its smoke kernel already shows
  the change and the pass.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def readme_laptop_line() -> list[str]:
    """The README's laptop triage command, without its comment."""
    for line in (REPO / "README.md").read_text().splitlines():
        if "laptop triage" in line:
            return shlex.split(line.split("#")[0])
    raise AssertionError("README.md has no 'laptop triage' line")


def run_pytest(argv: list[str], root: Path) -> str:
    """``argv`` (a ``pytest ...`` command line) run in the repository root, as a user would; its output.  Its
    run is recorded in a history file beside ``root``, not in the checkout's ``.abbench/``."""
    assert argv[0] == "pytest", argv
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TRITON_", "MLIR_", "ABBENCH_"))}
    done = subprocess.run([sys.executable, "-m", "pytest", *argv[1:], "--ab-root", str(root), "-p", "no:cacheprovider",
                           "--ab-history", str(root.parent / "history.sqlite")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert (root.parent / "history.sqlite").is_file(), done.stdout[-4000:]  # recorded there, not in the checkout
    return done.stdout


@pytest.mark.slow
def test_the_readme_laptop_line_reports_router_gemm_changed(tmp_path: Path) -> None:
    argv = readme_laptop_line()
    assert "campaigns" in argv and "--ab-ir-only" in argv, argv
    out = run_pytest([str(REPO / "campaigns/router_gemm.py") if a == "campaigns" else a for a in argv], tmp_path)
    assert "IR triage: the switch changes the generated code of 1 of 2 ops: router_gemm (worth GPU time)" in out
    assert re.search(r"IR: router_gemm_kernel: .*warp_group_dot [1-9]\d* -> 0 \(-\d+\)", out), out
    assert "== router_gemm: rounds 0/1, markers clean, caliber not checked (nothing timed), " \
           "IR gate diff (compiled at core for cuda:90)" in out


@pytest.mark.slow
def test_mm_names_accelerate_matmul_as_the_first_differing_pass(tmp_path: Path) -> None:
    out = run_pytest(["pytest", "campaigns/mm.py", "--ab-ir-only", "--ab-ir-target", "cuda:90"], tmp_path)
    assert re.search(r"IR: mm_kernel: .*warp_group_dot 1 -> 0 \(-1\).*; "
                     r"first differs at ttgir \(ttir identical\), after TritonGPUAccelerateMatmul$", out, re.M), out
    # The resources beside it, from the cuda:90 cubins compiled on this CPU: registers, and the MMA change as such.
    assert re.search(r"IR: mm_kernel: .*, regs \d+ -> \d+, .*mma v3 -> v2;", out), out


@pytest.mark.slow
def test_topk_names_the_layout_pass_side_b_leaves_out(tmp_path: Path) -> None:
    # Smoke, not core: topk's side B without layout cleanup compiles for many minutes at core.
    out = run_pytest(["pytest", "campaigns/topk.py", "--ab-ir-only", "--ab-ir-target", "cuda:90",
                      "--ab-level", "smoke"], tmp_path)
    assert "IR gate diff (compiled at smoke for cuda:90)" in out
    assert re.search(r"IR: topk_rows_kernel: convert_layout (\d+) -> (\d+) \(\+\d+\), regs \d+ -> \d+[^;]*; first "
                     r"differs at ttgir "
                     r"\(ttir identical\), after \w+ \(only side A runs TritonGPURemoveLayoutConversions\)$",
                     out, re.M), out
