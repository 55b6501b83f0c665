"""Markers are counted from a cell's markers.log, one a line; run.log is read for its bytes that are not UTF-8,
across read-chunk edges."""

from __future__ import annotations

from pathlib import Path

from pytest_abbench.core.markers import count_markers, count_undecodable, is_marker_line


def test_markers_are_the_marker_lines_of_markers_log(tmp_path: Path) -> None:
    log = tmp_path / "markers.log"
    # A line ends at "\n" only: Unicode line breaks inside a marker's text do not start a line.
    lines = ["AUTOTUNE_REPLAY_FALLBACK kernel=a", "AUTOTUNE_REPLAY_FALLBACK k=b\x85\u2028AUTOTUNE_REPLAY_FALLBACK x",
             "BENCHMARK_CAPTURE_POISONED", "BENCHMARK_CAPTURE_POISONED op=x", "AUTOTUNE_REPLAY_FALLBACK k=c"]
    assert all(map(is_marker_line, lines))  # what the child keeps there
    # A byte that is not UTF-8 inside a line leaves it counted; the last line was cut short by a killed cell.
    log.write_bytes("\n".join(lines).encode() + b"\nBENCHMARK_DIRECT_NO_CUDAGRAPH r=\xff\nBENCHMARK_DIRECT_NO_CUD")
    assert count_markers(log) == {"AUTOTUNE_REPLAY_FALLBACK": 3, "BENCHMARK_DIRECT_NO_CUDAGRAPH": 1,
                                  "BENCHMARK_CAPTURE_POISONED": 2}
    assert count_markers(tmp_path / "absent.log") == dict.fromkeys(count_markers(log), 0)


def test_bytes_not_utf8_are_counted_across_chunk_edges_and_a_split_character_is_not_one(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    euro = "\u20ac".encode()  # three bytes, the first two before the 1 MiB chunk edge
    log.write_bytes(b"x" * ((1 << 20) - 2) + euro + b"\nAUTOTUNE_REPLAY_FALLBACK k=b\n\xff\xfe\n" + b"y" * 10)
    assert count_undecodable(log) == 2  # \xff and \xfe
    assert count_undecodable(tmp_path / "absent.log") == 0
