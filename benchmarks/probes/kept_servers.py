"""What ``--ab-keep-servers`` saves a re-run: sessions whose fork servers import, against sessions that take them.

    python benchmarks/probes/kept_servers.py [--rounds 2] [--module torch._dynamo] [--repeats 3]

One generated campaign (one op, one tiny shape, ``--ab-spawn fork``, Triton's
interpreter without a GPU) that names ``--module`` in ``SERVER_IMPORTS``, as
campaigns/liger.py names ``liger_kernel.ops`` (whose import, on a GPU host, is
mostly ``torch._dynamo``).  A first session warms the kernel cache.  Then, per
repeat, in one folder and one environment, the order swapped each time:
``fresh``: the kept servers are stopped first (``abbench servers --stop``), so
the session's two servers import torch, Triton and the module, as every
session did before; ``kept``: the session takes the servers the last one kept.
Both keep theirs (``--ab-keep-servers 60``).  Prints each session's wall time
(around pytest), the cells' start-up (the first cell of each side waits for its
server's imports there) and the timing share of the cells' time, then medians
side by side and their ratio.  Kept servers wait in a private temporary folder
(``$ABBENCH_SERVER_DIR``) and are stopped at the end.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLUGIN = () if any(ep.value == "pytest_abbench.plugin" for ep in importlib.metadata.entry_points(group="pytest11")) \
    else ("-p", "pytest_abbench.plugin")

CAMPAIGN = '''
import torch
from pytest_abbench.campaign.model import Case, Op, Switch

SERVER_IMPORTS = ({module!r},)


def build(shape, device):
    x = torch.ones(shape["n"], device=device)
    return Case(run=lambda: x * 2, expected=lambda: torch.full((shape["n"],), 2.0, device=device))

OPS = [Op("op", build=build, shapes={{"smoke": [{{"n": 4}}]}})]
SWITCH = Switch(env_b={{"ABBENCH_BENCH_SWITCH": "1"}})
'''


def session(folder: Path, env: dict[str, str], name: str, rounds: int) -> dict[str, float]:
    """One session on a root of its own: wall, the cells' start-up and time, timing share."""
    root = folder / f"root-{name}"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", *PLUGIN, "c.py", "--ab-rounds", str(rounds),
                           "--ab-spawn", "fork", "--ab-keep-servers", "60", "--ab-ir-target", "none",
                           "--ab-samples", "1", "--ab-level", "smoke", "--ab-root", str(root), "-p", "no:cacheprovider",
                           "-q"], cwd=folder, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{name}: pytest exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    spent = json.loads((root / "report.json").read_text())["time_spent"]
    cells = spent["cells_s"] or 1.0
    return {"wall_s": wall, "startup_s": spent["startup_s"], "cells_s": spent["cells_s"],
            "timing_pct": 100 * spent["timing_s"] / cells}


def stop_kept(env: dict[str, str], folder: Path) -> None:
    subprocess.run([sys.executable, "-m", "pytest_abbench.cli", "servers", "--stop"], env=env, cwd=folder,
                   capture_output=True, check=True)
    servers = Path(env["ABBENCH_SERVER_DIR"])
    deadline = time.monotonic() + 10
    while list(servers.glob("*.sock")) and time.monotonic() < deadline:
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--module", default="torch._dynamo")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    found: dict[str, list[dict[str, float]]] = {"fresh": [], "kept": []}
    with tempfile.TemporaryDirectory(prefix="abks-bench-") as tmp, \
            tempfile.TemporaryDirectory(prefix="abks-") as kept_folder:
        folder = Path(tmp)
        (folder / "pytest.ini").write_text("[pytest]\n")
        (folder / "c.py").write_text(CAMPAIGN.format(module=args.module))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
               "ABBENCH_HISTORY": "off", "ABBENCH_SERVER_DIR": kept_folder}
        try:
            session(folder, env, "warm-up", args.rounds)
            for repeat in range(args.repeats):
                for kind in (("fresh", "kept") if repeat % 2 == 0 else ("kept", "fresh")):
                    if kind == "fresh":
                        stop_kept(env, folder)
                    figures = session(folder, env, f"{kind}-{repeat + 1}", args.rounds)
                    found[kind].append(figures)
                    print(f"{kind}-{repeat + 1}: wall {figures['wall_s']:.2f} s, cells {figures['cells_s']:.2f} s "
                          f"(start-up {figures['startup_s']:.2f} s), timing {figures['timing_pct']:.1f}% of the cells'")
        finally:
            stop_kept(env, folder)
    print(f"\n{args.module} in SERVER_IMPORTS, {args.rounds} rounds x 2 sides, {args.repeats} session(s) each, "
          "medians")
    print(f"{'':<26} {'fresh':>9} {'kept':>9} {'kept/fresh':>11}")
    for words, key in (("session wall s", "wall_s"), ("cells' start-up s", "startup_s"), ("cells' time s", "cells_s"),
                       ("timing % of cells' time", "timing_pct")):
        fresh = statistics.median(f[key] for f in found["fresh"])
        kept = statistics.median(f[key] for f in found["kept"])
        print(f"{words:<26} {fresh:9.2f} {kept:9.2f} {kept / fresh if fresh else float('nan'):11.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
