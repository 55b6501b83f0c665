"""The fixed words a cell prints when its measurement degraded, and how they are counted."""

from __future__ import annotations

from pathlib import Path

AUTOTUNE_REPLAY_FALLBACK = "AUTOTUNE_REPLAY_FALLBACK"
BENCHMARK_DIRECT_NO_CUDAGRAPH = "BENCHMARK_DIRECT_NO_CUDAGRAPH"
BENCHMARK_CAPTURE_POISONED = "BENCHMARK_CAPTURE_POISONED"
MARKERS = (AUTOTUNE_REPLAY_FALLBACK, BENCHMARK_DIRECT_NO_CUDAGRAPH, BENCHMARK_CAPTURE_POISONED)

_CHUNK = 1 << 20


def count_markers(log: Path) -> dict[str, int]:
    """Count marker lines in a run.log of any size or encoding.

    Reads bytes in 1 MiB chunks (a cell may print hundreds of MB, maybe with
    no newline and not UTF-8), so memory stays flat.  A missing log counts 0
    for every marker: 0 is a clean count, never an error.
    """
    counts = dict.fromkeys(MARKERS, 0)
    needles = {m: ("\n" + m).encode() for m in MARKERS}
    overlap = max(len(n) for n in needles.values()) - 1
    try:
        handle = open(log, "rb")
    except FileNotFoundError:
        return counts
    with handle:
        # A leading newline makes a marker on the very first line count too.
        tail = b"\n"
        while True:
            chunk = handle.read(_CHUNK)
            if not chunk:
                break
            window = tail + chunk
            for marker, needle in needles.items():
                # Occurrences wholly inside the carried-over tail were counted already.
                counts[marker] += window.count(needle) - tail.count(needle)
            tail = window[-overlap:]
    return counts


def count_undecodable(log: Path) -> int:
    """Byte sequences in a run.log that are not UTF-8 (kept as written; counted so a report can say so)."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    bad = 0
    try:
        handle = open(log, "rb")
    except FileNotFoundError:
        return 0
    with handle:
        while True:
            chunk = handle.read(_CHUNK)
            try:
                chunk.decode("utf-8")  # fast path: a clean chunk (a split character falls through)
                clean = bool(chunk) and decoder.getstate()[0] == b""
            except UnicodeDecodeError:
                clean = False
            if clean:
                continue
            bad += decoder.decode(chunk, final=not chunk).count("\ufffd")
            if not chunk:
                break
    return bad
