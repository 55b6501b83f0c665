"""``--ab-providers``: a ``triton.testing.perf_report`` script runs as a campaign without a rewrite.

Real pytest sessions on Triton's interpreter, real cells, the real ``triton.testing``: the script below is the
vector-add tutorial's benchmark at sizes the interpreter runs in milliseconds.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from pytest_abbench.campaign.perf_report import Ms, read_units
from pytest_abbench.core.status import read_status

KERNEL = '''
import torch
import triton
import triton.language as tl

DEVICE = triton.runtime.driver.active.get_active_torch_device()


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 64),)](x, y, out, x.numel(), BLOCK=64)
    return out
'''

SIZES = [16, 32, 64, 128, 256]

# Two providers, five sizes, GB/s from do_bench's quantiles, and the tutorial's sweep at import.
VECTOR_ADD = KERNEL + f'''

@triton.testing.perf_report(triton.testing.Benchmark(
    x_names=['size'], x_vals={SIZES}, x_log=True, line_arg='provider', line_vals=['triton', 'torch'],
    line_names=['Triton', 'Torch'], ylabel='GB/s', plot_name='vector-add', args={{}}))
def benchmark(size, provider):
    x = torch.rand(size, device=DEVICE, dtype=torch.float32)
    y = torch.rand(size, device=DEVICE, dtype=torch.float32)
    quantiles = [0.5, 0.2, 0.8]
    if provider == 'torch':
        ms, min_ms, max_ms = triton.testing.do_bench(lambda: x + y, quantiles=quantiles)
    if provider == 'triton':
        ms, min_ms, max_ms = triton.testing.do_bench(lambda: add(x, y), quantiles=quantiles)
    gbps = lambda ms: 3 * x.numel() * x.element_size() * 1e-9 / (ms * 1e-3)
    return gbps(ms), gbps(max_ms), gbps(min_ms)


benchmark.run(print_data=True, show_plots=True)
'''

# The same op written as a campaign by hand: what the adapted script must look like in the report.
HANDWRITTEN = KERNEL.replace("DEVICE = triton.runtime.driver.active.get_active_torch_device()", "") + '''
import os
from pytest_abbench import Case, Op, Switch

def build(shape, device):
    x = torch.rand(shape["size"], device=device)
    y = torch.rand(shape["size"], device=device)
    run = (lambda: x + y) if os.environ["PROVIDER"] == "torch" else (lambda: add(x, y))
    return Case(run=run)

OPS = [Op("vector-add-by-hand", build=build, shapes={"core": [{"size": n} for n in %r]})]
SWITCH = Switch(env_a={"PROVIDER": "torch"}, env_b={"PROVIDER": "triton"})
''' % (SIZES,)

# Stands in for a broken triton.testing.do_bench in every process of the session (cells included): it answers
# 777 ms and leaves a file behind.  A cell that took the script's own timing would show either.
WRONG_DO_BENCH = '''
import os
import triton.testing

def do_bench(fn, *args, **kwargs):
    open(os.environ["WRONG_DO_BENCH_CALLED"], "a").write("called\\n")
    quantiles = kwargs.get("quantiles")
    return [777.0] * len(quantiles) if quantiles else 777.0

triton.testing.do_bench = do_bench
'''

FAST = ["--ab-rounds", "2", "--ab-level", "core", "--ab-ir-target", "none", "-p", "no:cacheprovider"]


def shape_rows(stdout: str, op: str) -> dict[str, list[str]]:
    """The report's shape rows of ``op``: shape id -> the row's columns."""
    rows: dict[str, list[str]] = {}
    inside = False
    for line in stdout.splitlines():
        if line.startswith("== "):
            inside = line.startswith(f"== {op}:")
        elif inside and re.match(r"^   size=\d+ ", line):
            columns = line.split()
            rows[columns[0]] = columns
    return rows


def header_of(stdout: str, op: str) -> str:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"== {op}:"))
    return next(line for line in lines[start:] if line.lstrip().startswith("shape "))


def test_two_providers_as_the_sides_run_like_a_handwritten_campaign(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(vector_add=VECTOR_ADD, handwritten=HANDWRITTEN)
    result = campaign_dir.runpytest_subprocess("vector_add.py", "handwritten.py", "--ab-providers", "torch,triton",
                                               "--ab-root", "root", *FAST)
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=8)  # 2 ops x 2 rounds x 2 sides
    result.stdout.fnmatch_lines([
        "abbench: vector_add.py: vector_add.py:* calls benchmark.run(...) at import: skipped under --ab-providers*",
        "abbench: 8 cells, 2 ops, 2 rounds, backend interpreter*",
        "switch (side B) of vector-add: provider=torch -> provider=triton",
        "switch (side B) of vector-add-by-hand: PROVIDER=triton A:PROVIDER=torch",
    ])
    out = result.stdout.str()
    adapted, by_hand = shape_rows(out, "vector-add"), shape_rows(out, "vector-add-by-hand")
    assert list(adapted) == list(by_hand) == [f"size={n}" for n in SIZES]
    assert header_of(out, "vector-add") == header_of(out, "vector-add-by-hand")
    assert all(len(adapted[s]) == len(by_hand[s]) for s in adapted)  # the same verdict columns, filled
    # GB/s became the work of a call: the report derives throughput from the cells' own times.
    for n in SIZES:
        result.stdout.fnmatch_lines([f"     size={n} * A * GB/s, B * GB/s"])
    rows = [r for r in read_status(campaign_dir.path / "root") if r.op == "vector-add"]
    assert sorted((r.round, r.side, r.success, r.failed) for r in rows) == [
        (1, "A", 5, 0), (1, "B", 5, 0), (2, "A", 5, 0), (2, "B", 5, 0)]
    log = (campaign_dir.path / "root" / "r1_A" / "vector-add" / "run.log").read_text()
    assert re.search(r"perf_report benchmark \(vector_add.py:\d+\), provider='torch', size=16: timing the callable "
                     r"given to do_bench at vector_add.py:\d+; its quantiles argument is ignored", log), log
    assert "it returns a throughput (ylabel 'GB/s'): reported as time, with throughput derived from 192 bytes" in log


def test_one_provider_under_a_switch_never_takes_the_scripts_own_timing(campaign_dir: pytest.Pytester,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    campaign_dir.makepyfile(vector_add=VECTOR_ADD)
    site = campaign_dir.mkdir("site")
    (site / "sitecustomize.py").write_text(WRONG_DO_BENCH)
    called = campaign_dir.path / "wrong-do-bench-called"
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("WRONG_DO_BENCH_CALLED", str(called))
    result = campaign_dir.runpytest_subprocess("vector_add.py", "--ab-providers", "triton",
                                               "--ab-switch-env", "ABBENCH_TEST_SWITCH=1", "--ab-root", "root", *FAST)
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["switch (side B): ABBENCH_TEST_SWITCH=1;*", "== vector-add: rounds 2/2*"])
    # The stand-in was in place in every cell: the broken do_bench was never called ...
    assert not called.exists(), called.read_text()
    # ... and no time the report shows is its 777 ms.
    report = json.loads((campaign_dir.path / "root" / "report.json").read_text())
    shapes = report["ops"][0]["shapes"]
    assert [s["shape"] for s in shapes] == [f"size={n}" for n in SIZES]
    assert all(0 < s["a_ms"] < 100 and 0 < s["b_ms"] < 100 for s in shapes), shapes


REFUSED = KERNEL + '''

def _bench(**kw):
    return triton.testing.Benchmark(x_names=['n'], x_vals=[8], line_arg='provider', line_vals=['a'],
                                    line_names=['A'], ylabel='ms', args={}, **kw)


@triton.testing.perf_report(_bench(plot_name='twice'))
def twice(n, provider):
    x = torch.ones(n, device=DEVICE)
    return triton.testing.do_bench(lambda: add(x, x)) + triton.testing.do_bench_cudagraph(lambda: x + x)


@triton.testing.perf_report(_bench(plot_name='never'))
def never(n, provider):
    return 1.0


@triton.testing.perf_report(_bench(plot_name='modes'))
def modes(n, provider):
    x = torch.ones(n, device=DEVICE)
    return triton.testing.do_bench(lambda: add(x, x), warmup=5, return_mode="median") * 1000
'''


def test_a_function_that_times_twice_or_never_fails_its_shape_by_name(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(refused=REFUSED)
    result = campaign_dir.runpytest_subprocess("refused.py", "--ab-providers", "a",
                                               "--ab-switch-env", "ABBENCH_TEST_SWITCH=1",
                                               "--ab-root", "root", "--ab-rounds", "1", "--ab-ir-target", "none",
                                               "-p", "no:cacheprovider")
    out = result.stdout.str()
    rows = {r.op: r for r in read_status(campaign_dir.path / "root") if r.side == "A"}
    assert (rows["twice"].failed, rows["never"].failed, rows["modes"].success) == (1, 1, 1), out
    logs = {op: (campaign_dir.path / "root" / "r1_A" / op / "run.log").read_text() for op in rows}
    assert re.search(r"perf_report twice \(refused.py:\d+\), provider='a', n=8: called 2 timers \(do_bench at "
                     r"refused.py:\d+, do_bench_cudagraph at refused.py:\d+\); an op times one callable", logs["twice"])
    assert ("perf_report never (refused.py:" in logs["never"] and "returned without calling triton.testing.do_bench "
            "or do_bench_cudagraph, so there is no callable to time" in logs["never"])
    # The diagnosis is the whole story: no traceback into the plugin after it (there was one per shape).
    assert "Traceback" not in logs["twice"] + logs["never"] and "Traceback" not in out
    # Arguments that shape the script's own timing are accepted, named and ignored; a time in us is a time.
    assert ("its warmup, return_mode arguments are ignored (the cell takes its own samples with its own timer); "
            "it returns a time (ylabel 'ms'): reported as time") in logs["modes"]


BAD_X_VALS = KERNEL + '''
@triton.testing.perf_report(triton.testing.Benchmark(x_names=['dtype'], x_vals=[torch.float16], line_arg='provider',
                            line_vals=['a'], line_names=['A'], ylabel='ms', plot_name='dtypes', args={}))
def dtypes(dtype, provider):
    pass
'''

NO_PROVIDER = KERNEL + '''
@triton.testing.perf_report(triton.testing.Benchmark(x_names=['n'], x_vals=[8], line_arg='provider',
                            line_vals=['torch', 'cuda-graphs'], line_names=['Torch', 'Graphs'], ylabel='ms',
                            plot_name='providers', args={}))
def providers(n, provider):
    pass
'''


TWO_NAMES_ONE_OP = KERNEL + """
def _b(name):
    return triton.testing.Benchmark(x_names=['n'], x_vals=[8], line_arg='provider', line_vals=['a'],
                                    line_names=['A'], ylabel='ms', plot_name=name, args={})


