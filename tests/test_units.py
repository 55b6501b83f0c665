"""Units whose inputs are files: status rows under concurrency, marker counting, IR normalization, verdicts."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from helpers import synthetic_root

from pytest_abbench.irgate import normalize_ttgir
from pytest_abbench.markers import count_markers, scan_log
from pytest_abbench.report import build_report
from pytest_abbench.status import StatusRow, append_status_row, read_status


def _writer(root: str, worker: int) -> None:
    for i in range(200):
        append_status_row(Path(root), StatusRow(i, f"op{worker}", "A", "X=1", 0, "ok", 1.5, 3, 0))


def test_concurrent_writers_interleave_whole_rows(tmp_path: Path) -> None:
    procs = [multiprocessing.Process(target=_writer, args=(str(tmp_path), w)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    rows = read_status(tmp_path)
    assert len(rows) == 1600
    assert (tmp_path / "status.tsv").read_text().count("round\top") == 1
    assert {(r.op, r.round) for r in rows} == {(f"op{w}", i) for w in range(8) for i in range(200)}


def test_markers_are_counted_across_chunk_boundaries_and_bad_bytes(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    filler = b"x" * ((1 << 20) - 5) + b"\n"  # puts the second marker across the 1 MiB chunk edge
    log.write_bytes(b"AUTOTUNE_REPLAY_FALLBACK kernel=a\n" + filler + b"AUTOTUNE_REPLAY_FALLBACK k=b\n\xff\xfe\n"
                    b"BENCHMARK_CAPTURE_POISONED op=x\nnot BENCHMARK_DIRECT_NO_CUDAGRAPH mid-line\n")
    assert count_markers(log) == {"AUTOTUNE_REPLAY_FALLBACK": 2, "BENCHMARK_DIRECT_NO_CUDAGRAPH": 0,
                                  "BENCHMARK_CAPTURE_POISONED": 1}
    assert scan_log(log).undecodable == 2  # \xff and \xfe, counted in the same pass
    assert count_markers(tmp_path / "absent.log")["AUTOTUNE_REPLAY_FALLBACK"] == 0


def test_normalization_strips_locations_and_nothing_else() -> None:
    a = ('#loc = loc("/home/a/k.py":7:0)\n%0 = ttg.local_alloc %x : tensor<4xf32> loc(#loc3)\n'
         '%1 = tt.load %p loc(fused["/home/a/k.py":9:0, "(x)"])\n')
    b = a.replace("/home/a", "/tmp/other")
    assert normalize_ttgir(a) == normalize_ttgir(b)
    assert "ttg.local_alloc %x" in normalize_ttgir(a) and "loc" not in normalize_ttgir(a).replace("local_alloc", "")
    assert normalize_ttgir(a) != normalize_ttgir(a.replace("tensor<4xf32>", "tensor<8xf32>"))


def test_verdicts_from_per_round_deltas(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"fast": [-0.10, -0.098, -0.102, -0.101], "flip": [0.003, -0.002, 0.001, 0.0005],
                               "slow": [0.05, 0.052, 0.049, 0.051]})
    report = build_report(tmp_path)
    op = report.ops[0]
    shapes = {s.shape: s for s in op.shapes}
    assert shapes["fast"].verdict == "faster"
    assert shapes["fast"].ci_pct is not None and shapes["fast"].ci_pct[0] < -10.0 < shapes["fast"].ci_pct[1]
    assert shapes["flip"].sign_flip and shapes["flip"].verdict == "same"
    assert shapes["slow"].verdict == "slower"
    assert op.sign_flips == 1 and not report.caliber_mismatch


def test_failed_round_gives_no_verdict(tmp_path: Path) -> None:
    synthetic_root(tmp_path, {"s": [-0.1, -0.1, -0.1]}, failed=(2, "B"))
    op = build_report(tmp_path).ops[0]
    assert op.state == "no_verdict" and "r2-B TIMEOUT" in op.reason and not op.shapes


def _edit_identity(root: Path, cell: str, **changes: object) -> None:
    path = root / cell / "op" / "run_identity.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_summary_refuses_each_mismatched_axis(tmp_path: Path, capsys: "object") -> None:
    from pytest_abbench.cli import main

    for axis in ("backend", "device", "timer", "bench_level", "shape_mode", "tuner_cache", "direct_repeat"):
        root = tmp_path / axis
        synthetic_root(root, {"s": [0.1, 0.1]})
        _edit_identity(root, "r2_B", **{axis: "other"})
        assert main(["summary", str(root), "--ab-rounds"]) == 4
        out = capsys.readouterr().out  # type: ignore[attr-defined]
        assert f"!!! [caliber] op=op axis={axis}:" in out and "B='other'" in out
        assert main(["summary", str(root), "--allow-caliber-mismatch"]) == 0
        capsys.readouterr()  # type: ignore[attr-defined]


def test_summary_refuses_record_record_by_name_and_missing_identity(tmp_path: Path, capsys: "object") -> None:
    from pytest_abbench.cli import main

    synthetic_root(tmp_path / "rr", {"s": [0.1, 0.1]})
    _edit_identity(tmp_path / "rr", "r1_B", autotune_mode="record")
    assert main(["summary", str(tmp_path / "rr")]) == 4
    assert "each side timed its own tuner's pick" in capsys.readouterr().out  # type: ignore[attr-defined]
    synthetic_root(tmp_path / "gone", {"s": [0.1, 0.1]})
    (tmp_path / "gone" / "r2_A" / "op" / "run_identity.json").write_text('{"backend": "cu')
    assert main(["summary", str(tmp_path / "gone")]) == 4
    assert "not valid JSON" in capsys.readouterr().out  # type: ignore[attr-defined]
    assert main(["summary", str(tmp_path / "nowhere")]) == 2


def test_one_round_against_the_others_blocks_a_direction_verdict(tmp_path: Path) -> None:
    # The interval of these deltas excludes zero, but round 8 disagrees on the sign.
    synthetic_root(tmp_path, {"s": [0.1] * 7 + [-0.001]})
    shape = build_report(tmp_path).ops[0].shapes[0]
    assert shape.ci_pct is not None and shape.ci_pct[0] > 0
    assert shape.sign_flip and shape.verdict == "inconclusive"
