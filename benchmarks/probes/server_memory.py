"""Fork servers' memory when one session runs many switches: how many live at once, and their resident memory.

    python3 benchmarks/probes/server_memory.py [--switches 8] [--rounds 1] [--interval 0.2]

Generates ``--switches`` campaigns, each one op (a Triton copy kernel) and its own
switch variable on side B (it changes no code: ``--ab-allow-no-ir-diff``), and runs them in one pytest
session with ``--ab-spawn fork``: side A has one server for all of them (one
environment), each switch's side B a server of its own.  While it runs, samples
the live servers (processes running the server module, not the cells they fork)
every ``--interval`` seconds: how many, which switch each serves, and the sum of
their resident memory (RSS from /proc).  Prints the peak count and memory, the
mean memory per server, and the session's wall time and exit status.  Runs on a
GPU or, without one, in Triton's interpreter.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pytest_abbench.spawn.forkserver import SERVER_MODULE  # noqa: E402
from pytest_abbench.spawn.strategy import PRESTART_SERVERS  # noqa: E402
from server_imports import PLUGIN  # noqa: E402  (the plugin by entry point, or by name where only on PYTHONPATH)

VARIABLE = "ABBENCH_BENCH_SW"

CAMPAIGN = '''
from pytest_abbench import Case, Op, Switch


def build(shape, device):
    import torch

    from _kernels.copy import copy_prefix

    x = torch.arange(shape["n"], device=device, dtype=torch.float32)
    out = torch.empty_like(x)
    return Case(run=lambda: copy_prefix(x, out, shape["n"]), expected=lambda: x.clone())


OPS = [Op("copy_{k}", build=build, shapes={{"smoke": [{{"n": 1024}}], "core": [{{"n": 1 << 20}}]}})]
SWITCH = Switch(env_b={{"{variable}{k}": "1"}})
'''


def live_servers() -> dict[int, tuple[str, int]]:
    """pid -> (the switch it serves, "A" for side A; its RSS in bytes) for every live server process."""
    def cmdline(pid: str) -> bytes:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""

    found: dict[int, tuple[str, int]] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or SERVER_MODULE.encode() not in cmdline(entry):
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            rss = int(Path(f"/proc/{entry}/statm").read_text().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
        if stat[0] == b"Z" or SERVER_MODULE.encode() in cmdline(stat[1].decode()):
            continue  # a dead one, or a cell the server forked (its cmdline is the server's)
        switch = next((v.split(b"=")[0].decode()[len(VARIABLE):] for v in environ
                       if v.startswith(VARIABLE.encode())), "A")
        found[int(entry)] = (switch, rss)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--switches", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--interval", type=float, default=0.2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="abbench-server-memory-") as tmp:
        folder = Path(tmp)
        (folder / "_kernels").symlink_to(REPO / "campaigns" / "_kernels")
        files = []
        for k in range(1, args.switches + 1):
            (folder / f"switch_{k}.py").write_text(CAMPAIGN.format(k=k, variable=VARIABLE))
            files.append(f"switch_{k}.py")
        command = [sys.executable, "-m", "pytest", *PLUGIN, *files, "--ab-rounds", str(args.rounds),
                   "--ab-spawn", "fork", "--ab-allow-no-ir-diff", "--ab-root", str(folder / "root"),
                   "-p", "no:cacheprovider", "-q"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        started = time.perf_counter()
        session = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
        samples: list[dict[int, tuple[str, int]]] = []
        while session.poll() is None:
            samples.append(live_servers())
            time.sleep(args.interval)
        output = session.stdout.read() if session.stdout else ""
        wall = time.perf_counter() - started
    print(f"{args.switches} switches x {args.rounds} round(s), one session: exit {session.returncode}, "
          f"{wall:.1f} s, {len(samples)} samples")
    print(output.strip().splitlines()[-1] if output.strip() else "(no output)")
    if session.returncode != 0:
        print(output[-4000:])
    busy = [s for s in samples if s]
    if not busy:
        print("no server seen")
        return 1
    peak = max(busy, key=len)
    peak_rss = max(busy, key=lambda s: sum(rss for _, rss in s.values()))
    started_servers = {pid: switch for s in busy for pid, (switch, _) in s.items()}
    mean_rss = sum(rss for s in busy for _, rss in s.values()) / sum(len(s) for s in busy)
    print(f"servers started in all: {len(started_servers)} "
          f"(side A: {sum(1 for w in started_servers.values() if w == 'A')}, "
          f"side B: {sum(1 for w in started_servers.values() if w != 'A')})")
    print(f"most servers alive at once: {len(peak)} (the bound: PRESTART_SERVERS = {PRESTART_SERVERS}); "
          f"serving {sorted(w for w, _ in peak.values())}")
    print(f"peak resident memory of the live servers: {sum(rss for _, rss in peak_rss.values()) / 2**30:.2f} GiB "
          f"({len(peak_rss)} servers); mean per server {mean_rss / 2**20:.0f} MiB")
    print(f"if every server lived to the end: {len(started_servers)} servers, about "
          f"{len(started_servers) * mean_rss / 2**30:.2f} GiB")
    timeline = [(round(i * args.interval, 1), len(s)) for i, s in enumerate(samples)]
    changes = [point for i, point in enumerate(timeline) if i == 0 or point[1] != timeline[i - 1][1]]
    print("live servers over time (s: count): " + ", ".join(f"{t}: {n}" for t, n in changes))
    return 0 if session.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
