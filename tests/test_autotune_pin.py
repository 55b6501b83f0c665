"""The autotune pin's refusals for a side's supplement record, on a real @triton.autotune kernel (no GPU needed:
nothing is launched, the pin is asked for its choice)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from pytest_abbench.child.autotune_candidates import kernel_name, kernel_source, prescreened, time_one_launch
from pytest_abbench.child.autotune_pin import AutotunePin, AutotuneRecordError
from pytest_abbench.core.autotunerecord import AutotuneRecord, read_record, write_record

BLOCK_16 = {"kwargs": {"BLOCK": 16}, "num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
BLOCK_99 = {**BLOCK_16, "kwargs": {"BLOCK": 99}}


def _kernel() -> object:
    import triton
    import triton.language as tl

    @triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])
    @triton.jit
    def side_b_only(x_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)

    return side_b_only


def _pin(tmp_path: Path, main: AutotuneRecord, side: AutotuneRecord | None, side_mode: str = "replay") -> AutotunePin:
    write_record(tmp_path / "op.json", main)
    if side is not None:
        write_record(tmp_path / "side-B" / "op.json", side)
    return AutotunePin("replay", tmp_path / "op.json", lambda _: None, lambda _: False, side_mode=side_mode,
                       side_path=tmp_path / "side-B" / "op.json", side="B", cell="r2-B")


def test_a_supplement_config_no_longer_in_the_list_is_refused_naming_the_file(tmp_path: Path) -> None:
    kernel = _kernel()
    ident = (kernel_name(kernel), ("40", "torch.float32"))
    pin = _pin(tmp_path, AutotuneRecord(), AutotuneRecord({ident: BLOCK_99}, "B", "r1-B"))
    with pytest.raises(AutotuneRecordError, match=r"side-B/op.json: kernel .*side_b_only key \['40', 'torch.float32'\]"
                                                  r": recorded config .*99.* is not in the kernel's config list"):
        pin.choose(kernel, (40, "torch.float32"), kernel.configs)  # type: ignore[attr-defined]
    pin = _pin(tmp_path, AutotuneRecord(), AutotuneRecord({ident: BLOCK_16}, "B", "r1-B"))
    assert pin.choose(kernel, (40, "torch.float32"), kernel.configs).kwargs == {"BLOCK": 16}  # type: ignore


def test_two_records_pinning_one_key_differently_are_refused(tmp_path: Path) -> None:
    ident = ("mod:kernel", ("40",))
    with pytest.raises(AutotuneRecordError, match=r"record/record conflict: kernel mod:kernel key \['40'\]"):
        _pin(tmp_path, AutotuneRecord({ident: BLOCK_16}), AutotuneRecord({ident: BLOCK_99}, "B", "r1-B"))
    _pin(tmp_path, AutotuneRecord({ident: BLOCK_16}), AutotuneRecord({ident: BLOCK_16}, "B", "r1-B"))  # the same


def test_the_recording_cell_writes_an_empty_supplement_and_a_bad_one_is_named(tmp_path: Path) -> None:
    pin = _pin(tmp_path, AutotuneRecord(), None, side_mode="record")
    pin.save()
    written = read_record(tmp_path / "side-B" / "op.json")
    assert (written.entries, written.side, written.recorded_by) == ({}, "B", "r2-B")
    (tmp_path / "side-B" / "op.json").write_text('{"schema": 1, "entries": [{"kernel": "k", "key": "40"}]}')
    with pytest.raises(AutotuneRecordError, match=r"side-B/op.json.*field 'entries\[0\].key': expected a list of text"):
        _pin(tmp_path, AutotuneRecord(), None)


def test_a_carried_config_the_kernel_still_has_is_taken_untuned_and_one_it_lost_is_tuned(tmp_path: Path) -> None:
    kernel = _kernel()
    key = (40, "torch.float32")
    ident = (kernel_name(kernel), ("40", "torch.float32"))
    lines: list[str] = []
    for seed, wanted, carried in ((BLOCK_16, {"BLOCK": 16}, 1), (BLOCK_99, None, 0)):
        write_record(tmp_path / "earlier.json", AutotuneRecord({ident: seed}, recorded_by="r1-A"))
        pin = AutotunePin("record", tmp_path / "op.json", lines.append, lambda _: True, cell="r1-A",
                          seed_path=tmp_path / "earlier.json")
        chosen = pin.choose(kernel, key, kernel.configs)  # type: ignore[attr-defined]
        assert (chosen.kwargs if chosen is not None else None) == wanted  # None: the autotuner tunes it
        pin.note(kernel, key, kernel.configs[1])  # type: ignore[attr-defined]  # tuning (or the carry) chose
        pin.save()
        assert read_record(tmp_path / "op.json").carried == carried
    assert "carried from" in lines[1] and "not among the kernel's configs (after pruning) here: tuned here" in lines[3]
    pin = AutotunePin("record", tmp_path / "op.json", lines.append, lambda _: True, seed_path=tmp_path / "none.json")
    assert "nothing to carry" in lines[-1] and pin.seed == {}
    # An unreadable seed only costs the carry: the cell tunes, and its log names the file and the field.
    (tmp_path / "bad.json").write_text('{"schema": 1, "entries": [], "carried": 3}')
    pin = AutotunePin("record", tmp_path / "op.json", lines.append, lambda _: True, seed_path=tmp_path / "bad.json")
    assert pin.seed == {} and re.search(r"nothing carried: unreadable autotune record: .*bad.json.*carried.*"
                                        r"this cell tunes", lines[-1])


def test_a_seed_tuned_on_other_code_of_the_kernel_is_not_carried(tmp_path: Path) -> None:
    """A seed entry keeps the kernel's code fingerprint: a library update that keeps the config list but changes the
    kernel (or a @jit function it calls) gets it tuned, not the old choice carried."""
    kernel = _kernel()
    key = (40, "torch.float32")
    ident = (kernel_name(kernel), ("40", "torch.float32"))
    here = kernel_source(kernel)
    assert here.startswith(("triton:", "source:")) and here == kernel_source(_kernel()), "stable across builds"
    lines: list[str] = []
    for source, wanted in ((here, {"BLOCK": 16}), ("triton:other-code", None), ("", {"BLOCK": 16})):
        write_record(tmp_path / "seed.json", AutotuneRecord({ident: BLOCK_16}, recorded_by="r1-A",
                                                            sources={ident: source} if source else {}))
        assert read_record(tmp_path / "seed.json").sources == ({ident: source} if source else {})
        pin = AutotunePin("record", tmp_path / "op.json", lines.append, lambda _: True, cell="r1-A",
                          seed_path=tmp_path / "seed.json")
        chosen = pin.choose(kernel, key, kernel.configs)  # type: ignore[attr-defined]
        assert (chosen.kwargs if chosen is not None else None) == wanted, source  # "": a record of an earlier release
    assert "tuned on other code of this kernel (its fingerprint differs): tuned here" in "".join(lines)
    pin.note(kernel, key, kernel.configs[0])  # type: ignore[attr-defined]
    pin.save()
    assert read_record(tmp_path / "op.json").sources == {ident: here}, "what it records carries its fingerprint"


# An autotuned kernel of four candidates, compiled for cuda:90 by the real compile-only child (no GPU needed).
TUNED_CAMPAIGN = '''
import triton
import triton.language as tl
from pytest_abbench import Case, Op, Switch

@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128)], key=["n"])
@triton.jit
def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

def build(shape, device):
    import torch
    x = torch.arange(shape["n"], dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    return Case(run=lambda: add_one[lambda m: (triton.cdiv(shape["n"], m["BLOCK"]),)](x, y, shape["n"]))

OPS = [Op("addone", build=build, shapes={"smoke": [{"n": 40}]})]
SWITCH = Switch(env_b={"DISABLE_MMA_V3": "1"})
'''


def _compile_all(folder: Path, candidate_procs: int) -> tuple[str, set[str], dict[str, int]]:
    """The compile-only child in compile-all mode: its output, its TTGIR variants, its kernel counts."""
    import json
    import os
    import subprocess
    import sys

    from pytest_abbench.core.cellconfig import CHILD_MODULE, CellConfig

    folder.mkdir(parents=True)
    (folder / "tuned.py").write_text(TUNED_CAMPAIGN)
    config = CellConfig(campaign=folder / "tuned.py", op="addone", round_no=1, side="A", role="A",
                        out=folder / "cell", backend="interpreter", timer="wall", level="smoke", ir_target="cuda:90",
                        ir_only=True, autotune_mode="compile-all", candidate_procs=candidate_procs)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(folder / "triton-cache"), ABBENCH_PASS_DUMP="0")
    done = subprocess.run([sys.executable, "-m", CHILD_MODULE, *config.to_argv()], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    counts = json.loads((folder / "cell" / "kernel_counts.json").read_text())
    return done.stdout + done.stderr, {p.name for p in (folder / "cell" / "ir").rglob("*.ttgir")}, counts


def test_compile_all_shares_a_kernels_candidates_between_processes_and_counts_them_as_compiled(
        tmp_path: Path) -> None:
    shared_log, shared_ir, shared_counts = _compile_all(tmp_path / "shared", candidate_procs=3)
    alone_log, alone_ir, alone_counts = _compile_all(tmp_path / "alone", candidate_procs=1)
    assert "add_one: 4 candidates compiled in 3 processes side by side" in shared_log, shared_log
    assert "side by side" not in alone_log
    assert len(shared_ir) == 4 and shared_ir == alone_ir  # every candidate, the same variants either way
    assert {k: shared_counts[k] for k in ("loaded", "compiled")} == {"loaded": 0, "compiled": 4} == \
        {k: alone_counts[k] for k in ("loaded", "compiled")}


# Two shapes whose kernels specialize alike (neither n is a multiple of 16): the same four kernels for both.  Each
# shape's share waits in build() until the other's has come, so that both compile at the same moment, as the forked
# shares of one side do.
TWO_SHAPES_CAMPAIGN = TUNED_CAMPAIGN.replace('shapes={"smoke": [{"n": 40}]}',
                                             'shapes={"smoke": [{"n": 40}, {"n": 56}]}')
TWO_SHAPES_CAMPAIGN = TWO_SHAPES_CAMPAIGN.replace("def build(shape, device):\n", """def build(shape, device):
    import os, time
    barrier = os.environ["ABBENCH_TEST_BARRIER"]
    open(os.path.join(barrier, str(shape["n"])), "w").close()
    deadline = time.monotonic() + 120
    while len(os.listdir(barrier)) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
