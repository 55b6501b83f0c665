"""benchmarks/regimes/regime_reference.py on the CPU: its statistics and its line, its burst and steady loops driven by a
stand-in for the H200 (CI has no GPU: the stand-in's clocks, power and reasons are the card's, its windows take no
time), and its dry run in a real subprocess."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from helpers import BENCHMARKS, load_benchmark

from pytest_abbench.core import regimes
from pytest_abbench.report.stats import interval, pct

SCRIPT = BENCHMARKS / "regimes" / "regime_reference.py"


@pytest.fixture(scope="module")
def ref() -> ModuleType:
    return load_benchmark("regime_reference")


def test_pairs_are_matched_by_side_whatever_their_order_and_summarized_as_the_report_does(ref: ModuleType) -> None:
    capped = ref.Reading(sm_clock_mhz=1508.0, power_w=691.0, reasons_mask=0x4, reasons=["sw_power_cap"])
    ms = [("A", 1.00), ("B", 1.02), ("B", 1.03), ("A", 1.00), ("A", 2.00), ("B", 2.05)]  # AB, BA, AB
    run = ref.RegimeRun("steady", 100.0, [ref.Window(side, t, capped) for side, t in ms])
    ratios = run.log_ratios()
    assert ratios == pytest.approx([math.log(1.02), math.log(1.03), math.log(1.025)])
    s = ref.summarize(ratios)
    ci = interval(ratios)
    assert ci is not None and s.ci_pct == pytest.approx((pct(ci[0]), pct(ci[1])))
    assert s.median_pct == pytest.approx(2.5) and s.mean_pct == pytest.approx(pct(sum(ratios) / 3))
    line = ref.regime_line("mm", run)
    assert line.startswith("mm steady: delta B vs A +2.5% median, mean +2.5% [")
    assert "over 3 pairs; A 1508 MHz 691 W cap 100%, B 1508 MHz 691 W cap 100%; A 1.0000 ms/call; 100 ms windows, " \
           "condition met 6/6" in line


class StandInCard:
    """Stands for the H200 under a compute-bound kernel: each window pushes it to its 700 W cap for
    ``cap_reads`` NVML reads (forever when None); in steady windows its clock and power settle after ``settle_at``
    windows at 1508 MHz (A) and 1395 MHz (B).  Windows take no time; sleep advances the clock."""

    def __init__(self, cap_reads: int | None = 2, settle_at: int = 8) -> None:
        self.now, self.capped_for, self.cap_reads, self.settle_at = 0.0, 0, cap_reads, settle_at
        self.windows: dict[str, int] = {"A": 0, "B": 0}
        self.last = "A"

    def sleep(self, s: float) -> None:
        self.now += s

    def clock(self) -> float:
        return self.now

    def window(self, side: str) -> float:
        self.now += 0.1
        self.windows[side] += 1
        self.last = side
        self.capped_for = 10**9 if self.cap_reads is None else self.cap_reads
        return {"A": 1.0, "B": 1.1}[side]

    def read(self) -> Any:
        from regime_reference import Reading

        n = self.windows[self.last]
        settled = {"A": 1508.0, "B": 1395.0}[self.last]
        clock = settled if n >= self.settle_at else 1980.0 - 60.0 * n  # the ramp down to the cap's clock
        if self.capped_for > 0:
            self.capped_for -= 1
            return Reading(sm_clock_mhz=clock, power_w=690.0, reasons_mask=0x4, reasons=["sw_power_cap"])
        return Reading(sm_clock_mhz=1980.0, power_w=150.0, reasons_mask=0, reasons=[])


def test_burst_waits_until_the_cap_is_gone_before_each_window(ref: ModuleType) -> None:
    card = StandInCard(cap_reads=2)
    rig = ref.Rig(window=card.window, read=card.read, max_clock=1980.0, sleep=card.sleep, clock=card.clock)
    run = ref.run_burst(rig, pairs=3, window_ms=4, budget_s=60)
    assert [w.side for w in run.windows] == ["A", "B", "B", "A", "A", "B"]
    assert all(w.condition == regimes.MET for w in run.windows)
    assert ref.summarize(run.log_ratios()).median_pct == pytest.approx(10.0)  # B 1.1 ms against A 1.0 ms
    # A card that never leaves the cap after its first window: each later window waits its bound, is timed
    # anyway, and says so.
    stuck = StandInCard(cap_reads=None)
    rig = ref.Rig(window=stuck.window, read=stuck.read, max_clock=1980.0, sleep=stuck.sleep, clock=stuck.clock)
    run = ref.run_burst(rig, pairs=2, window_ms=4, budget_s=60)
    assert [w.condition for w in run.windows] == [regimes.MET] + [regimes.NOT_MET] * 3
    assert stuck.now >= 3 * regimes.BURST_MAX_WAIT_S
    assert "condition met 1/4" in ref.regime_line("mm", run)


def test_steady_times_each_side_alone_once_it_settled_and_says_when_it_did_not(ref: ModuleType) -> None:
    card = StandInCard(cap_reads=None, settle_at=8)
    rig = ref.Rig(window=card.window, read=card.read, max_clock=1980.0, sleep=card.sleep, clock=card.clock)
    sides: list[str] = []
    window = card.window
    rig.window = lambda side: (sides.append(side), window(side))[1]
    run = ref.run_steady(rig, pairs=4, window_ms=100, block=2)
    assert all(w.condition == regimes.MET for w in run.windows)
    assert run.note.startswith("4 of 4 side blocks of up to 2 windows settled after"), run.note
    assert card.windows["A"] >= 8 + regimes.STEADY_LAST_K - 1  # settling counted the ramp out
    # One side at a time, as its cells run it: A settles and times its block, then B, then B again (BA), then A.
    runs = [side for i, side in enumerate(sides) if i == 0 or sides[i - 1] != side]
    assert runs == ["A", "B", "A"], runs
    assert [w.side for w in run.windows] == ["A", "B"] * 4  # pairs matched across the blocks
    assert run.blocks == [0, 0, 1, 1]
    assert "over 4 pairs in 2 blocks (interval over their means)" in ref.regime_line("mm", run)
    # A block's windows follow one settling: the interval counts the blocks, not the pairs in them.
    by_pairs, by_blocks = ref.summarize([0.1, 0.1, 0.3, 0.3]), ref.summarize([0.1, 0.1, 0.3, 0.3], [0, 0, 1, 1])
    assert by_blocks.blocks == 2 and by_blocks.median_pct == by_pairs.median_pct
    assert by_blocks.ci_pct[1] - by_blocks.ci_pct[0] > 5 * (by_pairs.ci_pct[1] - by_pairs.ci_pct[0])
    assert "A 1508 MHz 690 W cap 100%, B 1395 MHz 690 W cap 100%" in ref.regime_line("mm", run)
    never = StandInCard(cap_reads=None, settle_at=10**6)
    rig = ref.Rig(window=never.window, read=never.read, max_clock=1980.0, sleep=never.sleep, clock=never.clock)
    run = ref.run_steady(rig, pairs=2, window_ms=100)
    assert [w.condition for w in run.windows] == [regimes.NOT_MET] * 4
    assert run.note == (f"0 of 2 side blocks of up to 10 windows settled; the others not after "
                        f"{regimes.STEADY_MAX_S:g} s (timed anyway)")


def test_config_text_is_parsed_or_named(ref: ModuleType) -> None:
    assert ref.parse_config("BM=128, BN=256,BK=64,num_warps=8,num_stages=3") == {
        "BM": 128, "BN": 256, "BK": 64, "num_warps": 8, "num_stages": 3}
    with pytest.raises(SystemExit, match="got 'BN=x' in 'BM=128,BN=x'"):
        ref.parse_config("BM=128,BN=x")


def test_a_roots_autotune_record_gives_the_config_its_cells_ran(ref: ModuleType, tmp_path: Path) -> None:
    import json

    from pytest_abbench.child.autotune_candidates import config_to_dict

    class Config:  # the fields of triton.Config that the record keeps
        kwargs, num_warps, num_stages, num_ctas, maxnreg = {"BM": 128, "BN": 256, "BK": 64}, 8, 3, 1, None

    record = tmp_path / "mm.json"
    entry = {"kernel": "_kernels.gemm:mm_kernel", "config": config_to_dict(Config())}
    record.write_text(json.dumps({"schema": 1, "entries": [
        {**entry, "key": ["1024", "1024", "1024", "torch.bfloat16", "torch.bfloat16", "torch.bfloat16"]},
        {**entry, "key": ["4096", "4096", "4096", "torch.bfloat16", "torch.bfloat16", "torch.bfloat16"]}]}))
    assert ref.config_from_record(record) == {"BM": 128, "BN": 256, "BK": 64, "num_warps": 8, "num_stages": 3,
                                              "num_ctas": 1}
    record.write_text(json.dumps({"schema": 1, "entries": []}))
    with pytest.raises(SystemExit, match="no mm_kernel entry for M=N=K=4096 among 0 entries"):
        ref.config_from_record(record)


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    """The script in a real process, the package on its path."""
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parent.parent)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120)


def test_the_dry_run_prints_the_plan_in_a_real_process_without_a_gpu() -> None:
    done = run_script("--dry-run", "--regimes", "steady", "--pairs", "10")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "# mm 4096x4096x4096 bf16 (switch): regimes steady, 10 pairs each, windows steady 50 ms; config side A "
        "autotuned",
        "# dry run: 2 JIT functions of _kernels/gemm.py mm_kernel (4 autotune configs); no GPU touched"]
    ln = run_script("--dry-run", "--op", "layer_norm")
    assert ln.returncode == 0, ln.stderr
    assert ln.stdout.splitlines() == [
        "# layer_norm 8192x4096 bf16 (ATen vs Triton): regimes burst, steady, 40 pairs each, windows burst 4 ms, "
        "steady 50 ms",
        "# dry run: ATen against _kernels/layer_norm.py layer_norm_kernel; no GPU touched"]
    bad = run_script("--regimes", "idle")
    assert bad.returncode == 2 and "--regimes takes burst, steady (got 'idle')" in bad.stderr
