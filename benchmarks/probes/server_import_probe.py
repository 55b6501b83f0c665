"""What a side's fork server spends before it is ready, step by step, in a fresh interpreter (as the server
imports: torch, Triton, the cell modules, then the campaign's SERVER_IMPORTS under the NVML-based CUDA check).

    python3 benchmarks/probes/server_import_probe.py liger_kernel.ops [--importtime-top N]
    python3 benchmarks/probes/server_import_probe.py '!peft' liger_kernel.ops    # peft kept out (UNUSED_IMPORTS)

Then what a server does once it imported them: the modules' versions (``preload.version_of``: a distribution named
after the package is read directly), and one fork probe; and, for comparison, the scan of every installed
distribution that ``version_of`` falls back on (what the server did for a package without ``__version__`` before).

Prints each step's seconds; with ``--importtime-top N``, runs the same imports again under ``python -X importtime``
and prints the N modules with the largest cumulative import time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def steps(modules: list[str]) -> None:
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    started = last = time.monotonic()

    def mark(what: str) -> None:
        nonlocal last
        now = time.monotonic()
        print(f"{what:<40} {now - last:7.3f} s (from start {now - started:7.3f} s)", flush=True)
        last = now

    import torch  # noqa: F401
    mark("import torch")
    import triton  # noqa: F401
    mark("import triton")
    import pytest_abbench.child.measure  # noqa: F401
    mark("import pytest_abbench.child.measure")
    for module in modules:
        if module.startswith("!"):
            sys.modules[module[1:]] = None  # type: ignore[assignment]
            continue
        __import__(module)
        mark(f"import {module}")
    from pytest_abbench.child.preload import version_of

    versions = " ".join(f"{m}=={version_of(m)}" for m in modules if not m.startswith("!"))
    mark(f"versions {versions}"[:40])
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    mark("one fork probe")
    import importlib.metadata

    importlib.metadata.packages_distributions()
    mark("(the scan of every distribution)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*")
    parser.add_argument("--importtime-top", type=int, default=0)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        steps(args.modules)
        return 0
    for run in (1, 2):
        print(f"--- run {run} (a fresh interpreter)", flush=True)
        subprocess.run([sys.executable, __file__, "--one", *args.modules], check=False)
    if args.importtime_top:
        code = "import sys, torch, triton, pytest_abbench.child.measure\n" + "".join(
            f"sys.modules[{m[1:]!r}] = None\n" if m.startswith("!") else f"import {m}\n" for m in args.modules)
        done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                              env={**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"})
        rows = []
        for line in done.stderr.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[1].strip().isdigit():
                rows.append((int(parts[1]), parts[2].rstrip()))
        print(f"--- the {args.importtime_top} largest cumulative import times (us)")
        for cumulative, name in sorted(rows, reverse=True)[:args.importtime_top]:
            print(f"{cumulative:>10} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
