"""Marker counting in a cell's run.log: across read-chunk edges, at line starts only, undecodable bytes counted."""

from __future__ import annotations

from pathlib import Path

from pytest_abbench.core.markers import count_markers, scan_log


def test_markers_are_counted_across_chunk_boundaries_and_bad_bytes(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    filler = b"x" * ((1 << 20) - 5) + b"\n"  # puts the second marker across the 1 MiB chunk edge
    log.write_bytes(b"AUTOTUNE_REPLAY_FALLBACK kernel=a\n" + filler + b"AUTOTUNE_REPLAY_FALLBACK k=b\n\xff\xfe\n"
                    b"BENCHMARK_CAPTURE_POISONED op=x\nnot BENCHMARK_DIRECT_NO_CUDAGRAPH mid-line\n")
    assert count_markers(log) == {"AUTOTUNE_REPLAY_FALLBACK": 2, "BENCHMARK_DIRECT_NO_CUDAGRAPH": 0,
                                  "BENCHMARK_CAPTURE_POISONED": 1}
    assert scan_log(log).undecodable == 2  # \xff and \xfe, counted in the same pass
    assert count_markers(tmp_path / "absent.log")["AUTOTUNE_REPLAY_FALLBACK"] == 0
