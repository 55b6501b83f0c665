"""IR triage on a CPU machine predicts the GPU and says where the code first differs.

- It compiles the shapes the GPU run would time.  TILE_CAMPAIGN's dot kernel
  takes its tile from the shape: 16x16 at the smoke level, 64x64 at core.
  For cuda:90 only the 64-row tile becomes a Hopper warpgroup MMA, so
  DISABLE_MMA_V3=1 changes its code at core and not at smoke, the property of
  router_gemm (BM 16 at its smoke shape, 64 at core) at a fraction of its
  compile time.  (An op without core shapes compiles its smoke ones: the
  IR-only tests of test_irgate.py run such a campaign.)
- The report's gate line says what its decision rests on: the level and
  the target compiled (``IR gate diff (compiled at core for cuda:90)``).
- Each changed kernel names the first compiler stage and the first pass whose
  output differs: real compilations under DISABLE_MMA_V3=1 and under the
  layout-pass switch, and the pass-dump bookkeeping on synthetic dumps.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import ADD_KERNEL_SOURCE, BUILD_DOT_SOURCE, DOT_SOURCE, ROWSUM_LAYOUT_CAMPAIGN

from pytest_abbench.checks import irgate

from pytest_abbench.spawn import precompile
from pytest_abbench.core import envnames
from pytest_abbench.core.cellconfig import CHILD_MODULE, CellConfig
from pytest_abbench.child.ircapture import PassDump, split_pass_dump
from pytest_abbench.checks.irgate import first_pass_difference, ttgir_files
from pytest_abbench.core.layout import IDENTITY_FILE, SHARES_FILE, ir_dir
from pytest_abbench.core.settings import Settings

CAMPAIGNS = Path(__file__).resolve().parents[1] / "campaigns"

FAST = ("-p", "no:cacheprovider")

TILE_CAMPAIGN = DOT_SOURCE + BUILD_DOT_SOURCE + '''


OPS = [Op("dot", build=build_dot, shapes={"smoke": [{"n": 16}], "core": [{"n": 64}]})]
SWITCH = Switch(env_b={"DISABLE_MMA_V3": "1"})
'''

CHANGED = "IR: dot_kernel: dot 0 -> 1 (+1), warp_group_dot 1 -> 0 (-1)"
WHERE_MMA = "first differs at ttgir (ttir identical), after TritonGPUAccelerateMatmul"


@pytest.mark.slow
def test_ir_only_triage_compiles_the_gpu_level_unless_a_level_is_given(pytester: pytest.Pytester,
                                                                       tmp_path: Path) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(tilecamp=TILE_CAMPAIGN)
    result = pytester.runpytest_subprocess("tilecamp.py", "--ab-ir-only", "--ab-ir-target", "cuda:90",
                                           "--ab-root", str(tmp_path / "auto"), *FAST)
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    # The README's laptop line: the dot's core tile is a wgmma that the switch turns off.
    assert "IR triage: the switch changes the generated code of 1 of 1 ops: dot (worth GPU time)" in out
    # With the kernel's resources: registers from each side's cubin, and the MMA its TTGIR lays out.
    assert re.search(re.escape(f"{CHANGED}, local_load 0 -> 2 (+2), ") + r"regs \d+ -> \d+, mma v3 -> v2; "
                     + re.escape(WHERE_MMA), out), out
    assert "IR gate diff (compiled at core for cuda:90)" in out  # what the decision rests on
    assert not list((tmp_path / "auto").rglob(".pass-dump.mlir"))  # the dump file is gone with the process

    # --ab-level names the shapes: at smoke the 16-row tile is no wgmma on either side.
    result = pytester.runpytest_subprocess("tilecamp.py", "--ab-ir-only", "--ab-ir-target", "cuda:90",
                                           "--ab-level", "smoke", "--ab-root", str(tmp_path / "smoke"), *FAST)
    result.assert_outcomes(passed=2)
    assert "IR triage: the switch changes the generated code of 0 of 1 ops" in result.stdout.str()
    assert "IR gate no_diff (compiled at smoke for cuda:90)" in result.stdout.str()


@pytest.mark.slow
def test_a_timed_interpreter_run_gates_on_the_level_it_times(pytester: pytest.Pytester, tmp_path: Path) -> None:
    # Only triage (--ab-ir-only) pays for the GPU's shapes; a timed run compiles what it times, so the
    # README's main job stays minutes.  At smoke the 16-row tile is no wgmma: nothing changes.
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(tilecamp=TILE_CAMPAIGN)
    root = tmp_path / "root"
    result = pytester.runpytest_subprocess("tilecamp.py", "--ab-rounds", "1", "--ab-root", str(root), *FAST)
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert CHANGED not in out and "IR gate no_diff (compiled at smoke for cuda:90)" in out
    for side in ("A", "B"):
        cell = root / f"r1_{side}" / "dot"
        assert json.loads((cell / IDENTITY_FILE).read_text())["bench_level"] == "smoke"
        assert [json.loads(line)["shape"] for line in (cell / "results.jsonl").read_text().splitlines()] == ["n=16"]


# The 16-row tile is no wgmma on either side, the 64-row one is a wgmma on side A only: of two shapes,
# the switch changes the TTGIR of one.
TWO_TILES_CAMPAIGN = DOT_SOURCE + BUILD_DOT_SOURCE + '''


OPS = [Op("dot", build=build_dot, shapes={"smoke": [{"n": 16}], "core": [{"n": 16}, {"n": 64}]})]
SWITCH = Switch(env_b={"DISABLE_MMA_V3": "1"})
'''


def ir_lines(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.strip().startswith(("IR:", "IR gate", "IR triage"))]


def abbench_lines(log: str) -> list[str]:
    """The plugin's lines of a cell log, for an assertion's message (Triton 3.6 dumps pipeliner IR there too)."""
    return [line for line in log.splitlines() if line.startswith("[abbench]")]


@pytest.mark.slow
def test_ir_only_cells_compile_their_shapes_in_shares_and_report_what_one_process_would(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(tilecamp=TWO_TILES_CAMPAIGN)
    reports = {}
    for jobs in ("1", "2"):
        monkeypatch.setenv(envnames.ABBENCH_COMPILE_JOBS, jobs)
        result = pytester.runpytest_subprocess("tilecamp.py", "--ab-ir-only", "--ab-ir-target", "cuda:90",
                                               "--ab-root", str(tmp_path / f"jobs{jobs}"), *FAST)
        result.assert_outcomes(passed=2)
        reports[jobs] = ir_lines(result.stdout.str())
    # Both variants on each side, the pass that made the 64-row tile differ: as one process compiles them.
    # (The resources compared are the first variant's, the 16-row tile's: the same on both sides.)
    assert f"IR: dot_kernel: dot 1 -> 2 (+1), warp_group_dot 1 -> 0 (-1), local_load 2 -> 4 (+2); {WHERE_MMA}" \
        in reports["1"], reports["1"]
    assert reports["2"] == reports["1"]
    for side in ("A", "B"):
        log = (tmp_path / "jobs1" / f"r1_{side}" / "dot" / "run.log").read_text()
        assert "shares compiled" not in log, abbench_lines(log)
        cell = tmp_path / "jobs2" / f"r1_{side}" / "dot"
        log = (cell / "run.log").read_text()
        assert re.search(r"2 shares compiled for cuda:90 in [\d.]+s \(share-1of2 [\d.]+s, share-2of2 [\d.]+s\): "
                         r"2 kernel variants -> ", log), abbench_lines(log)
        assert sorted(json.loads((cell / SHARES_FILE).read_text())["seconds"]) == ["share-1of2", "share-2of2"]
        # The shares' IR is where an unshared cell leaves it, and nothing of the shares is left beside it.
        stems = {p.name.split(".")[0] for p in (cell / "ir" / "dot_kernel").iterdir()}
        assert len(stems) == 2
        for stem in stems:
            for suffix in (".ttgir", ".meta.json", irgate.PASSES_SUFFIX):
                assert (cell / "ir" / "dot_kernel" / f"{stem}{suffix}").is_file(), (stem, suffix)
        assert not list(cell.glob("share-*")) and not list(cell.rglob(".pass-dump.mlir"))


# Two shapes, the second of which cannot be built; an op of one shape compiles without shares.
FAILING_SHARE_CAMPAIGN = '''
from pytest_abbench import Case, Op, Switch


def build(shape, device):
    import torch
    if shape["n"] == 2:
        raise RuntimeError("shape n=2 cannot be built")
    x = torch.ones(shape["n"])
    return Case(run=lambda: x * 2)


OPS = [Op("two", build=build, shapes={"smoke": [{"n": 1}, {"n": 2}]}),
       Op("one", build=build, shapes={"smoke": [{"n": 1}]})]
SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
'''


def test_a_failing_share_fails_its_cell_and_is_named_in_the_log(pytester: pytest.Pytester, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(sharecamp=FAILING_SHARE_CAMPAIGN)
    monkeypatch.setenv(envnames.ABBENCH_COMPILE_JOBS, "2")
    root = tmp_path / "root"
    result = pytester.runpytest_subprocess("sharecamp.py", "--ab-ir-only", "--ab-ir-target", "cuda:90",
                                           "--ab-root", str(root), *FAST)
    result.assert_outcomes(passed=2, failed=2)
    for side in ("A", "B"):
        log = (root / f"r1_{side}" / "two" / "run.log").read_text()
        assert "[abbench] share-2of2: shape n=2: RuntimeError: shape n=2 cannot be built" in log, log
        assert re.search(r"2 shares compiled for cuda:90 in .*; failed: share-2of2 rc 1$", log, re.M), log
        assert "shares compiled" not in (root / f"r1_{side}" / "one" / "run.log").read_text()


def compiled_kernels(pytester: pytest.Pytester, tmp_path: Path, source: str) -> dict[str, list[str]]:
    """Run campaign ``source`` (op ``add``) as IR triage for cuda:90: each side's compiled kernels, by name.

    Both cells must pass; a kernel compiled once per variant is listed once per variant.
    """
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(irtriage=source)
    root = tmp_path / "root"
    result = pytester.runpytest_subprocess("irtriage.py", "--ab-ir-only", "--ab-ir-target", "cuda:90",
                                           "--ab-root", str(root), *FAST)
    result.assert_outcomes(passed=2)
    return {side: [p.parent.name for p in ttgir_files(ir_dir(root / f"r1_{side}" / "add"))] for side in "AB"}


# An op that selects its tensors' device around the launch, as FlagGems does around every op
# (``with torch_device_fn.device(x.device)``); an IR-only cell's tensors are on the CPU.
DEVICE_CONTEXT_CAMPAIGN = '''
import torch
import triton
import triton.language as tl
from pytest_abbench import Case, Op, Switch
''' + ADD_KERNEL_SOURCE + '''

def build(shape, device):
    x = torch.arange(shape["n"], device=device, dtype=torch.float32)
    y = torch.empty_like(x)

    def run():
        with torch.cuda.device(x.device):
            add_kernel[(1,)](x, y, N=shape["n"])
        return y

    return Case(run=run, expected=lambda: x + 1)


OPS = [Op("add", build=build, shapes={"smoke": [{"n": 16}]})]
SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
'''


def test_an_op_that_selects_its_tensors_device_compiles_in_an_ir_only_cell(pytester: pytest.Pytester,
                                                                          tmp_path: Path) -> None:
    """The GPU's precompile runs this path too: before, every FlagGems op failed there
    ("Expected a cuda device, but got: cpu") and its cells compiled their kernels themselves."""
    assert compiled_kernels(pytester, tmp_path, DEVICE_CONTEXT_CAMPAIGN) == {"A": ["add_kernel"], "B": ["add_kernel"]}


# An autotuner with a run() of its own that benchmarks every config through Autotuner._bench, as FlagGems'
# LibTuner does; the plugin's pin, which replaces Autotuner.run, never sees it choose.
OWN_RUN_TUNER_CAMPAIGN = '''
import torch
import triton
import triton.language as tl
from triton.runtime.autotuner import Autotuner
from pytest_abbench import Case, Op, Switch


class OwnRunTuner(Autotuner):
    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        timings = {config: self._bench(*args, config=config, **kwargs) for config in self.configs}
        self.nargs = None
        best = min(self.configs, key=lambda config: timings[config][0])
        return self.fn.run(*args, **kwargs, **best.all_kwargs())


@triton.jit
def add_kernel(x_ptr, y_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) + 1)


tuned_add = triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["N"])(add_kernel)
tuned_add.__class__ = OwnRunTuner


def build(shape, device):
    x = torch.arange(shape["n"], device=device, dtype=torch.float32)
    y = torch.empty_like(x)
    return Case(run=lambda: (tuned_add[(1,)](x, y, N=shape["n"]), y)[1], expected=lambda: x + 1)


OPS = [Op("add", build=build, shapes={"smoke": [{"n": 64}]})]
SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
'''


def test_a_tuner_with_its_own_run_compiles_each_candidate_in_an_ir_only_cell(pytester: pytest.Pytester,
                                                                            tmp_path: Path) -> None:
    """A compile-only process has no benchmarker: before, such a tuner failed there (on the GPU's
    precompile: FlagGems' mm and replication_pad3d, "no attribute 'get_device_interface'")."""
    both = ["add_kernel", "add_kernel"]  # BLOCK 16 and 32
    assert compiled_kernels(pytester, tmp_path, OWN_RUN_TUNER_CAMPAIGN) == {"A": both, "B": both}


def settings(**given: Any) -> Settings:
    values: dict[str, Any] = dict(
        rounds=2, root=None, cell_timeout_s=60.0, switch_env=None, backend="interpreter", level="smoke",
        given_level=None, timer="wall", samples=3, direct_rep_ms=100, direct_warmup_ms=25, tuner_cache="per-cell",
        gpus=None, resume=None, control=False, allow_no_ir_diff=False, ir_only=False, ir_target="cuda:90",
        allow_caliber_mismatch=False, margin_pct=None, fail_if_slower_pct=None)
    return Settings(**{**values, **given})


def test_the_gate_basis_names_level_and_target_as_the_cells_compile() -> None:
    levels = ("smoke", "core")
    assert settings(ir_only=True).ir_basis(levels) == "core for cuda:90"
    assert settings(ir_only=True).ir_basis(("smoke",)) == "smoke for cuda:90"
    assert settings().ir_basis(levels) == "smoke for cuda:90"  # a timed interpreter run
    assert settings(ir_only=True, given_level="smoke").ir_basis(levels) == "smoke for cuda:90"
    # On a GPU the timed process captures what it compiles for its own device, at the level it times.
    assert settings(backend="cuda", level="core").ir_basis(levels) == "core on the GPU"
    assert settings(backend="cuda", level="core", ir_only=True).ir_basis(levels) == "core for cuda:90"


LAYOUT_CAMPAIGN = ROWSUM_LAYOUT_CAMPAIGN


def compile_side(folder: Path, side: str) -> Path:
    """The IR-only cell child for one side of LAYOUT_CAMPAIGN, as --ab-ir-only runs it; its IR folder."""
    campaign = folder / "layoutcamp.py"
    campaign.write_text(LAYOUT_CAMPAIGN)
    out = folder / f"cell-{side}"
    config = CellConfig(campaign=campaign, op="rowsum", round_no=1, side=side, role=side, out=out,
                        backend="interpreter", timer="wall", level="smoke", ir_target="cuda:90", ir_only=True)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "MLIR_ENABLE_DUMP", "MLIR_DUMP_PATH")}
    env["TRITON_CACHE_DIR"] = str(folder / f"triton-cache-{side}")
    done = subprocess.run([sys.executable, "-m", CHILD_MODULE, *config.to_argv()], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return ir_dir(out)


@pytest.mark.slow
def test_the_layout_switch_differs_where_side_a_runs_the_pass(tmp_path: Path) -> None:
    side_a = compile_side(tmp_path, "A")
    decision = irgate.decide("rowsum", side_a, compile_side(tmp_path, "B"))
    assert decision.state == "diff"
    [line] = decision.headline()
    assert line.startswith("rowsum_kernel: convert_layout ")
    # Side B runs no TritonGPURemoveLayoutConversions; the IR parts where side A's first run of it changed it,
    # i.e. after the pass that runs just before it: which one that is, is the Triton release's choice.
    [passes] = (side_a / "rowsum_kernel").glob("*" + irgate.PASSES_SUFFIX)
    names = [entry[0] for entry in json.loads(passes.read_text())]
    before = names[names.index("TritonGPURemoveLayoutConversions") - 1]
    if importlib.metadata.version("triton") == "3.6.0":
        assert before == "TritonGPUPlanCTAPass"  # 3.9.0: TritonNvidiaGPUAssignCGALayoutsPass
    assert line.endswith(f"; first differs at ttgir (ttir identical), after {before} "
                         "(only side A runs TritonGPURemoveLayoutConversions)"), line


def dump(*passes: tuple[str, str]) -> str:
    """A pass dump as Triton 3.6 prints it: (pass, module body) per pass, with a path in a location."""
    return "".join(f"// -----// IR Dump Before {name} ({name.lower()}) ('builtin.module' operation) //----- //\n"
                   f'#loc = loc("/src/k.py":1:0)\nmodule {{\n  {body} loc(#loc)\n}} loc(#loc)\n\n\n'
                   for name, body in passes)


def test_pass_lists_name_the_pass_whose_output_differs() -> None:
    a = split_pass_dump(dump(("Inliner", "x"), ("Coalesce", "y"), ("AccelerateMatmul", "z"), ("Prefetch", "mma")))
    same = split_pass_dump(dump(("Inliner", "x"), ("Coalesce", "y"), ("AccelerateMatmul", "z"), ("Prefetch", "mma"))
                           .replace("/src", "/elsewhere"))
    assert [p[0] for p in a] == ["Inliner", "Coalesce", "AccelerateMatmul", "Prefetch"]
    assert same == a  # where the source lives is not the code
    assert first_pass_difference(a, same) is None
    b = split_pass_dump(dump(("Inliner", "x"), ("Coalesce", "y"), ("AccelerateMatmul", "z"), ("Prefetch", "fma")))
    assert first_pass_difference(a, b) == "after AccelerateMatmul"
    front = split_pass_dump(dump(("Inliner", "w"), ("Coalesce", "y2")))
    assert first_pass_difference(a, front) == "before the first pass (the front end's output differs)"
    # The front end differs, the TTIR passes make it equal, a later pass makes it differ again.
    again = split_pass_dump(dump(("Inliner", "w"), ("Coalesce", "y"), ("AccelerateMatmul", "z"), ("Prefetch", "fma")))
    assert first_pass_difference(a, again) == "after AccelerateMatmul"
    assert first_pass_difference(a, again[:3]) is None
    # A pass one side leaves out: its output is what differs.
    skipped = split_pass_dump(dump(("Inliner", "x"), ("Coalesce", "y"), ("Prefetch", "z2")))
    assert first_pass_difference(a, skipped) == "after Coalesce (only side A runs AccelerateMatmul)"


class BufferedWriter:
    """Writes a file as LLVM's raw_fd_ostream does: whole blocks, the rest held back until more comes."""

    def __init__(self, path: Path, block: int = 4096) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        self.block = block
        self.held = b""

    def write(self, text: str) -> None:
        self.held += text.encode()
        cut = len(self.held) - len(self.held) % self.block
        os.write(self.fd, self.held[:cut])
        self.held = self.held[cut:]


def test_each_compile_gets_its_own_passes_though_the_file_lags(tmp_path: Path) -> None:
    path = tmp_path / ".pass-dump.mlir"
    pass_dump = PassDump(path)
    writer = BufferedWriter(path)
    compile_1 = dump(("Inliner", "a1"), ("Coalesce", "b1" * 20000), ("Last", "c1"))
    compile_2 = dump(("Inliner", "a2"), ("Coalesce", "b2"), ("Last", "c2" * 3000))
    out = tmp_path / "ir"
    out.mkdir()
    writer.write(compile_1)
    pass_dump.compiled(out / "one.passes.json")  # the end of compile 1 is still held back
    assert not (out / "one.passes.json").exists()
    pass_dump.compiled(out / "cached.passes.json")  # a disk-cache hit: nothing was compiled
    writer.write(compile_2)
    pass_dump.compiled(out / "two.passes.json")  # compile 2's first dump completes compile 1
    assert json.loads((out / "one.passes.json").read_text()) == split_pass_dump(compile_1)
    assert os.stat(path).st_size == 0  # what was read is freed; the writer goes on at its offset (a sparse file)
    pass_dump.finish()  # compile 2's last dump was cut off by the buffer: dropped, the rest kept
    assert json.loads((out / "two.passes.json").read_text()) == split_pass_dump(compile_2)[:2]
    assert not (out / "cached.passes.json").exists() and not path.exists()