@triton.testing.perf_report(_b('matmul/fp16'))
def slash(n, provider):
    pass


@triton.testing.perf_report(_b('matmul:fp16'))
def colon(n, provider):
    pass
"""

ONE_NAME_IN_A_LIST = KERNEL + """
@triton.testing.perf_report([triton.testing.Benchmark(x_names=['n'], x_vals=[8], line_arg='provider', line_vals=['a'],
                                                      line_names=['A'], ylabel='ms', plot_name='same', args={})] * 2)
def listed(n, provider):
    pass
"""


def test_two_benchmarks_of_one_op_name_are_told_apart_and_the_fix_fits_the_cause(campaign_dir: pytest.Pytester
                                                                                 ) -> None:
    """Distinct plot names that clean to one op name were told to be made distinct; two Benchmarks of one list were
    both named by their function's line."""
    campaign_dir.makepyfile(two_names=TWO_NAMES_ONE_OP, one_list=ONE_NAME_IN_A_LIST)
    result = campaign_dir.runpytest_subprocess("two_names.py", "one_list.py", "--ab-providers",
                                               "a", "--ab-switch-env", "ABBENCH_TEST_SWITCH=1", "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stdout.fnmatch_lines_random([
        "*two_names.py: two benchmarks are both op 'matmul_fp16' (two_names.py:* and two_names.py:*); their plot_name "
        "values 'matmul/fp16' and 'matmul:fp16' differ only in characters that become '_'*make them differ in those*",
        "*one_list.py: two benchmarks are both op 'same' (one_list.py:*, Benchmark 0 of its list and one_list.py:*, "
        "Benchmark 1 of its list); give them distinct plot_name values*",
    ])


