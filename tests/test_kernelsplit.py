"""Kernels matched across the sides (``report/kernelsplit.py``): renamed, added, missing, several launches of one
kernel, and the split's sum against the cells' own time per call."""

from __future__ import annotations

import pytest

from pytest_abbench.report.kernelsplit import ADDED, MATCHED, MISSING, RENAMED, Launch, match, render


def launches(*specs: tuple[str, tuple[int, ...] | None, float]) -> list[Launch]:
    return [Launch(name, grid, us) for name, grid, us in specs]


def test_several_launches_of_one_kernel_are_matched_launch_by_launch() -> None:
    # A layer-norm backward: two Triton kernels, the first launched twice, and an ATen reduction.
    a = launches(("_bwd_dx", (256,), 10.0), ("_bwd_dx", (256,), 12.0), ("_bwd_dwdb", (8,), 4.0),
                 ("reduce_kernel", (1,), 2.0))
    b = launches(("_bwd_dx", (256,), 13.0), ("_bwd_dx", (256,), 12.0), ("_bwd_dwdb", (8,), 4.0),
                 ("reduce_kernel", (1,), 2.0))
    split = match(a, b, a_call_us=29.0, b_call_us=32.0)
    assert [(r.status, r.label, r.a_us, r.b_us) for r in split.rows] == [
        (MATCHED, "_bwd_dx", 10.0, 13.0), (MATCHED, "_bwd_dx", 12.0, 12.0), (MATCHED, "_bwd_dwdb", 4.0, 4.0),
        (MATCHED, "reduce_kernel", 2.0, 2.0)]
    assert split.rows[0].delta_pct == pytest.approx(30.0) and split.rows[1].delta_pct == pytest.approx(0.0)
    assert split.rows[0].share_a_pct == pytest.approx(10.0 / 28.0 * 100)
    # The sums against the cells' time per call: 28 of 29 us, 31 of 32 us.
    assert split.gap_a_pct == pytest.approx((28 / 29 - 1) * 100) and split.gap_b_pct == pytest.approx((31 / 32 - 1) * 100)
    assert not split.unmatched()


def test_a_kernel_renamed_by_the_switch_is_matched_by_order_and_grid() -> None:
    # Another cuBLAS kernel for the same GEMM under the switch: same grid, same place in the call.
    a = launches(("sm90_xmma_gemm_f16f16_tn", (132, 1, 1), 50.0), ("add_kernel", (64,), 3.0))
    b = launches(("ampere_h16816gemm_tn", (132, 1, 1), 70.0), ("add_kernel", (64,), 3.0))
    split = match(a, b)
    assert [(r.status, r.label) for r in split.rows] == [
        (RENAMED, "sm90_xmma_gemm_f16f16_tn -> ampere_h16816gemm_tn"), (MATCHED, "add_kernel")]
    assert split.rows[0].delta_pct == pytest.approx(40.0)
    assert split.gap_a_pct is None  # no time per call given: no gap claimed


def test_added_and_missing_kernels_are_named_not_matched() -> None:
    # Side B splits the reduction in two (a second kernel of another grid) and drops a copy.
    a = launches(("copy_kernel", (4,), 1.0), ("softmax", (128,), 20.0))
    b = launches(("softmax", (128,), 15.0), ("softmax_finish", (1,), 2.0))
    split = match(a, b)
    by_status = {r.status: r for r in split.rows}
    assert set(by_status) == {MISSING, MATCHED, ADDED}
    assert by_status[MISSING].label == "copy_kernel" and by_status[MISSING].b_us is None
    assert by_status[ADDED].label == "softmax_finish" and by_status[ADDED].delta_pct is None
    assert [r.label for r in split.unmatched()] == ["copy_kernel", "softmax_finish"]
    text = "\n".join(render(split, "n=128"))
    assert "copy_kernel [missing]: A 1.0 us (5%), B -, missing" in text
    assert "softmax_finish [added]: A -, B 2.0 us (12%), added" in text
    assert "softmax: A 20.0 us (95%), B 15.0 us (88%), -25.0%" in text


def test_a_shape_whose_pass_saw_no_kernel_says_so() -> None:
    assert render(match([], []), "n=1") == ["kernels of n=1: the profiling pass saw no kernel launch on either side"]


def test_a_launch_record_names_its_bad_field() -> None:
    with pytest.raises(ValueError, match="kernels.json shape n=1: a kernel launch needs name, us"):
        Launch.from_json({"name": "k", "grid": [1]}, "kernels.json shape n=1")
    assert Launch.from_json(Launch("k", (2, 1), 1.5).to_json(), "x") == Launch("k", (2, 1), 1.5)


