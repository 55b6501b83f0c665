"""pytest-benchmark tests as campaigns (``--ab-pytest-benchmark``), end to end on the interpreter.

Each session is real: pytest's process collects the file through a probe process, the cells run the test in
their own process with the capturing ``benchmark`` fixture, and the report is the one a campaign file gets.
"Without pytest-benchmark" is the outer session run with ``-p no:benchmark``: the plugin is installed here
(requirements.txt), and the cells block it whether or not it is.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_abbench.core.results import read_results
from pytest_abbench.core.status import read_status

FAST = ("--ab-ir-target", "none", "--ab-samples", "1", "-p", "no:cacheprovider")
SWITCH = ("--ab-switch-env", "ABBENCH_TEST_SWITCH=1")

# A parametrized test, a test without the fixture, and a call counter that pytest-benchmark's own fixture (which
# calls fn many times to calibrate) would break: the cells' fixture calls it once.  Each side leaves a file
# saying which switch value its test saw.
PARAMETRIZED = textwrap.dedent('''
    import os
    from pathlib import Path

    import pytest
    import torch


    @pytest.mark.parametrize("n", [4, 8], ids=["n4", "n8"])
    def test_add(benchmark, n):
        x = torch.ones(n)
        calls = []

        def add_one(t):
            calls.append(1)
            return t + 1

        out = benchmark(add_one, x)
        assert calls == [1], f"the benchmark fixture called fn {len(calls)} times"
        assert out.sum().item() == 2 * n
        benchmark.extra_info["n"] = n
        seen = Path(__file__).with_name("seen-" + os.environ.get("ABBENCH_TEST_SWITCH", "off"))
        seen.write_text(str(n))


    def test_plain():
        pass
''')


@pytest.mark.parametrize("outer", [(), ("-p", "no:benchmark")], ids=["with-pytest-benchmark", "without"])
def test_a_parametrized_benchmark_test_runs_as_a_campaign(campaign_dir: pytest.Pytester, tmp_path: Path,
                                                          outer: tuple[str, ...]) -> None:
    campaign_dir.makepyfile(test_bench=PARAMETRIZED,
                            test_other="# no benchmark here\ndef test_ok():\n    pass\n")
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("test_bench.py", "test_other.py", "--ab-pytest-benchmark",
                                               "--ab-rounds", "2", "--ab-root", str(root), *SWITCH, *FAST, *outer,
                                               "-p", "no:xdist")
    # 2 rounds x 2 sides of the one op, and the file without the fixture run as pytest runs it.
    result.assert_outcomes(passed=5)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([
        "abbench: test_bench.py: 1 test(s) do not request the benchmark fixture and are not run under "
        "--ab-pytest-benchmark: test_plain",
        "abbench: 4 cells, 1 op, 2 rounds, backend interpreter*",
    ])
    result.stdout.fnmatch_lines(["*switch (side B): ABBENCH_TEST_SWITCH=1*", "== test_add: rounds 2/2, *",
                                 "*shape*A ms*B ms*delta*verdict*", "   n4 *", "   n8 *"])
    # pytest-benchmark, where loaded, timed nothing in pytest's process: no table of its own.
    assert "benchmark: 2 tests" not in result.stdout.str() and "Name (time in" not in result.stdout.str()
    rows = read_status(root)
    assert sorted((r.round, r.op, r.side, r.status, r.success) for r in rows) == [
        (1, "test_add", "A", "ok", 2), (1, "test_add", "B", "ok", 2),
        (2, "test_add", "A", "ok", 2), (2, "test_add", "B", "ok", 2)]
    assert {r.switch for r in rows} == {"ABBENCH_TEST_SWITCH=1"}
    results = list(read_results(root / "r1_B" / "test_add" / "results.jsonl"))
    assert [(r.shape, dict(r.params), r.status) for r in results] == [("n4", {"n": 4}, "ok"), ("n8", {"n": 8}, "ok")]
    # Both sides ran the same test, side B under the switch.
    assert (campaign_dir.path / "seen-off").exists() and (campaign_dir.path / "seen-1").exists()
    report = json.loads((root / "report.json").read_text())
    assert [o["op"] for o in report["ops"]] == ["test_add"]


def test_collect_only_lists_cells_named_by_the_test(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(test_bench=PARAMETRIZED)
    result = campaign_dir.runpytest_subprocess("test_bench.py", "--ab-pytest-benchmark", "--ab-rounds", "1",
                                               "--collect-only", "-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["test_bench.py::test_add[[]r1-A[]]", "test_bench.py::test_add[[]r1-B[]]",
                                 "2 tests collected*"])
    assert "test_plain" not in "\n".join(line for line in result.stdout.lines if line.startswith("test_bench.py"))


# pedantic with setup in a class (the op's name holds the class), and a test whose own body is slow around a fast
# call: the cells time the call, never the test.
PEDANTIC_AND_SLOW_BODY = textwrap.dedent('''
    import time

    import torch


    def scale(t, factor):
        return t * factor


    class TestScale:
        def test_scale(self, benchmark):
            def setup():
                return (torch.ones(4),), {"factor": 3}

            out = benchmark.pedantic(scale, setup=setup, rounds=7, iterations=1)
            assert out.sum().item() == 12


    def test_sleepy_body(benchmark):
        x = torch.ones(4)
        time.sleep(0.4)
        benchmark(torch.neg, x)
        time.sleep(0.4)
''')


def test_pedantic_and_a_slow_test_body_time_only_the_captured_call(campaign_dir: pytest.Pytester,
                                                                   tmp_path: Path) -> None:
    campaign_dir.makepyfile(test_bench=PEDANTIC_AND_SLOW_BODY)
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("test_bench.py", "--ab-pytest-benchmark", "--ab-rounds", "1",
                                               "--ab-root", str(root), *SWITCH, *FAST, "-n", "2")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["== TestScale.test_scale: rounds 1/1, *", "   default *"])
    for side in "AB":
        scale = list(read_results(root / f"r1_{side}" / "TestScale.test_scale" / "results.jsonl"))
        assert [(r.shape, r.status) for r in scale] == [("default", "ok")]
        sleepy = list(read_results(root / f"r1_{side}" / "test_sleepy_body" / "results.jsonl"))
        assert [(r.shape, r.status) for r in sleepy] == [("default", "ok")]
        # The test sleeps 0.8 s around its call: had its own time been taken, no sample would be under 400 ms.
        assert sleepy[0].samples_ms and max(sleepy[0].samples_ms) < 100, sleepy[0]
    log = (root / "r1_A" / "TestScale.test_scale" / "run_tail.log").read_text()  # under xdist: run.log's tail
    assert ("pytest-benchmark test test_bench.py::TestScale::test_scale (op TestScale.test_scale, shape default): "
            "timing scale as handed to benchmark.pedantic(...) at test_bench.py:15; its "
            "rounds=7 is ignored (the cell takes its own samples); its setup ran once more for the timed calls, "
            "not before each of them") in log


REFUSED = textwrap.dedent('''
    import torch


    def test_twice(benchmark):
        x = torch.ones(4)
        benchmark(torch.neg, x)
        benchmark(torch.abs, x)


    def test_never(benchmark):
        assert torch.ones(4).sum().item() == 4


    def test_failing(benchmark):
        out = benchmark(torch.neg, torch.ones(4))
        assert out.sum().item() == 4, "neg flips the sign"


    def test_skipping(benchmark):
        import pytest
        pytest.skip("needs a GPU")
''')


def test_tests_that_cannot_give_one_callable_are_refused_by_name(campaign_dir: pytest.Pytester,
                                                                 tmp_path: Path) -> None:
    campaign_dir.makepyfile(test_refused=REFUSED)
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("test_refused.py", "--ab-pytest-benchmark", "--ab-rounds", "1",
                                               "--ab-root", str(root), "-k", "r1-A", *SWITCH, *FAST, "-p", "no:xdist")
    result.assert_outcomes(failed=4, deselected=4)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*shape default: error: CampaignError: pytest-benchmark test test_refused.py::test_twice (op test_twice, "
        "shape default) called the benchmark fixture 2 times (benchmark(...) at test_refused.py:6, benchmark(...) "
        "at test_refused.py:7); an op times one callable: give each measurement its own test*",
        "*shape default: error: CampaignError: pytest-benchmark test test_refused.py::test_never (op test_never, "
        "shape default) passed without calling benchmark(...) or benchmark.pedantic(...): there is no callable "
        "to time*",
        "*shape default: error: CampaignError: pytest-benchmark test test_refused.py::test_failing (op "
        "test_failing, shape default) failed in its call: AssertionError: neg flips the sign*",
        "*shape default: error: CampaignError: pytest-benchmark test test_refused.py::test_skipping (op "
        "test_skipping, shape default) was skipped (needs a GPU): nothing to time*",
    ], consecutive=False)
    rows = {r.op: r for r in read_status(root)}
    assert {op: (r.status, r.failed) for op, r in rows.items()} == {
        op: ("FAILED_SHAPES", 1) for op in ("test_twice", "test_never", "test_failing", "test_skipping")}


def test_a_benchmark_fixture_of_the_users_own_is_named_instead_of_timing_nothing(campaign_dir: pytest.Pytester,
                                                                                 tmp_path: Path) -> None:
    # A conftest fixture overrides any plugin's: the cell's capturing fixture never reaches the test.
    campaign_dir.makeconftest("import pytest\n\n@pytest.fixture\ndef benchmark():\n"
                              "    return lambda fn, *args: fn(*args)\n")
    campaign_dir.makepyfile(test_own="def test_own(benchmark):\n    benchmark(abs, -1)\n")
    result = campaign_dir.runpytest_subprocess("test_own.py", "--ab-pytest-benchmark", "--ab-rounds", "1",
                                               "--ab-root", str(tmp_path / "root"), "-k", "r1-A", *SWITCH, *FAST,
                                               "-p", "no:xdist")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines([
        "*shape default: error: CampaignError: pytest-benchmark test test_own.py::test_own (op test_own, shape "
        "default): its benchmark fixture is a builtins.function, not the cell's capturing one: a conftest defines "
        "benchmark, or loads pytest-benchmark by module name (pytest_plugins); the cells need their own*"])


def test_a_test_file_that_does_not_collect_is_a_collection_error(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(test_broken="import no_such_module_abbench\n\ndef test_x(benchmark):\n    pass\n")
    result = campaign_dir.runpytest_subprocess("test_broken.py", "--ab-pytest-benchmark", "--collect-only",
                                               "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*pytest-benchmark tests: *test_broken.py: collecting it as pytest does failed:*",
                                 "*No module named 'no_such_module_abbench'*"])


def test_benchmark_only_would_skip_every_cell_and_is_refused(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(test_bench=PARAMETRIZED)
    result = campaign_dir.runpytest_subprocess("test_bench.py", "--ab-pytest-benchmark", "--benchmark-only",
                                               "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--ab-pytest-benchmark with --benchmark-only would skip every cell*"])


# A Triton kernel: the interpreter times it, and each cell compiles it again for cuda:90 without launching it,
# where the test's own check of the output cannot hold.
TRITON_TEST = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def add_kernel(x_ptr, y_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) + 1)


    def add_one(x):
        y = torch.empty_like(x)
        add_kernel[(1,)](x, y, N=x.numel())
        return y


    def test_add_kernel(benchmark):
        x = torch.arange(16, dtype=torch.float32)
        torch.testing.assert_close(benchmark(add_one, x), x + 1)
''')


@pytest.mark.slow
def test_the_ir_gate_compiles_the_captured_kernel_though_the_test_cannot_check_its_output(
        campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    campaign_dir.makepyfile(test_tri=TRITON_TEST)
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("test_tri.py", "--ab-pytest-benchmark", "--ab-rounds", "1",
                                               "--ab-root", str(root), "--ab-ir-target", "cuda:90", "--ab-samples",
                                               "1", *SWITCH, "-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(passed=2)
    # Both sides compiled the same kernel (a switch this kernel ignores): the gate compared real TTGIR.
    result.stdout.fnmatch_lines(["== test_add_kernel: rounds 1/1, *IR gate no_diff (compiled at smoke for cuda:90)*"])
    assert "IR capture for cuda:90 failed" not in (root / "r1_A" / "test_add_kernel" / "run.log").read_text()
    compile_log = (root / "r1_A" / "test_add_kernel" / "ir" / "compile.log").read_text()
    assert ("the test failed in its call: AssertionError: Tensor-likes are not close! (compile-only: its outputs "
            "are not computed, so it is not held against the op)") in compile_log
    assert list((root / "r1_A" / "test_add_kernel" / "ir").rglob("*.ttgir"))


# The public form: arrays as parameters under ids=, as a test timing torch.einsum does, and torch objects (a dtype,
# a tensor, a callable).  None of them is JSON data, and numpy prints a 1000x1000 array over many lines.
NOT_JSON_PARAMETERS = textwrap.dedent('''
    import numpy as np
    import pytest
    import torch

    ARRAYS = [np.random.rand(n, n) for n in (8, 16, 1000)]


    @pytest.mark.parametrize("arr", ARRAYS, ids=["small", "medium", "large"])
    def test_einsum(benchmark, arr):
        t = torch.from_numpy(arr[:8, :8].copy())
        benchmark(torch.einsum, "ij,jk->ik", t, t)


    @pytest.mark.parametrize("dtype,x,fn", [(torch.float16, torch.ones(2, 3), torch.neg)], ids=["f16"])
    def test_objects(benchmark, dtype, x, fn):
        benchmark(fn, x.to(dtype))
''')


def test_parameters_that_are_not_json_are_summarized_and_shapes_named_by_their_ids(campaign_dir: pytest.Pytester,
                                                                                    tmp_path: Path) -> None:
    campaign_dir.makepyfile(test_bench=NOT_JSON_PARAMETERS)
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("test_bench.py", "--ab-pytest-benchmark", "--ab-rounds", "1",
                                               "--ab-root", str(root), *SWITCH, *FAST, "-p", "no:xdist")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["== test_einsum: rounds 1/1, *", "   small *", "   medium *", "   large *"])
    einsum = {r.shape: dict(r.params) for r in read_results(root / "r1_B" / "test_einsum" / "results.jsonl")}
    assert einsum == {"small": {"arr": "ndarray(8x8, float64)"}, "medium": {"arr": "ndarray(16x16, float64)"},
                      "large": {"arr": "ndarray(1000x1000, float64)"}}
    objects = [(r.shape, dict(r.params), r.status)
               for r in read_results(root / "r1_A" / "test_objects" / "results.jsonl")]
    assert objects == [("f16", {"dtype": "torch.float16", "x": "Tensor(2x3, float32)",
                                "fn": "<built-in method neg of type object>"}, "ok")]


# Tests that only a GPU runs, as public benchmark files mark them: pytest skips them on a CPU, and so does the
# campaign, where before each became an op whose cells failed ("was skipped (CUDA not available): nothing to
# time") and the session exited 1 on a file pytest itself passes.
SKIP_MARKED = textwrap.dedent('''
    import pytest
    import torch


    def test_cpu(benchmark):
        benchmark(torch.neg, torch.ones(4))


    @pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
    def test_gpu_only(benchmark):
        benchmark(torch.neg, torch.ones(4, device="cuda"))


    @pytest.mark.parametrize("n", [4, pytest.param(1 << 30, marks=pytest.mark.skip(reason="too big"))],
                             ids=["small", "huge"])
    def test_sizes(benchmark, n):
        benchmark(torch.neg, torch.ones(n))
''')


def test_tests_that_skip_marks_skip_here_are_left_out_as_pytest_skips_them(campaign_dir: pytest.Pytester,
                                                                           tmp_path: Path) -> None:
    campaign_dir.makepyfile(test_bench=SKIP_MARKED)
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("test_bench.py", "--ab-pytest-benchmark", "--ab-rounds", "1",
                                               "--ab-root", str(root), *SWITCH, *FAST, "-p", "no:xdist")
    result.assert_outcomes(passed=4)  # test_cpu and test_sizes, one cell per side each
    assert result.ret == 0
    result.stdout.fnmatch_lines(["abbench: test_bench.py: 2 test(s) skipped here by their skip marks, as pytest "
                                 "would skip them, are not run: test_gpu_only (CUDA not available), "
                                 "test_sizes[[]huge[]] (too big)"])
    shapes = [r.shape for r in read_results(root / "r1_A" / "test_sizes" / "results.jsonl")]
    assert shapes == ["small"] and not (root / "r1_A" / "test_gpu_only").exists()
    # A file whose every benchmark test is skipped here is collected as pytest would: pytest says so itself.
    campaign_dir.makepyfile(test_gpu=SKIP_MARKED.split("@pytest.mark.parametrize")[0].replace(
        "def test_cpu(benchmark):\n    benchmark(torch.neg, torch.ones(4))\n", ""))
    result = campaign_dir.runpytest_subprocess("test_gpu.py", "--ab-pytest-benchmark", *SWITCH, "-p",
                                               "no:cacheprovider", "-p", "no:xdist", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED *CUDA not available"])