""")


def test_the_shares_of_one_side_compile_each_candidate_once_where_their_shapes_compile_the_same_kernels(
        tmp_path: Path) -> None:
    """Before, each share compiled all four candidates for its shape, so the side compiled each of them twice (on
    the H100, swiglu_mlp's two shapes: 128 compiles for 64 kernels, most of a cold run's 13 s precompile)."""
    import json
    import os
    import subprocess
    import sys

    from pytest_abbench.core.cellconfig import CHILD_MODULE, CellConfig

    (tmp_path / "tuned.py").write_text(TWO_SHAPES_CAMPAIGN)
    (tmp_path / "barrier").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "triton-cache"), ABBENCH_PASS_DUMP="0",
               ABBENCH_TEST_BARRIER=str(tmp_path / "barrier"))
    children = []
    for share in ("0/2", "1/2"):
        out = tmp_path / f"share-{share[0]}"
        config = CellConfig(campaign=tmp_path / "tuned.py", op="addone", round_no=1, side="A", role="A", out=out,
                            backend="interpreter", timer="wall", level="smoke", ir_target="cuda:90", ir_only=True,
                            autotune_mode="compile-all", candidate_procs=2, shard=share)
        children.append((out, subprocess.Popen([sys.executable, "-m", CHILD_MODULE, *config.to_argv()], env=env,
                                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    counts, variants = [], []
    for out, child in children:
        log = child.communicate(timeout=300)[0]
        assert child.returncode == 0, log
        counts.append(json.loads((out / "kernel_counts.json").read_text()))
        variants.append({p.name for p in (out / "ir").rglob("*.ttgir")})
    assert sum(c["compiled"] for c in counts) == 4, counts  # each candidate once for the side
    assert [c["compiled"] + c["loaded"] for c in counts] == [4, 4], counts  # each share has every one
    assert len(variants[0]) == 4 and variants[0] == variants[1]  # and its IR, for the gate


def test_a_candidate_lock_is_held_in_a_private_folder_and_skipped_in_anyone_elses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user's (or an open) lock folder could hold a candidate for ever: the lock is then not taken, and
    each process compiles what it needs, as before locks."""
    import os
    import tempfile

    from pytest_abbench.child.autotune_candidates import candidate_lock

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    kernel = _kernel()
    config = kernel.configs[0]  # type: ignore[attr-defined]
    folder = tmp_path / f"abbench-candidate-locks-{os.getuid()}"
    with candidate_lock(kernel, config, wait=False) as held:
        with candidate_lock(kernel, config, wait=False) as again:
            assert (held, again) == (True, False)  # a second open of the same candidate finds it held
    assert list(folder.iterdir()) == []  # the file goes once the candidate is compiled
    folder.chmod(0o777)
    with candidate_lock(kernel, config, wait=False) as held:
        with candidate_lock(kernel, config, wait=False) as again:
            assert (held, again) == (True, True)
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(("bad", "named"), [
    ({**BLOCK_16, "num_warps": "four"}, "field 'entries[0].config.num_warps': expected a whole number or null, "
                                         "got 'four'"),
    ({**BLOCK_16, "kwargs": {"BLOCK": [16]}}, "field 'entries[0].config.kwargs.BLOCK': expected a number, text, "
                                               "true/false or null (a constexpr value), got [16]"),
    ({**BLOCK_16, "kwargs": "BLOCK=16"}, "field 'entries[0].config.kwargs': expected an object, got 'BLOCK=16'"),
])
def test_a_corrupt_recorded_config_is_named_and_never_blamed_on_the_kernel(tmp_path: Path, bad: dict[str, object],
                                                                          named: str) -> None:
    """Before, num_warps "four" read, and the replaying cell then said the config was "not in the kernel's config
    list any more (re-record round 1)": the kernel had not changed, the record was corrupt."""
    kernel = _kernel()
    ident = (kernel_name(kernel), ("40", "torch.float32"))
    with pytest.raises(AutotuneRecordError) as raised:
        _pin(tmp_path, AutotuneRecord({ident: bad}), None)
    path = tmp_path / "op.json"
    assert str(raised.value) == f"unreadable autotune record: {path}: {named}"  # the file named once


