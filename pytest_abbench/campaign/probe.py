"""The probe process an adapter reads a file with at collection: pytest's process never imports the file itself.

A probe is ``python -m <adapter module> ...`` that imports (or collects) the file as its cells will and writes a
JSON answer to a file it is given; what it prints is the user's file's business and is kept only for an error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from pytest_abbench.campaign.model import CampaignError
from pytest_abbench.core import envnames

PROBE_SECONDS = 120.0  # starting Python and importing torch and Triton, on top of the file's own --ab-import-timeout
PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])  # the folder holding pytest_abbench/, for another Python


def campaign_env(base: Mapping[str, str], interpreter: bool, ir_target: str | None) -> dict[str, str]:
    """``base`` as a process that imports a campaign needs it, a cell's or a probe's: Triton's interpreter on
    or off, the IR target the stand-in driver answers for (``core/standin_driver.py``), and this copy of the
    package first on the path (a side's interpreter may have another installed)."""
    env = dict(base)
    if interpreter:
        env[envnames.TRITON_INTERPRET] = "1"
    else:
        env.pop(envnames.TRITON_INTERPRET, None)
    if ir_target:
        env[envnames.ABBENCH_IR_TARGET] = ir_target
    env[envnames.PYTHONPATH] = os.pathsep.join(p for p in (PACKAGE_PARENT, env.get(envnames.PYTHONPATH, "")) if p)
    return env


def run_probe(path: Path, argv_for: Callable[[Path], list[str]], what: str, import_timeout_s: float,
              interpreter: bool, cwd: Path | None = None, ir_target: str | None = None) -> dict[str, Any]:
    """Run ``sys.executable`` with ``argv_for(answer_file)`` and return the answer; ``what`` names the probe's work in
    errors ("reading its perf_report functions").  ``interpreter``: under Triton's interpreter (no GPU here), whose
    driver queries answer for ``ir_target`` (``core/standin_driver.py``)."""
    env = campaign_env(os.environ, interpreter, ir_target)
    limit = import_timeout_s + PROBE_SECONDS
    with tempfile.TemporaryDirectory(prefix="abbench-probe-") as folder:
        out = Path(folder) / "answer.json"
        try:
            done = subprocess.run([sys.executable, *argv_for(out)], env=env, capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=limit, cwd=str(cwd) if cwd else None)
        except subprocess.TimeoutExpired:
            raise CampaignError(f"{path}: {what} took over {limit:g} s (--ab-import-timeout)") from None
        try:
            answer = json.loads(out.read_text())
        except (OSError, ValueError):
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise CampaignError(f"{path}: the process {what} exited {done.returncode} without an answer:\n"
                                f"{tail}") from None
    if not isinstance(answer, dict):
        raise CampaignError(f"{path}: the process {what} wrote {type(answer).__name__}, not an answer")
    if "error" in answer:
        raise CampaignError(str(answer["error"]))
    return answer