FUSED_FLAG = KERNEL + """
@triton.testing.perf_report(triton.testing.Benchmark(x_names=['n'], x_vals=[16], line_arg='fused',
                            line_vals=[False, True], line_names=['eager', 'fused'], ylabel='ms', plot_name='fused',
                            args={}))
def fused(n, fused):
    x = torch.rand(n, device=DEVICE)
    return triton.testing.do_bench((lambda: add(x, x)) if fused else (lambda: x + x))
"""


def test_the_switch_line_names_the_argument_the_providers_are_passed_as(campaign_dir: pytest.Pytester) -> None:
    """line_arg 'fused' with line_vals [False, True]: the switch read 'provider=False -> provider=True'."""
    campaign_dir.makepyfile(fused=FUSED_FLAG)
    result = campaign_dir.runpytest_subprocess("fused.py", "--ab-providers", "False,True",
                                               "--ab-root", "root", "--ab-rounds", "1", "--ab-ir-target", "none",
                                               "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines(["switch (side B): fused=False -> fused=True;*"])


def test_scripts_the_adapter_cannot_read_are_collection_errors_naming_what(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(bad_x_vals=BAD_X_VALS, no_provider=NO_PROVIDER,
                            no_function="import triton\n# mentions perf_report in a comment only\n",
                            broken="import triton\nperf_report = 1\nraise ValueError('broken on import')\n",
                            exits="import sys\nimport triton  # perf_report\nif True:\n    sys.exit(3)\n")
    result = campaign_dir.runpytest_subprocess("bad_x_vals.py", "no_provider.py", "no_function.py", "broken.py",
                                               "exits.py",
                                               "--ab-providers", "a", "--ab-switch-env",
                                               "ABBENCH_TEST_SWITCH=1", "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stdout.fnmatch_lines_random([
        "*bad_x_vals.py: op 'dtypes', level 'smoke', shape 0, parameter 'dtype': torch.float16 is a dtype, not JSON data*",
        "*no_provider.py: no perf_report benchmark runs provider 'a': providers (no_provider.py:*) has no 'a' among "
        "its line_vals *'torch', 'cuda-graphs'*",
        "*no_function.py: no @triton.testing.perf_report function at its top level*",
        "*broken.py: importing it raised ValueError: broken on import*",
        # Before: "the process reading its perf_report functions exited 3 without an answer:" and an empty line.
        "*exits.py: importing it called sys.exit(3) at exits.py:4, so it defines nothing to run*",
    ])


@pytest.mark.parametrize("args, message", [
    (["--ab-providers", "a,b,c"], "*expected one line_vals entry NAME (both sides) or two A,B*got 'a,b,c'*"),
    (["--ab-providers", "a, b"], "*expected one line_vals entry NAME*got 'a, b'*"),
    (["--ab-providers", "a,a"], "*'a,a' names one provider twice*--ab-providers a --ab-switch-env KEY=VALUE*"),
    # Before, this ran both sides on the same code, the IR gate skipped every op, and the session said "clean".
    (["--ab-providers", "triton"], "*--ab-providers triton without --ab-switch-env: both sides would run "
                                   "the same code*--ab-allow-no-ir-diff to time an A/A*"),
    (["--ab-pytest-benchmark"], "*--ab-pytest-benchmark without --ab-switch-env: both sides would run the same*"),
])
def test_provider_options_are_checked_before_anything_runs(campaign_dir: pytest.Pytester, args: list[str],
                                                           message: str) -> None:
    campaign_dir.makepyfile(vector_add=VECTOR_ADD)
    result = campaign_dir.runpytest("vector_add.py", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}"])


def test_a_script_named_without_the_option_is_not_imported_and_says_how(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(vector_add=VECTOR_ADD.replace("benchmark.run(", "open('ran', 'w'); benchmark.run("))
    result = campaign_dir.runpytest("vector_add.py")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*vector_add.py holds triton.testing.perf_report benchmarks: run it as a campaign "
                                 "with --ab-providers NAME*"])
    assert not (campaign_dir.path / "ran").exists()