SCREENED_TUNING = r'''
import json, sys
import math
import re
from pathlib import Path
import torch, triton
import triton.language as tl
from pytest_abbench.child.autotune_pin import AutotunePin, install

current = {}
def seen(nargs):
    current["BLOCK"] = nargs["BLOCK"]

@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=seen) for b in (16, 32, 64, 128)], key=["n"])
@triton.jit
def fill(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 1.0, mask=offs < n)

# Stands for the GPU benchmarker (triton.testing.do_bench), which the interpreter lacks: the kernel really runs once
# per timing; its time is the config's, a screen's short repeats ranking BLOCK 16 first, Triton's full ones 32.
SCREEN = {16: 0.97, 32: 1.00, 64: 1.28, 128: 2.0}
FULL = {16: 1.00, 32: 0.98, 64: 1.30, 128: 2.0}
if sys.argv[3] == "nan":  # a timing a benchmarker can return (no sample kept): not the fastest, not a finalist
    SCREEN[16] = float("nan")
calls = []
def gpu_timer(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
    fn()
    ms = (SCREEN if rep < 100 else FULL)[current["BLOCK"]]
    calls.append([current["BLOCK"], warmup, rep])
    return [ms, ms, ms]

fill.__dict__["do_bench"] = gpu_timer  # where Triton's Autotuner keeps the driver's benchmarker
if sys.argv[3] in ("once", "short"):
    # The stand-in is Triton's own benchmarker here, so the pin times one launch of each candidate first (after
    # launching each once untimed); that timing (device events around one launch) stands in the same way: 32 just
    # under 1.5x the fastest launch, 64 at 1.5x, 128 over.  "short": the fastest launch is under 0.5 ms, too
    # short to rank by, and every candidate is screened.
    import triton.testing
    from pytest_abbench.child import autotune_candidates
    ONCE = {16: 1.0, 32: 1.49, 64: 1.5, 128: 2.1}
    scale = 0.1 if sys.argv[3] == "short" else 1.0
    def one_launch(fn, quantiles=None):
        fn()
        calls.append(["once", current["BLOCK"]])
        return [ONCE[current["BLOCK"]] * scale] * 3
    triton.testing.do_bench = gpu_timer
    autotune_candidates.time_one_launch = one_launch
heard = []  # Triton's autotuning listener (3.9 on): told of a key the pin tuned as of one Triton tuned.  Only
# screened: Triton's own pass, unscreened, fails in the interpreter to find the JITFunction it tells the listener of.
if getattr(triton.knobs.autotuning, "listener", "absent") is None and int(sys.argv[2]):
    triton.knobs.autotuning.listener = lambda **told: heard.append([told["key"], told["best_config"].kwargs])
lines = []
pin = AutotunePin("record", Path(sys.argv[1]), lines.append, lambda _: True, cell="r1-A", screen_ms=int(sys.argv[2]))
install(pin)
x = torch.zeros(100)
fill[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, 100)
pin.save()
print(json.dumps({"calls": calls, "lines": lines, "filled": float(x.sum()), "bench_calls": pin.bench_calls,
                  "heard": heard, "listener": hasattr(triton.knobs.autotuning, "listener"),
                  "record": Path(sys.argv[1]).read_text()}))
'''


