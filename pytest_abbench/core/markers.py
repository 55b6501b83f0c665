"""The fixed words a cell prints when its measurement degraded, and how they are counted.

The plugin's own code writes each marker line twice: into run.log, where a
reader sees it in context, and into the cell's markers.log, which is what is
counted.  A campaign (or a library it calls) that prints a marker word only
reaches run.log, so it cannot fake or hide a degraded measurement.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from pathlib import Path

AUTOTUNE_REPLAY_FALLBACK = "AUTOTUNE_REPLAY_FALLBACK"
BENCHMARK_DIRECT_NO_CUDAGRAPH = "BENCHMARK_DIRECT_NO_CUDAGRAPH"
BENCHMARK_CAPTURE_POISONED = "BENCHMARK_CAPTURE_POISONED"
MARKERS = (AUTOTUNE_REPLAY_FALLBACK, BENCHMARK_DIRECT_NO_CUDAGRAPH, BENCHMARK_CAPTURE_POISONED)

_CHUNK = 1 << 20


@dataclass
class LogScan:
    """What one pass over a run.log found."""

    markers: dict[str, int]
    undecodable: int  # byte sequences that are not UTF-8 (kept as written)


def scan_log(log: Path) -> LogScan:
    """Count marker lines and non-UTF-8 byte sequences in a run.log of any size, in one read.

    Reads bytes in 1 MiB chunks (a cell may print hundreds of MB, maybe with
    no newline and not UTF-8), so memory stays flat.  A missing log counts 0
    everywhere: 0 is a clean count, never an error.
    """
    counts = dict.fromkeys(MARKERS, 0)
    needles = {m: ("\n" + m).encode() for m in MARKERS}
    overlap = max(len(n) for n in needles.values()) - 1
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    undecodable = 0
    try:
        handle = open(log, "rb")
    except FileNotFoundError:
        return LogScan(counts, 0)
    with handle:
        # A leading newline makes a marker on the very first line count too.
        tail = b"\n"
        while True:
            chunk = handle.read(_CHUNK)
            window = tail + chunk
            for marker, needle in needles.items():
                # Occurrences wholly inside the carried-over tail were counted already.
                counts[marker] += window.count(needle) - tail.count(needle)
            tail = window[-overlap:]
            undecodable += _count_undecodable(decoder, chunk)
            if not chunk:
                break
    return LogScan(counts, undecodable)


def _count_undecodable(decoder: codecs.IncrementalDecoder, chunk: bytes) -> int:
    """Replacement characters the decoder yields for ``chunk`` (an empty chunk flushes it)."""
    if chunk and decoder.getstate()[0] == b"":
        try:
            chunk.decode("utf-8")  # fast path: a clean chunk with nothing pending
            return 0
        except UnicodeDecodeError:
            pass  # bad bytes, or a character split at the chunk edge: let the decoder sort it out
    return decoder.decode(chunk, final=not chunk).count("\ufffd")


def count_markers(log: Path) -> dict[str, int]:
    """Marker lines at the start of a line in ``log`` (a cell's markers.log; see ``scan_log``)."""
    return scan_log(log).markers


def is_marker_line(line: str) -> bool:
    """A line that starts with a marker word: the ones the cell's markers.log keeps."""
    return line.partition(" ")[0] in MARKERS
