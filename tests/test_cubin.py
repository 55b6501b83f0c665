"""Registers and stack frame of a compiled kernel, read from its cubin without a GPU, against what ptxas says.

A real Triton compile for cuda:90 on the CPU (a compile-only subprocess), and ptxas -v, the one that Triton compiles
sm_90 with, on the same PTX: the two must agree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_abbench.core.cubin import CubinError, kernel_resources

COMPILE = textwrap.dedent('''
    import json, sys
    import torch, triton, triton.language as tl
    from pytest_abbench.core import standin_driver
    standin_driver.install("cuda:90")

    @triton.jit
    def kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(y_ptr + offs, tl.exp(x) * x + tl.sqrt(x), mask=offs < n)

    x = torch.rand(4096)
    compiled = kernel.warmup(x, torch.empty_like(x), 4096, BLOCK=1024, grid=(4,))
    out = sys.argv[1]
    open(out + ".cubin", "wb").write(compiled.asm["cubin"])
    open(out + ".ptx", "w").write(compiled.asm["ptx"])
    from triton.backends.nvidia.compiler import get_ptxas  # the ptxas this Triton compiles sm_90 with
    print(json.dumps({"name": compiled.name, "ptxas": get_ptxas(90).path}))
''')


def test_registers_and_frame_match_ptxas(tmp_path: Path) -> None:
    script = tmp_path / "compile.py"  # a file: Triton reads a kernel's source
    script.write_text(COMPILE)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "k")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    ptxas = Path(answer["ptxas"])
    said = subprocess.run([str(ptxas), "-v", "--gpu-name=sm_90a", str(tmp_path / "k.ptx"), "-o",
                           str(tmp_path / "again.cubin")], capture_output=True, text=True).stderr
    used = kernel_resources((tmp_path / "k.cubin").read_bytes(), answer["name"])
    assert f"Used {used.registers} registers" in said, said
    assert f"{used.frame_bytes} bytes stack frame" in said, said
    with pytest.raises(CubinError, match="no symbol 'other'"):
        kernel_resources((tmp_path / "k.cubin").read_bytes(), "other")
    with pytest.raises(CubinError, match="not a 64-bit little-endian ELF"):
        kernel_resources(b"not a cubin", "kernel")