@pytest.mark.parametrize("compute, ylabel, expected, note", [
    (lambda ms: 3 * 1024 * 4 * 1e-9 / (ms * 1e-3), "GB/s", {"bytes": 12288.0}, "derived from 1.229e+04 bytes"),
    (lambda ms: 2 * 64 * 64 * 64 * 1e-12 / (ms * 1e-3), "TFLOPS", {"flops": 524288.0}, "derived from 5.243e+05 flops"),
    (lambda ms: ms * 1000, "us", None, "it returns a time (ylabel 'us'): reported as time"),
    (lambda ms: (ms, ms, ms), "", None, "it returns a time (no ylabel)"),
    (lambda ms: 1e6 / ms, "items/s", None, "a throughput in units the ylabel 'items/s' does not name"),
    (lambda ms: ms + 0.5, "ms", None, "is not computed from do_bench's time in a way the tool can follow"),
])
def test_units_are_read_from_the_functions_arithmetic(compute, ylabel: str, expected, note: str) -> None:  # type: ignore[no-untyped-def]
    work, said = read_units(compute(Ms(1.0)), ylabel)
    assert (work.to_json() if work else None) == (pytest.approx(expected) if expected else None)
    assert note in said, said


def test_the_probe_keeps_pytests_process_free_of_torch_and_triton(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(vector_add=VECTOR_ADD, conftest=textwrap.dedent('''
        import sys
        def pytest_collection_finish(session):
            print("heavy modules:", sorted(m for m in ("torch", "triton") if m in sys.modules))
    '''))
    result = campaign_dir.runpytest_subprocess("vector_add.py", "--ab-providers", "triton",
                                               "--collect-only", "-s", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*<Function vector-add[[]r1-A[]]>*", "heavy modules: []"])


def test_the_stand_in_do_bench_shows_the_originals_arguments() -> None:
    """The autotune pin's screen reads warm-up and repeats off the autotuner's benchmarker, which in a perf_report
    cell is the stand-in; before, the stand-in showed (*args, **kwargs), and the screen left every tuning in those
    cells to Triton's full pass.  In a process of its own: the stand-ins replace triton.testing's functions."""
    import subprocess
    import sys

    probe = ("import inspect, triton.testing\n"
             "original = inspect.signature(triton.testing.do_bench)\n"
             "from pytest_abbench.campaign.perf_report import install_stand_ins\n"
             "install_stand_ins()\n"
             "shown = inspect.signature(triton.testing.do_bench)\n"
             "print(triton.testing.do_bench.__doc__.startswith('pytest-abbench'), shown == original,"
             " list(shown.parameters))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    stand_in, same, parameters = done.stdout.split(" ", 2)
    assert (stand_in, same) == ("True", "True") and "'warmup'" in parameters and "'rep'" in parameters, done.stdout


# The tutorials' form as published: the driver asked at import for properties, target and capability, the kernel
# checked at import, a list of Benchmarks (one without the torch provider), and a dtype among the args.
DRIVER_AT_IMPORT = KERNEL + '''
from triton.runtime import driver

properties = driver.active.utils.get_device_properties(DEVICE.index)
NUM_SM, WARP_SIZE = properties["multiprocessor_count"], properties["warpSize"]
TARGET = triton.runtime.driver.active.get_current_target()
assert (TARGET.backend, TARGET.arch, NUM_SM, WARP_SIZE) == ("cuda", 90, 132, 32), (TARGET, properties)
assert torch.cuda.get_device_capability()[0] == 9
x = torch.rand(16, device=DEVICE)
assert torch.allclose(add(x, x), x + x)


def _bench(name, providers, dtype):
    return triton.testing.Benchmark(x_names=['size'], x_vals=[16], line_arg='provider', line_vals=providers,
                                    line_names=providers, ylabel='GB/s', plot_name=name, args={'dtype': dtype})


@triton.testing.perf_report([_bench('add-f32', ['torch', 'triton'], torch.float32),
                             _bench('add-f16', ['triton'], torch.float16)])
def bench(size, provider, dtype):
    x = torch.rand(size, device=DEVICE, dtype=dtype)
    ms = triton.testing.do_bench(lambda: add(x, x) if provider == 'triton' else x + x)
    return 3 * x.numel() * x.element_size() * 1e-9 / (ms * 1e-3)
'''


def test_a_script_that_asks_the_driver_at_import_runs_without_a_gpu(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(bench=DRIVER_AT_IMPORT)
    timed = campaign_dir.runpytest_subprocess("bench.py", "--ab-providers", "torch,triton",
                                              "--ab-root", "timed", *FAST)
    assert timed.ret == 0, timed.stdout.str()
    timed.stdout.fnmatch_lines(["abbench: bench.py: op add-f16 (bench.py:*) has no 'torch' among its line_vals "
                                "[[]'triton'[]]: left out", "== add-f32: rounds 2/2, *"])
    # IR triage compiles in processes that launch nothing: the kernel the script launched at import is the one
    # its shapes use, and it is captured (Triton's in-memory cache had hidden it from a capture put in later).
    triage = campaign_dir.runpytest_subprocess("bench.py", "--ab-providers", "triton",
                                               "--ab-switch-env", "DISABLE_MMA_V3=1", "--ab-ir-only",
                                               "--ab-root", "triage", "-p", "no:cacheprovider")
    assert triage.ret == 0, triage.stdout.str()
    triage.stdout.fnmatch_lines(["== add-f16: rounds 0/1, *IR gate no_diff (compiled at core for cuda:90)",
                                 "== add-f32: rounds 0/1, *IR gate no_diff (compiled at core for cuda:90)"])


# A backward pass timed with grad_to_none: the callable checks that do_bench's clearing happened before each call.
BACKWARD = KERNEL + '''
@triton.testing.perf_report(triton.testing.Benchmark(x_names=['n'], x_vals=[8], line_arg='provider',
                            line_vals=['a'], line_names=['A'], ylabel='ms', plot_name='backward', args={}))
def backward(n, provider):
    x = torch.rand(n, device=DEVICE, requires_grad=True)
    y = (x * 3).sum()

    def step():
        assert x.grad is None, "x.grad was not cleared before this call: gradients accumulate"
        y.backward(retain_graph=True)

    return triton.testing.do_bench(step, grad_to_none=[x])
'''


def test_grad_to_none_is_cleared_before_every_call(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(backward=BACKWARD)
    result = campaign_dir.runpytest_subprocess("backward.py", "--ab-providers", "a",
                                               "--ab-switch-env", "ABBENCH_TEST_SWITCH=1", "--ab-root", "root",
                                               "--ab-rounds", "1", "--ab-ir-target", "none", "-p", "no:cacheprovider")
    rows = read_status(campaign_dir.path / "root")
    assert sorted((r.side, r.status, r.success, r.failed) for r in rows) == [("A", "ok", 1, 0), ("B", "ok", 1, 0)], \
        result.stdout.str()
    log = (campaign_dir.path / "root" / "r1_A" / "backward" / "run.log").read_text()
    assert "before each call .grad is set to None on the 1 tensor(s) of its grad_to_none, as do_bench does" in log


# A tutorial's sweep: 31 points of x_vals.
SWEEP = KERNEL + '''
@triton.testing.perf_report(triton.testing.Benchmark(x_names=['n'], x_vals=[128 * i for i in range(2, 33)],
                            line_arg='provider', line_vals=['a'], line_names=['A'], ylabel='ms', plot_name='sweep',
                            args={}))
def sweep(n, provider):
    x = torch.rand(n, device=DEVICE)
    return triton.testing.do_bench(lambda: add(x, x))
'''


@pytest.mark.parametrize("level, shapes", [("core", 8), ("comprehensive", 31)])
def test_the_core_level_takes_a_spread_subset_of_a_long_sweep(campaign_dir: pytest.Pytester, level: str,
                                                               shapes: int) -> None:
    campaign_dir.makepyfile(sweep=SWEEP)
    result = campaign_dir.runpytest_subprocess("sweep.py", "--ab-providers", "a",
                                               "--ab-switch-env", "ABBENCH_TEST_SWITCH=1", "--ab-level", level,
                                               "--ab-rounds", "1", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    notice = ("abbench: sweep.py: op sweep: the core level times 8 of its 31 points, spread from the first to the "
              "last (n=256, n=768, n=1408, n=1920, n=2432, n=2944, n=3584, n=4096); --ab-level comprehensive times "
              "them all")
    assert (notice in result.stdout.str()) == (level == "core")
    from pytest_abbench.campaign.perf_report import BenchmarkOp

    op = BenchmarkOp("sweep", "sweep", "sweep.py:1", ["n"], [{"n": 128 * i} for i in range(2, 33)], "provider",
                     ["a"], ["A"], "ms", "")
    assert len(op.shapes()[level]) == shapes and op.shapes()[level][-1].id == "n=4096"


# The fused-softmax tutorial's form: at import the kernel is compiled (warmup), asked for its registers and shared
# memory, launched as a compiled kernel, and its output checked; the kernel calls triton.language's own @jit
# helpers (tl.max, tl.sum).
COMPILED_AT_IMPORT = KERNEL + '''
@triton.jit
def row_max_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    row = tl.load(x_ptr + tl.program_id(0) * n + offsets, mask=offsets < n, other=-float("inf"))
    tl.store(out_ptr + tl.program_id(0), tl.max(row, axis=0) + tl.sum(row * 0, axis=0))


def row_max(x):
    out = torch.empty(x.shape[0], device=x.device)
    block = triton.next_power_of_2(x.shape[1])
    kernel = row_max_kernel.warmup(x, out, x.shape[1], BLOCK=block, num_warps=1, grid=(1,))
    kernel._init_handles()
    assert kernel.n_regs > 0 and kernel.n_spills == 0 and kernel.metadata.shared >= 0, kernel.n_regs
    kernel[(x.shape[0], 1, 1)](x, out, x.shape[1], block)
    return out


for columns in (16, 32):  # the second compiles after the first ran
    x = torch.rand(3, columns, device=DEVICE)
    assert torch.equal(row_max(x), x.max(dim=1).values), "the kernel's output at import"


@triton.testing.perf_report(triton.testing.Benchmark(x_names=['rows'], x_vals=[2], line_arg='provider',
                            line_vals=['triton'], line_names=['Triton'], ylabel='ms', plot_name='row-max', args={}))
def bench(rows, provider):
    x = torch.rand(rows, 64, device=DEVICE)  # another block size: the kernel compiles again
    return triton.testing.do_bench(lambda: row_max(x))
'''


# The vector-add script asks Triton's active driver for its device at import, which a machine without a GPU lacks;
# the row-max one compiles, asks and checks its kernel at import.
@pytest.mark.parametrize("script, op", [(VECTOR_ADD, "vector-add"), (COMPILED_AT_IMPORT, "row-max")],
                         ids=["device-at-import", "kernel-checked-at-import"])
def test_ir_triage_reads_a_tutorial_form_script_without_a_gpu(campaign_dir: pytest.Pytester, script: str,
                                                              op: str) -> None:
    campaign_dir.makepyfile(bench=script)
    result = campaign_dir.runpytest_subprocess("bench.py", "--ab-providers", "triton",
                                               "--ab-switch-env", "DISABLE_MMA_V3=1", "--ab-ir-only",
                                               "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([f"== {op}: rounds 0/1, *IR gate no_diff (compiled at core for cuda:90)"])


def test_a_kernel_compiled_by_warmup_is_timed_in_the_interpreter(campaign_dir: pytest.Pytester) -> None:
    # Under the interpreter, warmup compiles for the IR target (registers and shared memory as on that GPU) and the
    # compiled kernel's launch runs interpreted; a compile after an interpreted launch sees the language unpatched.
    campaign_dir.makepyfile(bench=COMPILED_AT_IMPORT)
    result = campaign_dir.runpytest_subprocess("bench.py", "--ab-providers", "triton",
                                               "--ab-switch-env", "ABBENCH_TEST_SWITCH=1", "--ab-rounds", "1",
                                               "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["== row-max: rounds 1/1, *"])


def test_two_providers_are_never_gated_as_the_same_code(campaign_dir: pytest.Pytester) -> None:
    # Both sides launch the script's Triton kernel at import, so both capture the same TTGIR; side A's shapes then
    # run torch, side B's the kernel.  Identical captures must not skip the rounds of two different code paths.
    campaign_dir.makepyfile(bench=DRIVER_AT_IMPORT)
    result = campaign_dir.runpytest_subprocess("bench.py", "--ab-providers", "torch,triton", "--ab-rounds", "2",
                                               "--ab-level", "core", "-k", "add-f32", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["== add-f32: rounds 2/2, *IR gate diff*",
                                 "*the sides run different code (provider=torch -> provider=triton)*"])
