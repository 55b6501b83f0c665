"""The cell harness without a GPU: pinned autotune, identity, IR capture on a cache hit, capture fallback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_abbench.core.cellconfig import CHILD_MODULE, CellConfig
from pytest_abbench.child.timers import CapturePoisoned, WallWindows, Windows, prepare_with_fallback
from pytest_abbench.core.status import read_status
from pytest_abbench.core.markers import BENCHMARK_CAPTURE_POISONED, BENCHMARK_DIRECT_NO_CUDAGRAPH

REPO = Path(__file__).resolve().parent.parent

# A real autotuned Triton kernel with a counting benchmark function: in the
# interpreter Triton's own benchmarker has no driver, but a custom do_bench runs.
AUTOTUNE_CAMPAIGN = '''
import os
from pytest_abbench import Case, Op, Switch

CALLS = {"n": 0}

def counting_bench(fn, quantiles):
    CALLS["n"] += 1
    print("BENCH_CALL", flush=True)
    fn()
    return [float(CALLS["n"])] * 3

def build(shape, device):
    import torch, triton, triton.language as tl

    @triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})],
                     key=["n"], do_bench=counting_bench)
    @triton.jit
    def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    n = shape["n"] + (int(os.environ.get("EXTRA_KEY", "0")) if os.environ.get("SIDE_IS_B") else 0)
    if os.environ.get("SIDE_IS_B") and os.environ.get("KEY_PER_CELL"):
        # Side B's key differs in every cell: each later cell meets a key no record holds.
        with open(os.environ["KEY_PER_CELL"], "a+") as cells:
            cells.write("cell\\n")
            cells.seek(0)
            n += len(cells.readlines())
    x = torch.arange(n, dtype=torch.float32)
    out = torch.empty_like(x)
    def run():
        add_one[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
        return out
    return Case(run=run, expected=lambda: x + 1)

OPS = [Op("addone", build=build, shapes={"smoke": [{"n": 40}]})]
SWITCH = Switch(env_b={"SIDE_IS_B": "1"})
'''


def _run_cells(pytester: pytest.Pytester, root: Path, *args: str) -> pytest.RunResult:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(tuned=AUTOTUNE_CAMPAIGN)
    return pytester.runpytest_subprocess("tuned.py", "--ab-root", str(root), "--ab-ir-target", "none",
                                         "-p", "no:cacheprovider", *args)


def test_record_then_replay_never_benchmarks_and_a_miss_is_marked_once(pytester: pytest.Pytester,
                                                                      tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    # Side B sees a different n in every cell: r1-B records its key (side A never met it), r2-B's key is in no
    # record: a replay miss.
    monkeypatch.setenv("EXTRA_KEY", "3")
    monkeypatch.setenv("KEY_PER_CELL", str(tmp_path / "b_cells"))
    result = _run_cells(pytester, root, "--ab-rounds", "2")
    result.assert_outcomes(passed=4)
    record = json.loads((root / "autotune" / "addone.json").read_text())
    assert [e["key"] for e in record["entries"]] == [["40", "torch.float32", "torch.float32"]]
    assert record["entries"][0]["kernel"].endswith(":build.<locals>.add_one")
    supplement = json.loads((root / "autotune" / "side-B" / "addone.json").read_text())
    assert [e["key"] for e in supplement["entries"]] == [["44", "torch.float32", "torch.float32"]]
    assert (supplement["side"], supplement["recorded_by"]) == ("B", "r1-B")
    logs = {cell: (root / cell / "addone" / "run.log").read_text() for cell in ("r1_A", "r1_B", "r2_A", "r2_B")}
    assert logs["r1_A"].count("BENCH_CALL") == 2, "record mode benchmarks each config once"
    assert logs["r2_A"].count("BENCH_CALL") == 0, "replay of a recorded key runs no benchmark"
    assert "AUTOTUNE_REPLAY_FALLBACK" not in logs["r1_B"], "r1-B records the key only it has: not a miss"
    assert logs["r1_B"].count("BENCH_CALL") == 2
    assert logs["r2_B"].count("AUTOTUNE_REPLAY_FALLBACK kernel=") == 1, "one marker per missing key"
    assert "key=['45', 'torch.float32', 'torch.float32']" in logs["r2_B"]
    assert logs["r2_B"].count("BENCH_CALL") == 2, "a missing key is tuned normally"
    timing = json.loads((root / "r2_A" / "addone" / "cell_timing.json").read_text())
    assert timing["autotune_bench_calls"] == 0
    # The plugin's own marker lines are what status.tsv counts (through each cell's markers.log).
    counted = {(r.round, r.side): r.AUTOTUNE_REPLAY_FALLBACK for r in read_status(root)}
    assert counted == {(1, "A"): 0, (1, "B"): 0, (2, "A"): 0, (2, "B"): 1}


# Side B also calls an autotuned kernel side A never calls (a kernel-variant switch).  Its benchmark favours
# the other config in every process that tunes it, so a cell that tunes it again chooses differently.
ONE_SIDED_CAMPAIGN = AUTOTUNE_CAMPAIGN.replace("from pytest_abbench import Case, Op, Switch", """
from pytest_abbench import Case, Op, Switch