@pytest.mark.parametrize("screen_ms, screen", [(20, "plain"), (20, "nan"), (0, "plain"), (20, "once"), (20, "short")])
def test_a_tuning_cell_screens_the_candidates_then_times_those_near_the_fastest_in_full(
        tmp_path: Path, screen_ms: int, screen: str) -> None:
    # A real @triton.autotune kernel in the interpreter, in a process of its own (the pin patches Triton's
    # Autotuner class), with a stand-in for the GPU's benchmarker.  Screened: a throw-away timing of the first
    # candidate (the card ramping from idle), every candidate for 20 ms, then the two within 5% of the fastest
    # (BLOCK 16 and 32) for Triton's own 25 + 100 ms, and the fastest of those (32) is chosen, as Triton's full pass
    # over all four (--ab-autotune-screen 0) chooses.  A NaN screen timing is neither the fastest nor a finalist.
    # Triton's TRITON_PRINT_AUTOTUNING lines and its listener hear of the key either way.
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "tune.py"
    script.write_text(SCREENED_TUNING)
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_PRINT_AUTOTUNING": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "op.json"), str(screen_ms), screen], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["filled"] == 100.0  # the chosen config ran
    assert '"BLOCK": 32' in out["record"], out["record"]
    assert re.search(r"Triton autotuning for function fill,\nwith key as \(100, 'torch.float32'\),\nfinished after "
                     r"\d+\.\d\ds,\nbest config selected: BLOCK: 32,", done.stdout), done.stdout
    if out["listener"] and screen_ms:
        assert out["heard"] == [[[100, "torch.float32"], {"BLOCK": 32}]]
    if screen == "once":
        # One launch each; 64 (1.5x the fastest launch) and 128 left out; 16 and 32 screened, then timed in full.
        assert out["calls"] == [[16, 5, 20], ["once", 16], ["once", 32], ["once", 64], ["once", 128], [16, 5, 20],
                                [32, 5, 20], [16, 25, 100], [32, 25, 100]]
        assert out["bench_calls"] == 13  # 4 untimed launches (each candidate loaded), then 4 timed ones
        assert any(re.search(r"autotune: kernel=.*fill key=\['100', 'torch.float32'\]: 4 candidates timed for one "
                             r"launch each, 2 at 1.5x the fastest \(1.000 ms\) or slower left out, 2 candidates "
                             r"screened for 20 ms each, 2 within 5% of the fastest timed in full, in \d+\.\ds; "
                             r"chose: .*'BLOCK': 32", line) for line in out["lines"]), out["lines"]
    elif screen == "short":
        once = [["once", block] for block in (16, 32, 64, 128)]
        assert out["calls"] == [[16, 5, 20], *once, [16, 5, 20], [32, 5, 20], [64, 5, 20], [128, 5, 20],
                                [16, 25, 100], [32, 25, 100]]
        assert any("4 candidates timed for one launch each, the fastest 0.100 ms, under 0.5 ms, too short to rank "
                   "by: 4 candidates screened for 20 ms each, 2 within 5%" in line
                   for line in out["lines"]), out["lines"]
    elif screen_ms:
        # With 16's NaN, 32 is the one finalist: chosen without a second timing.
        finalists = [] if screen == "nan" else [[16, 25, 100], [32, 25, 100]]
        assert out["calls"] == [[16, 5, 20], [16, 5, 20], [32, 5, 20], [64, 5, 20], [128, 5, 20]] + finalists
        assert out["bench_calls"] == 5 + len(finalists)
        assert any(re.search(r"autotune: kernel=.*fill key=\['100', 'torch.float32'\]: 4 candidates screened for "
                             rf"20 ms each, {len(finalists) or 1} within 5% of the fastest timed in full, in \d+\.\ds; "
                             r"chose: .*'BLOCK': 32", line) for line in out["lines"]), out["lines"]
    else:
        assert out["calls"] == [[16, 25, 100], [32, 25, 100], [64, 25, 100], [128, 25, 100]]
        assert not any("screened" in line for line in out["lines"])


