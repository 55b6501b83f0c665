"""What fingerprinting a kernel's compile stages costs a cell: every round-1 cell fingerprints each stage of each
kernel it compiles or loads (``child/ircapture.py``), so a side whose kernels carry megabytes of IR pays it there.

    python benchmarks/probes/ir_fingerprint_cost.py TRITON_CACHE_DIR [...]     # real kernels, e.g. a side's kernel cache
    python benchmarks/probes/ir_fingerprint_cost.py --synthetic --against REV  # side by side with irgate.py at REV

The first prints, per kernel found in the Triton cache folders given, each stage's size and the seconds
``irgate.stage_fingerprint`` took on it, and the total per folder.  The second times this checkout's
``stage_fingerprint`` and the one of git revision REV on about 10 MB of generated TTGIR, LLVM IR and PTX (the
best of 3 runs each, in turn) and says whether the two agree.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Callable

from pytest_abbench.checks import irgate

Fingerprint = Callable[[str, str], str]


def real_kernels(folders: list[Path]) -> None:
    for folder in folders:
        total_s, total_mb = 0.0, 0.0
        for path in sorted(folder.rglob("*")):
            stage = path.suffix[1:]
            if stage not in irgate.STAGES or not path.is_file():
                continue
            text = path.read_text()
            start = time.perf_counter()
            irgate.stage_fingerprint(stage, text)
            took = time.perf_counter() - start
            total_s, total_mb = total_s + took, total_mb + len(text) / 1e6
            print(f"{path.relative_to(folder)}: {len(text) / 1e6:.2f} MB in {took * 1e3:.0f} ms")
        print(f"== {folder}: {total_mb:.1f} MB of IR fingerprinted in {total_s:.2f} s")


def irgate_at(revision: str) -> ModuleType:
    """``pytest_abbench/checks/irgate.py`` as it was at ``revision``, loaded as a module of its own."""
    repo = Path(__file__).resolve().parents[2]
    source = subprocess.run(["git", "show", f"{revision}:pytest_abbench/checks/irgate.py"], cwd=repo, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "irgate_at_revision.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("irgate_at_revision", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def synthetic() -> dict[str, str]:
    """About 10 MB per stage, each line in the form that stage's kernels have most (a location, a !dbg)."""
    return {
        "ttgir": "\n".join(f"    %{i} = ttg.convert_layout %{i - 1} : tensor<64x1024xf32, #blocked{i % 7}> -> "
                           f"tensor<64x1024xf32, #blocked{(i + 1) % 7}> loc(#loc{i % 300})" for i in range(100_000)),
        "llir": "\n".join(f"  %{i} = fadd float %{i - 1}, %{i - 2}, !dbg !{i % 300}" for i in range(200_000)),
        "ptx": "\n".join(f"\tadd.f32 \t%f{i}, %f{i - 1}, %f{i - 2};" for i in range(300_000)),
    }


def best_of(fingerprint: Fingerprint, stage: str, text: str, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fingerprint(stage, text)
        times.append(time.perf_counter() - start)
    return min(times)


def side_by_side(revision: str) -> None:
    earlier = irgate_at(revision)
    for stage, text in synthetic().items():
        then = best_of(earlier.stage_fingerprint, stage, text)
        now = best_of(irgate.stage_fingerprint, stage, text)
        same = earlier.stage_fingerprint(stage, text) == irgate.stage_fingerprint(stage, text)
        print(f"{stage} {len(text) / 1e6:.1f} MB: {revision} {then:.3f} s, this checkout {now:.3f} s, "
              f"{then / now:.1f}x; fingerprints {'agree' if same else 'differ'}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--synthetic", action="store_true", help="generated IR instead of a cache folder")
    parser.add_argument("--against", metavar="REV", help="with --synthetic: time irgate.py at REV as well")
    args = parser.parse_args(argv)
    if args.synthetic:
        if args.against is None:
            parser.error("--synthetic needs --against REV")
        side_by_side(args.against)
    elif args.folders:
        real_kernels(args.folders)
    else:
        parser.error("give Triton cache folders, or --synthetic --against REV")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
