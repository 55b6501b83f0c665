"""The fixed words a cell prints when its measurement degraded, how they are counted, and run.log's bad bytes.

The plugin's own code writes each marker line twice: into run.log, where a
reader sees it in context, and into the cell's markers.log, which is what is
counted (``count_markers``).  A campaign (or a library it calls) that prints a
marker word only reaches run.log, so it cannot fake or hide a degraded
measurement; run.log is read only for its bytes that are not UTF-8
(``count_undecodable``).
"""

from __future__ import annotations

import codecs
from pathlib import Path

AUTOTUNE_REPLAY_FALLBACK = "AUTOTUNE_REPLAY_FALLBACK"
BENCHMARK_DIRECT_NO_CUDAGRAPH = "BENCHMARK_DIRECT_NO_CUDAGRAPH"
BENCHMARK_CAPTURE_POISONED = "BENCHMARK_CAPTURE_POISONED"
MARKERS = (AUTOTUNE_REPLAY_FALLBACK, BENCHMARK_DIRECT_NO_CUDAGRAPH, BENCHMARK_CAPTURE_POISONED)

_CHUNK = 1 << 20


def count_markers(log: Path) -> dict[str, int]:
    """The marker lines of a cell's markers.log (one a line, as ``is_marker_line`` keeps them), by marker word.

    The only place markers are counted from.  A missing file counts 0 everywhere: 0 is a clean count, never an
    error; a line cut short by a killed cell still counts once its marker word is whole.
    """
    counts = dict.fromkeys(MARKERS, 0)
    try:
        handle = open(log, "rb")
    except FileNotFoundError:
        return counts
    with handle:
        for raw in handle:  # split at b"\n" only: the writer turns a line's own newlines into spaces
            word = _first_word(raw.decode("utf-8", errors="replace").rstrip("\n"))
            if word in counts:
                counts[word] += 1
    return counts


def count_undecodable(log: Path) -> int:
    """Byte sequences of a run.log that are not UTF-8 (kept as written), counted in one read of any size.

    Reads bytes in 1 MiB chunks (a cell may print hundreds of MB, maybe with
    no newline), so memory stays flat; a character split at a chunk edge is
    not a bad one.  A missing log counts 0.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    undecodable = 0
    try:
        handle = open(log, "rb")
    except FileNotFoundError:
        return 0
    with handle:
        while True:
            chunk = handle.read(_CHUNK)
            undecodable += _count_undecodable(decoder, chunk)
            if not chunk:
                return undecodable


def _count_undecodable(decoder: codecs.IncrementalDecoder, chunk: bytes) -> int:
    """Replacement characters the decoder yields for ``chunk`` (an empty chunk flushes it)."""
    if chunk and decoder.getstate()[0] == b"":
        try:
            chunk.decode("utf-8")  # fast path: a clean chunk with nothing pending
            return 0
        except UnicodeDecodeError:
            pass  # bad bytes, or a character split at the chunk edge: let the decoder sort it out
    return decoder.decode(chunk, final=not chunk).count("\ufffd")


def is_marker_line(line: str) -> bool:
    """A line that starts with a marker word: the ones the cell's markers.log keeps."""
    return _first_word(line) in MARKERS


def _first_word(line: str) -> str:
    return line.partition(" ")[0]
