"""The IR gate: TTGIR normalization and real Triton compilations for cuda:90 on a CPU machine (Triton ships ptxas)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import IR_CAMPAIGN

from pytest_abbench.checks import irgate
from pytest_abbench.core.cellfiles import write_timing
from pytest_abbench.core.layout import TIMING_FILE
from pytest_abbench.core.cellconfig import CHILD_MODULE, CellConfig
from pytest_abbench.checks.irgate import normalize_asm, normalize_llir, normalize_ttgir
from pytest_abbench.core.status import read_status

FAST = ("-p", "no:cacheprovider")


def compile_ir(folder: Path, op: str, env: dict[str, str] | None = None) -> Path:
    """Run the real cell child in IR-only mode for ``op`` of the campaign written into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    campaign = folder / "ircamp.py"
    campaign.write_text(IR_CAMPAIGN)
    out = folder / f"cell-{op}"
    config = CellConfig(campaign=campaign, op=op, round_no=1, side="A", role="A", out=out, backend="interpreter",
                        timer="wall", level="smoke", ir_target="cuda:90", ir_only=True)
    argv = [sys.executable, "-m", CHILD_MODULE, *config.to_argv()]
    child_env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "DISABLE_MMA_V3")}
    child_env.update(env or {}, TRITON_CACHE_DIR=str(folder / "triton-cache"))
    done = subprocess.run(argv, env=child_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return out / "ir"


def test_same_kernel_compiled_in_two_folders_fingerprints_equal(tmp_path: Path) -> None:
    ir_a, ir_b = compile_ir(tmp_path / "one", "dot"), compile_ir(tmp_path / "elsewhere" / "two", "dot")
    raw_a, raw_b = (irgate.ttgir_files(d)[0].read_text() for d in (ir_a, ir_b))
    assert raw_a != raw_b and str(tmp_path / "one") in raw_a  # the locations embed the source path...
    fa = irgate.fingerprint_ttgir(ir_a)
    assert fa is not None and fa == irgate.fingerprint_ttgir(ir_b)  # ...and normalization removes exactly that
    # The LLVM IR and PTX name the source folder too (debug info): their stage fingerprints leave it out.
    assert irgate.decide("dot", ir_a, ir_b).state == "no_diff"


def test_disable_mma_v3_changes_a_dot_kernel_and_not_an_add_kernel(tmp_path: Path) -> None:
    dot_a, dot_b = compile_ir(tmp_path / "a", "dot"), compile_ir(tmp_path / "b", "dot", {"DISABLE_MMA_V3": "1"})
    decision = irgate.decide("dot", dot_a, dot_b)
    assert decision.state == "diff"
    assert "dot_kernel: dot 0 -> 1 (+1), warp_group_dot 1 -> 0 (-1)" in decision.headline()[0]
    add_a, add_b = compile_ir(tmp_path / "a", "add"), compile_ir(tmp_path / "b", "add", {"DISABLE_MMA_V3": "1"})
    assert irgate.decide("add", add_a, add_b).state == "no_diff"

    # One more variant on one side (another specialization) is a different set of code.
    extra = tmp_path / "extra"
    shutil.copytree(add_a, extra)
    variant = irgate.ttgir_files(extra)[0]
    shutil.copy(variant, variant.with_name("w8_s3_other.ttgir"))
    assert irgate.decide("add", add_a, extra).state == "diff"
    assert irgate.decide("add", add_a, tmp_path / "nothing").state == "unavailable"


def test_a_side_that_runs_no_triton_kernel_against_one_that_compiles_is_a_diff(tmp_path: Path) -> None:
    """A kernel-variant switch (side A calls torch, side B a Triton kernel): side A's empty IR folder is what it
    ran, by its own kernel count, so the switch changed the code; with no count it stays unavailable."""
    torch_side = compile_ir(tmp_path / "a", "torchonly")
    assert json.loads((torch_side.parent / "kernel_counts.json").read_text())["compiled"] == 0
    triton_side = compile_ir(tmp_path / "b", "add")
    decision = irgate.decide("variant", torch_side, triton_side)
    assert decision.state == "diff", decision
    assert decision.reason == "side A ran no Triton kernel, side B compiled add_kernel: the switch runs other code"
    assert decision.headline() == [decision.reason]  # the report's IR line
    assert irgate.decide("variant", triton_side, torch_side).reason.startswith("side B ran no Triton kernel")
    # Side B tuned its own keys (side A recorded none), so every variant it captured is an autotune candidate:
    # still the code side B runs, and side A runs none of it (seen on the H200 with FlagGems against ATen).
    for meta in triton_side.rglob("*.meta.json"):
        meta.write_text(json.dumps({**json.loads(meta.read_text()), "autotune_candidate": True}))
    assert irgate.decide("variant", torch_side, triton_side).reason == decision.reason
    # A timed cell on a GPU keeps its counts in its timing file instead (no compile-only process ran).
    (torch_side.parent / "kernel_counts.json").unlink()
    write_timing(torch_side.parent / TIMING_FILE, {"timing_s": 1.0, "kernels_loaded": 0, "kernels_compiled": 0})
    assert irgate.decide("variant", torch_side, triton_side).state == "diff"
    write_timing(torch_side.parent / TIMING_FILE, {"timing_s": 1.0, "kernels_loaded": 2, "kernels_compiled": 0})
    assert irgate.decide("variant", torch_side, triton_side).state == "unavailable"  # it ran some: capture failed
    (torch_side.parent / TIMING_FILE).unlink()  # a cell that left no count: its capture may have failed
    assert irgate.decide("variant", torch_side, triton_side).state == "unavailable"


def test_unchanged_op_skips_later_rounds_changed_and_ir_less_ops_run_all(pytester: pytest.Pytester,
                                                                         tmp_path: Path) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(ircamp=IR_CAMPAIGN)
    root = tmp_path / "root"
    result = pytester.runpytest_subprocess("ircamp.py", "--ab-rounds", "2", "--ab-root", str(root), "-rs", *FAST)
    result.assert_outcomes(passed=10, skipped=2)
    result.stdout.fnmatch_lines(["NO_IR_DIFF [[]2[]] *SWITCH_NO_IR_DIFF: round 1 TTGIR of add is identical*"])
    out = result.stdout.str()
    assert "== add: rounds 1/2" in out and "switch changed no generated code; 1 round skipped (2 cells)" in out
    assert "IR: dot_kernel: dot 0 -> 1 (+1), warp_group_dot 1 -> 0 (-1)" in out
    assert "== torchonly: rounds 2/2" in out and "IR gate unavailable: no TTGIR captured" in out
    statuses = {(r.round, r.op): r.status for r in read_status(root)}
    assert statuses[(2, "add")] == irgate.NO_IR_DIFF
    assert statuses[(2, "dot")] == "ok" and statuses[(2, "torchonly")] == "ok"
    # Round 1's cells compiled their kernels again for cuda:90 after timing: compile, not the process's exit.
    timing = json.loads((root / "r1_A" / "dot" / "cell_timing.json").read_text())
    assert timing["ir_capture_s"] > 0.5 and timing["exit_s"] < timing["ir_capture_s"], timing


def test_rounds_the_ir_gate_skips_whole_print_no_progress_line_of_their_own(pytester: pytest.Pytester,
                                                                           tmp_path: Path) -> None:
    """The session hands the ops the gate decided no_diff to the progress line: round 2 of an op it skips is
    done at once and says nothing (round 3, the last, says the session's end)."""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(ircamp=IR_CAMPAIGN)
    result = pytester.runpytest_subprocess("ircamp.py", "-k", "add", "--ab-rounds", "3",
                                           "--ab-root", str(tmp_path / "root"), *FAST)
    result.assert_outcomes(passed=2, skipped=4)
    out = result.stdout.str()
    assert "abbench: round 1 done" in out and "abbench: round 3 done, 3 of 3 rounds" in out
    assert "abbench: round 2 done" not in out, out


def test_override_runs_every_round(pytester: pytest.Pytester, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(ircamp=IR_CAMPAIGN)
    monkeypatch.setenv("PYTEST_ADDOPTS", "--ab-allow-no-ir-diff")  # what an environment variable of its own said
    result = pytester.runpytest_subprocess("ircamp.py", "-k", "add", "--ab-rounds", "2",
                                           "--ab-root", str(tmp_path / "root"), *FAST)
    result.assert_outcomes(passed=4)
    assert "IR gate no_diff" in result.stdout.str()


def test_ir_only_triage_compiles_both_sides_and_times_nothing(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(ircamp=IR_CAMPAIGN)
    root = tmp_path / "root"
    result = pytester.runpytest_subprocess("ircamp.py", "--ab-ir-only", "--ab-ir-target", "cuda:90",
                                           "--ab-root", str(root), *FAST)
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["switch (side B): DISABLE_MMA_V3=1",
                                 "IR triage only: compiled at smoke for cuda:90; nothing timed, so no backend, timer, "
                                 "device, rounds or verdict rule apply",
                                 "IR triage: the switch changes the generated code of 1 of 3 ops: dot (worth GPU time)"])
    assert "unknown" not in result.stdout.str() and "NOT GPU TIMINGS" not in result.stdout.str()
    assert not list(root.glob("r*_*/*/results.jsonl"))
    assert {r.status for r in read_status(root)} == {"IR_ONLY"}


def _variant(ir_dir: Path, name: str, body: str, candidate: bool) -> None:
    path = ir_dir / "kernel" / f"{name}.ttgir"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.with_name(f"{name}.meta.json").write_text(json.dumps({"num_warps": 4, "autotune_candidate": candidate}))


def test_autotune_candidates_count_only_when_the_other_side_compiled_them(tmp_path: Path) -> None:
    # Side A (recording) benchmarked two configs; side B replayed A's choice and compiled only that one.
    a, b = tmp_path / "a", tmp_path / "b"
    _variant(a, "w4_s3_chosen", "tt.func @k() { tt.return }", candidate=True)
    _variant(a, "w8_s2_rejected", "tt.func @k() { tt.dot }", candidate=True)
    _variant(b, "w4_s3_chosen", "tt.func @k() { tt.return }", candidate=False)
    assert irgate.decide("op", a, b).state == "no_diff"
    _variant(b, "w4_s3_chosen", "tt.func @k() { ttg.convert_layout }", candidate=False)
    decision = irgate.decide("op", a, b)
    assert decision.state == "diff" and decision.headline() == ["kernel: convert_layout 0 -> 1 (+1)"]


def test_normalization_strips_locations_and_nothing_else() -> None:
    a = ('#loc = loc("/home/a/k.py":7:0)\n%0 = ttg.local_alloc %x : tensor<4xf32> loc(#loc3)\n'
         '%1 = tt.load %p loc(fused["/home/a/k.py":9:0, "(x)"])\n')
    b = a.replace("/home/a", "/tmp/other")
    assert normalize_ttgir(a) == normalize_ttgir(b)
    assert "ttg.local_alloc %x" in normalize_ttgir(a) and "loc" not in normalize_ttgir(a).replace("local_alloc", "")
    assert normalize_ttgir(a) != normalize_ttgir(a.replace("tensor<4xf32>", "tensor<8xf32>"))


def test_each_stage_keeps_its_code_and_drops_only_what_names_the_source() -> None:
    ttgir = ('#loc3 = loc("/home/a/k.py":9:0)\n#loc4 = loc(#loc3)\n'
             '  ^bb0(%arg0: i32 loc(#loc4), %arg1: i32 loc("/home/a/k.py":2:1)):  \n'
             '    %0 = ttg.convert_layout %arg0 : tensor<4xf32, #blocked> loc(callsite(#loc3 at #loc4))\n')
    assert normalize_ttgir(ttgir) == ("  ^bb0(%arg0: i32 , %arg1: i32 ):\n"
                                      "    %0 = ttg.convert_layout %arg0 : tensor<4xf32, #blocked>\n")
    llir = ('  %5 = fadd float %3, %4, !dbg !12  \n    #dbg_value(i32 %1, !4, !DIExpression(), !7)\n'
            '!12 = !DILocation(line: 9, scope: !3)\n!3 = distinct !DISubprogram(name: "k")\n!0 = !{i32 2}\n')
    assert normalize_llir(llir) == "  %5 = fadd float %3, %4\n!0 = !{i32 2}\n"
    # .local declares local memory: a stage that spills more has other code, and keeps its line.
    ptx = ('\t.file\t1 "/home/a/k.py"\n.local .align 8 .b8 __local_depot0[16];\n\t.loc\t1 9 0\n'
           '\tadd.f32 \t%f3, %f1, %f2;  \n\t.section\t.debug_info\n\t{ .b8 1 }\n')
    assert normalize_asm(ptx) == ".local .align 8 .b8 __local_depot0[16];\n\tadd.f32 \t%f3, %f1, %f2;\n"


def test_gate_first_skips_an_unchanged_op_before_round_1_and_leaves_the_others_to_round_1(
        pytester: pytest.Pytester, tmp_path: Path) -> None:
    """--ab-precompile on: the precompile compiles both sides for the IR target before round 1; the op whose code the
    switch does not change is skipped without timing any round, and the same decisions as round 1's are reached."""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(ircamp=IR_CAMPAIGN)
    root = tmp_path / "root"
    result = pytester.runpytest_subprocess("ircamp.py", "--ab-rounds", "2", "--ab-root", str(root), "-rs",
                                           "--ab-precompile", "on", *FAST)
    result.assert_outcomes(passed=8, skipped=4)
    result.stdout.fnmatch_lines(["NO_IR_DIFF [[]4[]] *SWITCH_NO_IR_DIFF: the precompile's TTGIR (before round 1) "
                                 "of add is identical*"])
    out = result.stdout.str()
    assert "== add: rounds 0/2" in out and "switch changed no generated code; 2 rounds skipped (4 cells)" in out
    assert "IR: dot_kernel: dot 0 -> 1 (+1), warp_group_dot 1 -> 0 (-1)" in out  # decided by round 1, as before
    assert "== torchonly: rounds 2/2" in out and "IR gate unavailable: no TTGIR captured" in out
    statuses = {(r.round, r.op, r.side): r.status for r in read_status(root)}
    assert {statuses[(n, "add", side)] for n in (1, 2) for side in ("A", "B")} == {irgate.NO_IR_DIFF}
    assert statuses[(1, "dot", "A")] == statuses[(2, "dot", "B")] == "ok"
    decision = json.loads((root / "irgate" / "add.json").read_text())
    assert decision["state"] == "no_diff" and "before round 1" in decision["basis"]
    assert not (root / "r1_A" / "add" / "results.jsonl").exists()  # nothing of add was timed
    # One pool compiled every op before dot's round 1 (dot comes first): its first cell carries the pool's seconds,
    # counted as compile in the time line, not as idle, and add's skipped cells carry none.
    elapsed = {(r.round, r.op, r.side): r.elapsed_s for r in read_status(root)}
    assert {elapsed[(n, "add", side)] for n in (1, 2) for side in ("A", "B")} == {0.0}, elapsed
    dot_log = (root / "r1_A" / "dot" / "run.log").read_text()
    assert "pooled with the precompile of 2 op(s) whose round 1 comes later (add, torchonly)" in dot_log, dot_log
    split = re.search(r"precompile: ([0-9.]+)s, of which ([0-9.]+)s before its jobs could start(?: \(.*\))? and "
                      r"([0-9.]+)s compiling", dot_log)
    assert split and abs(float(split[1]) - float(split[2]) - float(split[3])) < 0.15, dot_log
    add_log = (root / "r1_A" / "add" / "run.log").read_text()
    assert "precompiled add for both sides" in add_log and "(ahead, in the precompile of dot" in add_log, add_log
    timing = json.loads((root / "r1_A" / "dot" / "cell_timing.json").read_text())
    assert timing["precompile_s"] > 0.5 and 0.0 <= timing["precompile_wait_s"] <= timing["precompile_s"], timing
    spent = json.loads((root / "report.json").read_text())["time_spent"]
    assert spent["cells"] == 8 and spent["compile_s"] >= timing["precompile_s"], spent


def test_a_cell_the_gate_first_skipped_keeps_its_precompiles_seconds_and_kernel_counts(
        pytester: pytest.Pytester, tmp_path: Path) -> None:
    """The first cell of an op skipped before round 1 carries the precompile that decided it: its seconds and the
    kernels it compiled reach the time line (they were left out, so a cold run read "0 compiled")."""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(ircamp=IR_CAMPAIGN)
    root = tmp_path / "root"
    result = pytester.runpytest_subprocess("ircamp.py", "-k", "add", "--ab-rounds", "1", "--ab-root", str(root),
                                           "--ab-precompile", "on", *FAST)
    result.assert_outcomes(skipped=2)
    timing = json.loads((root / "r1_A" / "add" / "cell_timing.json").read_text())
    assert timing["precompile_s"] > 0.5 and set(timing["precompile_kernels"]) == {"A", "B"}, timing
    spent = json.loads((root / "report.json").read_text())["time_spent"]
    assert spent["cells"] == 1 and spent["cells_without_timing"] == 0, spent
    assert spent["kernels"] == {side: {"loaded": 0, "compiled": 1} for side in ("A", "B")}, spent
    # What went before the precompile's jobs could start is start-up; the rest compile.
    assert spent["compile_s"] == pytest.approx(timing["precompile_s"] - timing["precompile_wait_s"], abs=0.01), spent
    assert spent["startup_s"] == pytest.approx(timing["precompile_wait_s"], abs=0.01), spent
