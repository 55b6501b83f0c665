"""What a fork server's bytecode folder saves (``child/bytecode.py``): one server's start, three ways, in one run.

    python benchmarks/probes/server_bytecode.py [--imports '!peft,liger_kernel.ops'] [--trials 1] [--folder DIR]

Each trial starts one side's fork server as a session does (``ForkServers``, this interpreter, this environment)
three times: ``ABBENCH_BYTECODE=off`` (Python as it finds the packages), then with a bytecode folder that starts
empty (``cold``: the server compiles its distributions' sources there beside its imports on 8 cores or more), then
with that folder as the first start left it (``warm``).  Before ``off`` and ``cold`` the page cache is dropped where
this process may (root; ``--keep-page-cache`` to leave it), so those two read the packages from disk as a fresh
machine does; ``warm`` is not dropped (a re-run on one machine).  Prints each start's seconds (the server's own
``import_s``: its bytecode, imports and Triton's key) and bytecode line, then the medians and cold/off, warm/off.

The folder only comes into play where torch keeps no bytecode beside its sources (an image built with
``PYTHONDONTWRITEBYTECODE=1`` or ``pip install --no-compile``, as on the GPU machines); elsewhere all three are
Python as it finds it, unless ``--folder`` names one (``ABBENCH_BYTECODE=DIR``: used whatever torch keeps).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from pytest_abbench.spawn.forkserver import ForkServers

WAYS = ("off", "cold", "warm")


def drop_page_cache() -> str:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "page cache dropped"
    except OSError as exc:
        return f"page cache kept ({exc.strerror or exc})"


def start(imports: tuple[str, ...], env: dict[str, str], folder: Path) -> tuple[float, str]:
    """One server started and closed: its import seconds and its bytecode line."""
    servers = ForkServers(folder / "servers")
    try:
        server = servers.server(sys.executable, env, "side-A", imports)
        log = (folder / "servers" / "side-A-1.log").read_text()
        line = next((x for x in log.splitlines() if "bytecode" in x), "(no bytecode line)")
        return server.import_s, line
    finally:
        servers.close()
        shutil.rmtree(folder / "servers", ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--imports", default="", help="comma-separated SERVER_IMPORTS ('!name' keeps name out)")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--folder", type=Path, help="ABBENCH_BYTECODE for cold and warm (default: the user's cache)")
    parser.add_argument("--keep-page-cache", action="store_true")
    args = parser.parse_args()
    imports = tuple(m for m in args.imports.split(",") if m)
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for trial in range(args.trials):
            cache = work / f"xdg-{trial}"  # an empty user cache per trial: its bytecode folder starts empty
            bytecode = args.folder / f"trial-{trial}" if args.folder else None
            for way in WAYS:
                env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
                env["ABBENCH_BYTECODE"] = "off" if way == "off" else str(bytecode) if bytecode else ""
                if not env["ABBENCH_BYTECODE"]:
                    del env["ABBENCH_BYTECODE"]
                dropped = "page cache as it is" if way == "warm" or args.keep_page_cache else drop_page_cache()
                took, line = start(imports, env, work)
                seconds[way].append(took)
                print(f"trial {trial + 1} {way}: {took:.2f} s ({dropped}); {line.removeprefix('[abbench] ')}",
                      flush=True)
    median = {way: statistics.median(values) for way, values in seconds.items()}
    print("median: " + ", ".join(f"{way} {median[way]:.2f} s" for way in WAYS)
          + f"; cold/off {median['cold'] / median['off']:.2f}, warm/off {median['warm'] / median['off']:.2f}")


if __name__ == "__main__":
    main()
