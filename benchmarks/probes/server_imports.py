"""What ``SERVER_IMPORTS`` saves: one campaign whose cells import a slow module, with and without it.

    python benchmarks/probes/server_imports.py [--rounds 3] [--module torch._dynamo] [--repeats 1]

Runs two pytest sessions of one generated campaign (one op, one tiny shape,
``--ab-spawn fork``, Triton's interpreter without a GPU): the campaign imports
``--module`` at its top, as a library campaign imports its library, and the
second session's campaign also names it in ``SERVER_IMPORTS``.  ``torch._dynamo``
(what a campaign whose reference uses ``torch.compile`` loads; present wherever
torch is) takes about 1.2 s to import on top of torch, warm, on this project's
CPU machine.  Prints, per session, each cell's start-up (spawn to ready to
measure: the campaign's import is in it) and elapsed time, then both sessions
side by side.  ``--repeats N`` runs the pair N times, the order swapped each
time.  The first cell of each side also waits for its server's own imports:
they count in its elapsed time.  A module the servers refuse (one whose import
initialises CUDA: ``--module flag_gems`` on a GPU) is named by the session's
line, printed here; then both sessions import it in every cell.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pytest_abbench.core.layout import TIMING_FILE, CellKey, RootLayout  # noqa: E402
from pytest_abbench.core.cellfiles import read_timing  # noqa: E402
from pytest_abbench.core.status import read_status  # noqa: E402

# The plugin loads through its pytest11 entry point where the package is installed; on a machine that only has it on
# PYTHONPATH (the GPU machines), the session loads it by name.
PLUGIN = () if any(ep.value == "pytest_abbench.plugin" for ep in importlib.metadata.entry_points(group="pytest11")) \
    else ("-p", "pytest_abbench.plugin")

CAMPAIGN = '''
import {module}
import torch
from pytest_abbench.campaign.model import Case, Op, Switch
{server_imports}


def build(shape, device):
    x = torch.ones(shape["n"], device=device)
    return Case(run=lambda: x * 2, expected=lambda: torch.full((shape["n"],), 2.0, device=device))

OPS = [Op("op", build=build, shapes={{"smoke": [{{"n": 4}}]}})]
SWITCH = Switch(env_b={{"ABBENCH_BENCH_SWITCH": "1"}})
'''


def run_session(folder: Path, name: str, module: str, server_imports: bool, rounds: int) -> tuple[Path, float]:
    """One session of the campaign; its root and wall time."""
    campaign = folder / f"{name}.py"
    campaign.write_text(CAMPAIGN.format(module=module,
                                        server_imports=f"SERVER_IMPORTS = ({module!r},)" if server_imports else ""))
    root = folder / f"root-{name}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
           "ABBENCH_HISTORY": "off"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", *PLUGIN, campaign.name, "--ab-rounds", str(rounds),
                           "--ab-spawn", "fork", "--ab-ir-target", "none", "--ab-samples", "1", "--ab-level", "smoke",
                           "--ab-root", str(root), "-p", "no:cacheprovider", "-q"],
                          cwd=folder, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{name}: pytest exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    for line in done.stdout.splitlines():
        if "(SERVER_IMPORTS)" in line:  # a module the servers refused, or could not import
            print(f"{name}: {line}")
    return root, wall


def cells(root: Path) -> list[tuple[str, float, float]]:
    """(cell, start-up s, elapsed s) in the order the cells ran."""
    layout = RootLayout(root)
    out = []
    for row in read_status(root):
        timing = read_timing(layout.cell(CellKey(row.round, row.op, row.side)) / TIMING_FILE)
        out.append((f"r{row.round}-{row.side}", float(timing["startup_s"]), row.elapsed_s))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--module", default="torch._dynamo")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    found: dict[bool, list[tuple[str, float, float]]] = {False: [], True: []}
    walls: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="abbench-server-imports-") as tmp:
        folder = Path(tmp)
        (folder / "pytest.ini").write_text("[pytest]\n")
        for repeat in range(args.repeats):
            for server_imports in ((False, True) if repeat % 2 == 0 else (True, False)):
                name = f"{'with' if server_imports else 'without'}_{repeat + 1}"
                root, wall = run_session(folder, name, args.module, server_imports, args.rounds)
                found[server_imports] += cells(root)
                walls[server_imports].append(wall)
                print(f"{name}: SERVER_IMPORTS {'= (' + repr(args.module) + ',)' if server_imports else 'unset'}, "
                      f"session wall {wall:.1f} s")
                for cell, startup, elapsed in cells(root):
                    print(f"  {cell:<6} start-up {startup:6.2f} s  elapsed {elapsed:6.2f} s")
    print(f"\n{args.module}, {args.rounds} rounds x 2 sides, {args.repeats} session(s) each, --ab-spawn fork")
    print(f"{'':<28} {'without':>9} {'with':>9}")
    for words, pick in (("cell start-up, median s", lambda c: statistics.median(x[1] for x in c)),
                        ("cell start-up, sum s", lambda c: sum(x[1] for x in c)),
                        ("cell elapsed, sum s", lambda c: sum(x[2] for x in c))):
        print(f"{words:<28} {pick(found[False]):9.2f} {pick(found[True]):9.2f}")
    print(f"{'session wall, mean s':<28} {statistics.mean(walls[False]):9.2f} {statistics.mean(walls[True]):9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