@pytest.mark.parametrize(("once", "kept", "said"), [
    ({"a": 2.0, "b": 2.99, "c": 3.0, "d": math.inf, "e": math.nan}, ["a", "b"],
     "5 candidates timed for one launch each, 1 at 1.5x the fastest (2.000 ms) or slower left out, 2 failed, "),
    ({"a": math.inf, "b": math.nan}, ["a", "b"], "2 candidates timed for one launch each, none got a time: "),
    ({"a": 0.4, "b": 4.0}, ["a", "b"],
     "2 candidates timed for one launch each, the fastest 0.400 ms, under 0.5 ms, too short to rank by: "),
    ({}, ["a", "b"], ""),
])
def test_one_launch_leaves_out_the_candidates_well_behind_the_fastest_and_never_a_failed_one(
        once: dict[str, float], kept: list[str], said: str) -> None:
    # 3.0 is 1.5x the fastest 2.0 (left out), 2.99 just under (kept); a launch that failed (inf, NaN) is neither
    # the fastest nor kept, and counted apart; without a finite launch, or the fastest under 0.5 ms, all are kept.
    pruned = list(once) or ["a", "b"]
    got, line = prescreened(pruned, {config: [ms] * 3 for config, ms in once.items()})
    assert (got, line) == (kept, said)