def trace_of(calls: list[list[tuple[str, list[int], float]]], lag_us: float = 0.0,
             launched_by: str = "cuda_runtime") -> list[dict[str, object]]:
    """A chrome trace as torch.profiler writes it: each call a record_function range holding its CPU launches, each
    kernel on the GPU timeline ``lag_us`` later (the GPU behind the CPU), tied to its launch by correlation id."""
    events: list[dict[str, object]] = []
    ts, correlation = 0.0, 0
    for index, kernels in enumerate(calls):
        start = ts
        for name, grid, dur in kernels:
            correlation += 1
            events.append({"ph": "X", "cat": launched_by, "name": "cudaLaunchKernel", "ts": ts + 1, "dur": 2,
                           "args": {"correlation": correlation}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts + 1 + lag_us, "dur": dur,
                           "args": {"correlation": correlation, "grid": grid}})
            ts += 5
        events.append({"ph": "X", "cat": "user_annotation", "name": f"abbench_call_{index}", "ts": start,
                       "dur": ts - start})
        events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"abbench_call_{index}", "ts": start + lag_us,
                       "dur": ts - start})
    return events


def test_the_profiled_calls_are_told_apart_by_their_launches_and_averaged() -> None:
    from pytest_abbench.child.kernelprofile import per_call

    one = [("_fwd", [64, 1, 1], 10.0), ("_fwd", [64, 1, 1], 12.0), ("reduce", [1, 1, 1], 2.0)]
    slower = [("_fwd", [64, 1, 1], 14.0), ("_fwd", [64, 1, 1], 12.0), ("reduce", [1, 1, 1], 2.0)]
    # The GPU runs 100 us behind: the kernels of call 0 lie in call 1's range on the CPU timeline.
    launches, note = per_call(trace_of([one, slower, one], lag_us=100.0), 3)
    assert [(k.name, k.grid) for k in launches] == [("_fwd", (64, 1, 1)), ("_fwd", (64, 1, 1)), ("reduce", (1, 1, 1))]
    assert [k.us for k in launches] == pytest.approx([34 / 3, 12.0, 2.0]) and note == ""
    # A call that launched something else (a one-off copy) is left out of the average, and said so.
    launches, note = per_call(trace_of([one, one + [("copy", [1], 5.0)], one]), 3)
    assert [k.name for k in launches] == ["_fwd", "_fwd", "reduce"]
    assert note == "1 of 3 profiled calls launched other kernels; averaged over the 2 that launched the most common sequence"
    # A Triton kernel is launched through the driver API (cuLaunchKernelEx): its kernels count as well.
    launches, _ = per_call(trace_of([one, one], launched_by="cuda_driver"), 2)
    assert [k.name for k in launches] == ["_fwd", "_fwd", "reduce"]


def test_the_report_shows_each_shapes_kernels_from_the_cells_profiling_passes(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    # A finished root as cells write it (tests/helpers.synthetic_root: A 1.0 ms, B 1.2 ms per call), with the
    # kernels.jsonl a GPU cell's profiling pass writes (child/kernelprofile.record_shape's record), two rounds.
    import json

    from helpers import synthetic_root

    from pytest_abbench.child.kernelprofile import Launch as Profiled
    from pytest_abbench.cli import main
    from pytest_abbench.core.fileio import append_jsonl
    from pytest_abbench.core.layout import KERNELS_FILE

    synthetic_root(tmp_path, {"n=4096": [0.2, 0.2]})
    for rnd in (1, 2):
        for side, bwd_us in (("A", 700.0), ("B", 900.0)):
            kernels = [Profiled("_layer_norm_bwd_dx", (4096,), bwd_us), Profiled("_layer_norm_bwd_dwdb", (64,), 250.0)]
            append_jsonl(tmp_path / f"r{rnd}_{side}" / "op" / KERNELS_FILE,
                         {"shape": "n=4096", "calls": 5, "note": "", "kernels": [k.to_json() for k in kernels]})
    main(["summary", str(tmp_path)])
    out = capsys.readouterr().out
    assert "kernels of n=4096 (one call, launch order; shares of each side's kernel time):" in out
    assert "_layer_norm_bwd_dx: A 700.0 us (74%), B 900.0 us (78%), +28.6%" in out
    assert "_layer_norm_bwd_dwdb: A 250.0 us (26%), B 250.0 us (22%), +0.0%" in out
    assert "kernel sum A 950.0 us, B 1150.0 us; against the cells' time per call: side A -5.0%, side B -4.2%" in out
    split = json.loads((tmp_path / "report.json").read_text())["ops"][0]["kernel_splits"]["n=4096"]
    assert [row["status"] for row in split["rows"]] == ["matched", "matched"]
    # The markdown summary names the kernel that moved most.
    assert main(["comment", str(tmp_path)]) == 0
    assert "| op | n=4096 | `_layer_norm_bwd_dx` | +28.6% |" in capsys.readouterr().out


def test_a_demangled_name_is_shown_without_its_return_type_namespace_noise_and_arguments() -> None:
    from pytest_abbench.report.kernelsplit import short_name

    aten = ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::Half, float, false>"
            "(c10::Half const*, c10::Half const*, float const*, int)")
    assert short_name(aten) == "at::native::layer_norm_grad_input_kernel_vectorized<c10::Half, float, false>"
    assert short_name("_layer_norm_bwd_dx_fused") == "_layer_norm_bwd_dx_fused"
    assert short_name("k" * 100, width=10) == "kkkkkkk..."
