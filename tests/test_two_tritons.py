"""Two Triton builds as the switch: ``Switch(python_b=...)`` runs side B in an interpreter with Triton 3.8.0.

The second environment is built the cheap way: a venv without pip whose own
site-packages holds only the Triton 3.8.0 wheel (``pip install --no-deps
--target``), and a ``.pth`` line that appends this environment's
site-packages after it, so torch and numpy come from here while its Triton
shadows ours.  Skipped where the wheel is not on this machine or this
environment is not the pinned Triton 3.6.0 on Python 3.11.

- IR-only triage compiles each side with its own Triton and records the
  version with each kernel; the gate compares them: for this dot kernel
  3.6.0 and 3.8.0 emit the same TTGIR, and the code first differs at LLVM IR.
- An interpreter run writes each side's Triton into its identity; the caliber
  check reports the version difference as a note, not a mismatch (exit 0).
"""

from __future__ import annotations

import glob
import importlib.metadata
import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import BUILD_DOT_SOURCE, DOT_SOURCE

from pytest_abbench.core.layout import IDENTITY_FILE

WHEELS = "/opt/pypi/files/triton-3.8.0-cp311-*.whl"
FAST = ("-p", "no:cacheprovider")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not glob.glob(WHEELS), reason=f"no Triton 3.8.0 wheel at {WHEELS}"),
    pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason=f"the wheel at {WHEELS} is for CPython 3.11"),
    pytest.mark.skipif(importlib.metadata.version("triton") != "3.6.0",
                       reason="compares the pinned Triton 3.6.0 (side A, this environment) with 3.8.0"),
]

CAMPAIGN = DOT_SOURCE + BUILD_DOT_SOURCE + '''


OPS = [Op("dot", build=build_dot, shapes={{"smoke": [{{"n": 16}}], "core": [{{"n": 64}}]}})]
SWITCH = Switch(python_b={python_b!r})
'''


@pytest.fixture(scope="module")
def triton_38(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a venv whose Triton is 3.8.0 and whose torch is this environment's."""
    venv = tmp_path_factory.mktemp("triton-3.8.0") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True,
                          capture_output=True, text=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", site,
                    sorted(glob.glob(WHEELS))[-1]], check=True)
    # Appended to sys.path after the venv's own site-packages: its triton shadows the one found here.
    (Path(site) / "zz_base_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    found = subprocess.run([python, "-c", "import torch, triton; print(triton.__version__, torch.__version__)"],
                           check=True, capture_output=True, text=True).stdout.split()
    assert found == ["3.8.0", importlib.metadata.version("torch")]
    return python


def run_campaign(pytester: pytest.Pytester, python_b: Path, root: Path, *args: str) -> pytest.RunResult:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(twotritons=CAMPAIGN.format(python_b=str(python_b)))
    return pytester.runpytest_subprocess("twotritons.py", "--ab-root", str(root), *args, *FAST)


def test_ir_triage_compiles_each_side_with_its_own_triton(pytester: pytest.Pytester, tmp_path: Path,
                                                          triton_38: Path) -> None:
    root = tmp_path / "root"
    result = run_campaign(pytester, triton_38, root, "--ab-ir-only", "--ab-ir-target", "cuda:90")
    result.assert_outcomes(passed=2)
    for side, version in (("A", "3.6.0"), ("B", "3.8.0")):
        [meta] = (root / f"r1_{side}" / "dot" / "ir").rglob("*.meta.json")
        assert json.loads(meta.read_text())["triton"] == version
    gate = json.loads((root / "irgate" / "dot.json").read_text())
    assert gate["state"] == "diff", gate
    # Same TTGIR from both releases; their LLVM lowering differs (getelementptr types, register numbering).
    assert "IR: dot_kernel: triton 3.6.0 -> 3.8.0; first differs at llir (ttgir identical)" in result.stdout.str()


def test_interpreter_run_records_each_sides_triton_and_calibrates(pytester: pytest.Pytester, tmp_path: Path,
                                                                  triton_38: Path) -> None:
    root = tmp_path / "root"
    result = run_campaign(pytester, triton_38, root, "--ab-rounds", "1")
    result.assert_outcomes(passed=2)
    assert result.ret == 0  # the versions differ because the switch says so: not a caliber mismatch
    identities = {side: json.loads((root / f"r1_{side}" / "dot" / IDENTITY_FILE).read_text()) for side in "AB"}
    assert (identities["A"]["triton"], identities["B"]["triton"]) == ("3.6.0", "3.8.0")
    assert identities["B"]["python_executable"] == str(triton_38)
    assert identities["A"]["torch"] == identities["B"]["torch"]
    out = result.stdout.str()
    assert "[caliber note] op=dot triton differs: A='3.6.0' B='3.8.0'" in out and "!!! [caliber]" not in out
    assert "== dot: rounds 1/1, markers clean, caliber ok, IR gate diff" in out