TUNINGS = {"n": 0, "mine": None}

def alternating_bench(fn, quantiles):
    # The first candidate of a tuning starts a tuning: count it across processes in a file.
    if TUNINGS["n"] % 2 == 0:
        with open(os.environ["TUNINGS_FILE"], "a+") as tunings:
            tunings.write("tuning\\n")
            tunings.seek(0)
            TUNINGS["mine"] = len(tunings.readlines())
    index = TUNINGS["n"] % 2
    TUNINGS["n"] += 1
    print("B_BENCH_CALL", flush=True)
    fn()
    return [1.0 if index == TUNINGS["mine"] % 2 else 2.0] * 3
""").replace("    return Case(run=run, expected=lambda: x + 1)\n", """
    if not os.environ.get("SIDE_IS_B"):
        return Case(run=run, expected=lambda: x + 1)

    @triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 64})],
                     key=["n"], do_bench=alternating_bench)
    @triton.jit
    def add_two(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 2, mask=offs < n)

    two = torch.empty_like(x)
    def run_b():
        run()
        add_two[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, two, n)
        print(f"B_CHOSE {add_two.best_config.kwargs}", flush=True)
        return out
    return Case(run=run_b, expected=lambda: x + 1)
""")


def test_a_key_only_side_b_has_is_pinned_from_round_1_side_b(pytester: pytest.Pytester, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNINGS_FILE", str(tmp_path / "tunings"))
    root = tmp_path / "root"
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(tuned=ONE_SIDED_CAMPAIGN)
    result = pytester.runpytest_subprocess("tuned.py", "--ab-root", str(root), "--ab-ir-target", "none",
                                           "-p", "no:cacheprovider", "--ab-rounds", "2")
    result.assert_outcomes(passed=4)
    assert (tmp_path / "tunings").read_text().count("tuning") == 1, "side B's kernel was tuned once, in r1-B"
    supplement = json.loads((root / "autotune" / "side-B" / "addone.json").read_text())
    assert [e["kernel"].rsplit(".", 1)[1] for e in supplement["entries"]] == ["add_two"]
    logs = {cell: (root / cell / "addone" / "run.log").read_text() for cell in ("r1_B", "r2_B")}
    chose = {cell: {line for line in log.splitlines() if line.startswith("B_CHOSE")} for cell, log in logs.items()}
    assert chose["r1_B"] == chose["r2_B"] and len(chose["r2_B"]) == 1, chose
    assert logs["r2_B"].count("B_BENCH_CALL") == 0
    counted = {(r.round, r.side): r.AUTOTUNE_REPLAY_FALLBACK for r in read_status(root)}
    assert counted == {(1, "A"): 0, (1, "B"): 0, (2, "A"): 0, (2, "B"): 0}
    identities = {cell: json.loads((root / cell / "addone" / "run_identity.json").read_text())
                  for cell in ("r1_A", "r1_B", "r2_B")}
    assert "autotune_side_mode" not in identities["r1_A"]
    assert [identities[c]["autotune_side_mode"] for c in ("r1_B", "r2_B")] == ["record", "replay"]
    assert identities["r1_B"]["autotune_side_record_hash"] == identities["r2_B"]["autotune_side_record_hash"]
    report = (root / "report.md").read_text()
    assert "caliber ok" in report
    assert "autotune: 1 key pinned from A, 1 key only side B has, pinned from r1-B" in report


def test_identity_file_contents(pytester: pytest.Pytester, tmp_path: Path) -> None:
    root = tmp_path / "root"
    _run_cells(pytester, root, "--ab-rounds", "1").assert_outcomes(passed=2)
    a = json.loads((root / "r1_A" / "addone" / "run_identity.json").read_text())
    b = json.loads((root / "r1_B" / "addone" / "run_identity.json").read_text())
    for key in ("backend", "device", "timer", "bench_level", "shape_mode", "tuner_cache", "direct_repeat",
                "autotune_mode", "torch", "triton", "driver", "python", "host", "gpu_uuid", "campaign_hash",
                "switch", "side"):
        assert key in a, key
    assert (a["backend"], a["timer"], a["bench_level"], a["direct_repeat"]) == \
        ("interpreter", "wall", "smoke", "rep=50ms,warmup=25ms")
    assert (a["autotune_mode"], b["autotune_mode"]) == ("record", "replay")
    # Relative to the cell's folder: nothing in a root depends on where the root lies.
    assert a["autotune_record"] == b["autotune_record"] == "../../autotune/addone.json"
    assert (a["side"], b["side"], a["switch"]) == ("A", "B", "SIDE_IS_B=1")
    assert a["shape_mode"] == b["shape_mode"]


@pytest.mark.slow
def test_ir_capture_writes_ttgir_on_a_triton_cache_hit(tmp_path: Path) -> None:
    """Two compile-only runs of one side share a TRITON_CACHE_DIR; the second loads from it and still writes IR.
    The second stands for a later round: it writes the TTGIR without the stage fingerprints, which only round 1's
    cells need (the IR gate compares those)."""
    cache = tmp_path / "cache"
    # Without the per-pass dump: its file's path is in Triton's cache key, so dumped compiles never hit (and go to
    # a folder of their own process, not into TRITON_CACHE_DIR).
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO), "ABBENCH_PASS_DUMP": "0"}
    env.pop("TRITON_INTERPRET", None)
    outs = []
    for n in (1, 2):
        out = tmp_path / f"cell{n}"
        config = CellConfig(campaign=REPO / "campaigns/mm.py", op="mm", round_no=n, side="A", role="A", out=out,
                            backend="interpreter", timer="wall", level="smoke", ir_target="cuda:90", ir_only=True)
        subprocess.run([sys.executable, "-m", CHILD_MODULE, *config.to_argv()],
                       env=env, check=True, capture_output=True, timeout=300)
        outs.append(sorted(p.relative_to(out).as_posix() for p in (out / "ir").rglob("*.ttgir")))
    cached = [p for p in cache.rglob("*.ttgir")]
    assert cached, "the first run filled Triton's cache"
    assert outs[0] and outs[0] == outs[1], "a cache hit captures the same files under the same stable names"
    counts = [json.loads((tmp_path / f"cell{n}" / "kernel_counts.json").read_text()) for n in (1, 2)]
    assert counts[0]["compiled"] > 0 and counts[1] == {"schema": 1, "loaded": counts[0]["compiled"], "compiled": 0}
    metas = [[json.loads(p.read_text()) for p in sorted((tmp_path / f"cell{n}" / "ir").rglob("*.meta.json"))]
             for n in (1, 2)]
    assert metas[0] and all({"ttir", "ttgir", "llir", "ptx"} <= set(m["stages"]) for m in metas[0])
    assert len(metas[1]) == len(metas[0]) and not any("stages" in m for m in metas[1])


def _fail_capture(fn: object, window_ms: float) -> Windows:
    raise RuntimeError("operation not permitted when stream is capturing")


def _direct(fn: object, window_ms: float, warmup_ms: float) -> Windows:
    timer = WallWindows(lambda: None)
    timer.timer = "direct"
    return timer


def test_capture_failure_with_healthy_context_falls_back_to_direct() -> None:
    # The fake timers stand for the graph timer (capture fails) and the direct timer (works) on a GPU.
    lines: list[str] = []
    timing = prepare_with_fallback(lambda: None, "cudagraph", 100, 25, "op1", "s1", lines.append,
                                   graph_windows=_fail_capture, direct_windows=_direct, probe=lambda: None)
    assert timing.timer == "direct" and timing.marker == BENCHMARK_DIRECT_NO_CUDAGRAPH
    assert lines == [f"{BENCHMARK_DIRECT_NO_CUDAGRAPH} op=op1 shape=s1 reason=RuntimeError: operation not "
                     "permitted when stream is capturing"]


def test_capture_failure_that_breaks_the_context_is_poisoned() -> None:
    def broken_probe() -> None:
        raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    lines: list[str] = []
    with pytest.raises(CapturePoisoned):
        prepare_with_fallback(lambda: None, "cudagraph", 100, 25, "op1", "s1", lines.append,
                              graph_windows=_fail_capture, direct_windows=_direct, probe=broken_probe)
    assert len(lines) == 1 and lines[0].startswith(f"{BENCHMARK_CAPTURE_POISONED} op=op1 shape=s1 reason=")


def test_a_poisoned_capture_measures_the_rest_in_a_fresh_process(tmp_path: Path) -> None:
    """The graph timer on a machine without CUDA fails its capture and its health probe: every shape poisons.

    Each poisoned process re-executes the cell from its config, so the one
    call ends with one record per shape, each written by its own process.
    """
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("with CUDA the graph capture of a CPU op is not guaranteed to poison")
    campaign = tmp_path / "double.py"
    campaign.write_text("from pytest_abbench import Case, Op\n"
                        "def build(shape, device):\n"
                        "    import torch\n"
                        "    x = torch.ones(shape['n'])\n"
                        "    return Case(run=lambda: x * 2)\n"
                        "OPS = [Op('double', build=build, shapes={'smoke': [{'n': 4}, {'n': 8}]})]\n")
    config = CellConfig(campaign=campaign, op="double", round_no=1, side="A", role="A", out=tmp_path / "cell",
                        backend="interpreter", timer="cudagraph", level="smoke", samples=1)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", CHILD_MODULE, *config.to_argv()], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in (config.out / "results.jsonl").read_text().splitlines()]
    assert [(r["shape"], r["status"]) for r in records] == [("n=4", "poisoned"), ("n=8", "poisoned")]
    assert done.stdout.count("[abbench] cell r1-A op=double") == 3, "the first process and one per poisoned shape"


def test_a_recording_cell_continued_after_a_poisoned_context_keeps_its_first_processs_keys(tmp_path: Path) -> None:
    """Round 1 side A records one autotune key per shape; the graph timer poisons every shape on a machine without
    CUDA, so each shape is measured by a process of its own.  The record ends with both keys, not the last one."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("with CUDA the graph capture of a CPU op is not guaranteed to poison")
    campaign = tmp_path / "tuned.py"
    campaign.write_text(AUTOTUNE_CAMPAIGN.replace('shapes={"smoke": [{"n": 40}]}',
                                                  'shapes={"smoke": [{"n": 40}, {"n": 48}]}'))
    record = tmp_path / "autotune" / "addone.json"
    config = CellConfig(campaign=campaign, op="addone", round_no=1, side="A", role="A", out=tmp_path / "cell",
                        backend="interpreter", timer="cudagraph", level="smoke", samples=1,
                        autotune_mode="record", autotune_file=record)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": str(tmp_path / "c")}
    done = subprocess.run([sys.executable, "-m", CHILD_MODULE, *config.to_argv()], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("[abbench] cell r1-A op=addone") == 3, "the first process and one per poisoned shape"
    keys = [e["key"][0] for e in json.loads(record.read_text())["entries"]]
    assert keys == ["40", "48"], keys


@pytest.mark.slow
@pytest.mark.parametrize("campaign", ["topk", "router_gemm", "mm", "replication_pad3d"])
def test_every_campaign_smoke_level_is_correct_in_the_interpreter(campaign: str, tmp_path: Path) -> None:
    from pytest_abbench.campaign.loader import load_campaign

    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO), "TRITON_CACHE_DIR": str(tmp_path / "c")}
    for op in load_campaign(REPO / "campaigns" / f"{campaign}.py").ops:
        out = tmp_path / op.name
        config = CellConfig(campaign=REPO / "campaigns" / f"{campaign}.py", op=op.name, round_no=1, side="A",
                            role="A", out=out, backend="interpreter", timer="wall", level="smoke", samples=1,
                            autotune_mode="record", autotune_file=tmp_path / "at.json")
        proc = subprocess.run([sys.executable, "-m", CHILD_MODULE, *config.to_argv()],
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert records and all(r["status"] == "ok" for r in records), records


def test_side_a_kernel_cache_keeps_round_1s_tuning_for_the_next_session(pytester: pytest.Pytester, tmp_path: Path,
                                                                        kernel_cache_home: Path) -> None:
    """A warm re-run tunes nothing: round 1 side A keeps its record in side A's kernel cache folder, and the next
    session's round 1 side A carries it; --ab-retune tunes; an unreadable kept record is named, and tuned over."""
    _run_cells(pytester, tmp_path / "first", "--ab-rounds", "1").assert_outcomes(passed=2)
    kept_files = list((kernel_cache_home / "pytest-abbench" / "kernels").glob("tuned-A-*/abbench-autotune-addone.json"))
    assert len(kept_files) == 1, "kept in side A's folder only"
    kept = kept_files[0]
    record = json.loads(kept.read_text())
    assert record == json.loads((tmp_path / "first" / "autotune" / "addone.json").read_text())
    record["entries"][0]["config"]["kwargs"] = {"BLOCK": 32}  # the other candidate: carrying it is visible
    kept.write_text(json.dumps(record))

    root = tmp_path / "warm"
    _run_cells(pytester, root, "--ab-rounds", "1").assert_outcomes(passed=2)
    carried = json.loads((root / "autotune" / "addone.json").read_text())
    assert [e["config"]["kwargs"] for e in carried["entries"]] == [{"BLOCK": 32}]
    assert (carried["carried"], carried["carried_from"]) == (1, str(kept))
    assert "BENCH_CALL" not in (root / "r1_A" / "addone" / "run.log").read_text(), "nothing tuned"
    assert "autotune: 1 key pinned from A (1 carried from side A's kernel cache" in (root / "report.md").read_text()
    # The time line's warm re-run figure counts round 1 side A's tuning: there in the first session, none here.
    spent = {name: json.loads((tmp_path / name / "report.json").read_text())["time_spent"]
             for name in ("first", "warm")}
    assert spent["first"]["kept_tuning_s"] > 0 and "kept_tuning_s" not in spent["warm"], spent

    # A key this run does not meet (another level's shape) stays kept; the key it tunes takes this run's choice.
    other = {**record["entries"][0], "key": ["99", "torch.float32", "torch.float32"]}
    kept.write_text(json.dumps({**record, "entries": [record["entries"][0], other]}))
    retuned = tmp_path / "retune"
    _run_cells(pytester, retuned, "--ab-rounds", "1", "--ab-retune").assert_outcomes(passed=2)
    assert "BENCH_CALL" in (retuned / "r1_A" / "addone" / "run.log").read_text()
    assert json.loads((retuned / "autotune" / "addone.json").read_text()).get("carried", 0) == 0
    entries = {e["key"][0]: e["config"]["kwargs"] for e in json.loads(kept.read_text())["entries"]}
    assert entries == {"40": {"BLOCK": 16}, "99": {"BLOCK": 32}}, "the newest tuning, merged into what was kept"

    # Configs carried from another root were chosen there: side A's kernel cache does not keep them as its own.
    before = kept.read_text()
    carried_root = tmp_path / "carried"
    _run_cells(pytester, carried_root, "--ab-rounds", "1", "--ab-autotune-from", str(root)).assert_outcomes(passed=2)
    assert json.loads((carried_root / "autotune" / "addone.json").read_text())["carried"] == 1
    assert kept.read_text() == before

    kept.write_text("{not json")
    broken = tmp_path / "broken"
    _run_cells(pytester, broken, "--ab-rounds", "1").assert_outcomes(passed=2)
    log = (broken / "r1_A" / "addone" / "run.log").read_text()
    assert f"autotune: nothing carried: unreadable autotune record: {kept}" in log and "BENCH_CALL" in log
    assert json.loads(kept.read_text())["entries"][0]["config"]["kwargs"] == {"BLOCK": 16}, "replaced"


def test_round_1_side_a_carries_an_earlier_roots_configs_instead_of_tuning(pytester: pytest.Pytester,
                                                                          tmp_path: Path) -> None:
    earlier, root = tmp_path / "earlier", tmp_path / "root"
    _run_cells(pytester, earlier, "--ab-rounds", "1").assert_outcomes(passed=2)
    record_path = earlier / "autotune" / "addone.json"
    record = json.loads(record_path.read_text())
    assert record["entries"][0]["config"]["kwargs"] == {"BLOCK": 16}  # what tuning chose there
    record["entries"][0]["config"]["kwargs"] = {"BLOCK": 32}  # the other candidate: carrying it is visible
    record_path.write_text(json.dumps(record))
    result = _run_cells(pytester, root, "--ab-rounds", "2", "--ab-autotune-from", str(earlier))
    result.assert_outcomes(passed=4)
    carried = json.loads((root / "autotune" / "addone.json").read_text())
    assert [e["config"]["kwargs"] for e in carried["entries"]] == [{"BLOCK": 32}]
    assert (carried["carried"], carried["carried_from"]) == (1, str(record_path))
    logs = {cell: (root / cell / "addone" / "run.log").read_text() for cell in ("r1_A", "r1_B", "r2_A", "r2_B")}
    assert "BENCH_CALL" not in "".join(logs.values()), "nothing tuned: round 1 side A carried, the rest replayed"
    assert "carried from" in logs["r1_A"] and "{'BLOCK': 32}" in logs["r1_A"]
    assert json.loads((root / "r1_A" / "addone" / "cell_timing.json").read_text())["autotune_bench_calls"] == 0
    assert f"autotune: 1 key pinned from A (1 carried from {record_path}, not tuned)" in \
        (root / "report.md").read_text()
    record["carried"] = 7  # more keys carried than the record has: refused before any cell, naming the file
    record_path.write_text(json.dumps(record))
    corrupt = _run_cells(pytester, tmp_path / "fourth", "--ab-autotune-from", str(earlier))
    assert corrupt.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--ab-autotune-from: {record_path}" in corrupt.stderr.str() and "carried" in corrupt.stderr.str()
    missing = _run_cells(pytester, tmp_path / "third", "--ab-autotune-from", str(tmp_path / "nowhere"))
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--ab-autotune-from: '{tmp_path / 'nowhere'}' does not exist" in missing.stderr.str()
