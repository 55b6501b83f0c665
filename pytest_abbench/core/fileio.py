"""Small file helpers shared by the parent and the cell child: atomic JSON, JSON-lines."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator


def current_umask() -> int:
    """The process umask, read without changing it where Linux says it (os.umask alone must set one)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` so that a reader sees the old file or the new one, never half of one.

    An existing file keeps its mode; a new one gets the mode a plain ``open``
    would give it (0644 under umask 022), like the logs beside it: mkstemp's
    own 0600 would hide it from the other users who read a shared root.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~current_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON atomically (``write_bytes_atomic``): indented, keys sorted, one trailing newline."""
    write_bytes_atomic(path, (json.dumps(data, indent=1, sort_keys=True, default=str) + "\n").encode())


class CorruptFileError(ValueError):
    """A JSON or JSON-lines file that cannot be parsed; the message names file and line."""


def read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptFileError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CorruptFileError(f"{path}: not valid JSON ({exc})") from None


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a JSON-lines file; a torn or corrupt line raises naming file and line."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError as exc:
                raise CorruptFileError(f"{path}:{number}: truncated or corrupt record ({exc})") from None
            if not isinstance(record, dict):
                raise CorruptFileError(f"{path}:{number}: expected an object, got {type(record).__name__}")
            yield record


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one record as one write, flushed: a crash loses at most the shape in flight."""
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