def test_one_launch_is_timed_as_one_of_do_benchs_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in for the GPU driver (none here): its device interface's events read a clock the launch advances.
    from triton.runtime import driver

    seen: list[str] = []
    clock = [0.0]

    class DeviceEvent:  # torch.cuda.Event
        def __init__(self, enable_timing: bool) -> None:
            assert enable_timing
            self.at = 0.0

        def record(self) -> None:
            seen.append("record")
            self.at = clock[0]

        def elapsed_time(self, end: DeviceEvent) -> float:
            return end.at - self.at

    class Device:  # torch.cuda
        Event = DeviceEvent

        @staticmethod
        def synchronize() -> None:
            seen.append("sync")

    class Driver:
        @staticmethod
        def get_device_interface() -> type[Device]:
            return Device

        @staticmethod
        def get_empty_cache_for_benchmark() -> str:
            seen.append("alloc")
            return "l2 buffer"

        @staticmethod
        def clear_cache(cache: str) -> None:
            seen.append(f"clear {cache}")

    def launch() -> None:
        seen.append("launch")
        clock[0] += 2.5

    monkeypatch.setattr(type(driver), "active", property(lambda _: Driver))
    assert time_one_launch(launch, quantiles=(0.5, 0.2, 0.8)) == [2.5, 2.5, 2.5]
    assert seen == ["sync", "alloc", "clear l2 buffer", "record", "launch", "record", "sync"]
