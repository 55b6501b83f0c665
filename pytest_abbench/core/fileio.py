"""Small file helpers shared by the parent and the cell child: atomic JSON, JSON-lines."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, BinaryIO, Callable, Iterator, TypeVar, Union, get_args, get_origin, get_type_hints


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
    """Replace ``path`` so that a reader sees the old file or the new one, never half of one (``atomic_file``)."""
    with atomic_file(path) as handle:
        handle.write(data)


@contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content into; it replaces ``path`` when the block ends cleanly.

    A reader sees the old file or the new one, never half of one; a block
    that raises leaves ``path`` as it was.  An existing file keeps its mode;
    a new one gets the mode a plain ``open`` would give it (0644 under umask
    022), like the logs beside it: mkstemp's own 0600 would hide it from the
    other users who read a shared root.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~current_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            yield handle
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


def numbered_jsonl(path: Path, on_bad: Callable[[CorruptFileError], None] | None = None
                   ) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of a JSON-lines file; a torn or corrupt line raises naming file and line, or, with
    ``on_bad``, is handed to it and skipped (the lines after it are still read)."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError as exc:
                error = CorruptFileError(f"{path}:{number}: truncated or corrupt record ({exc})")
            else:
                if isinstance(record, dict):
                    yield number, record
                    continue
                error = CorruptFileError(f"{path}:{number}: expected an object, got {type(record).__name__}")
            if on_bad is None:
                raise error
            on_bad(error)


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one record as one write, flushed: a crash loses at most the shape in flight."""
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


SCHEMA_FIELD = "schema"  # the format version every file the package writes carries
_REQUIRED: Any = object()  # a field without a default: its absence is an error
_T = TypeVar("_T")


class FormatError(CorruptFileError):
    """A file that parses but does not hold its format: names the file, the field and what was expected."""


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# The field types ``Fields.declared`` checks: the type, its test, and the words for it.
_KINDS: dict[Any, tuple[Callable[[Any], bool], str]] = {
    str: (lambda v: isinstance(v, str), "text"), int: (_is_whole, "a whole number"),
    float: (_is_number, "a number"), bool: (lambda v: isinstance(v, bool), "true or false")}


class Fields:
    """One JSON object of a file, read field by field: each miss names the file (and line), the field, the want.

    ``where`` is how the object is named in messages: ``<path>`` or ``<path>:<line>``; ``prefix`` the
    dotted path of a nested object (``plan.``).
    """

    def __init__(self, where: str, data: Any, prefix: str = "") -> None:
        if not isinstance(data, dict):
            what = f"field {prefix[:-1]!r}: " if prefix else ""
            raise FormatError(f"{where}: {what}expected a JSON object, got {type(data).__name__}")
        self.where, self.data, self.prefix = where, data, prefix

    def error(self, name: str, expected: str, got: Any = _REQUIRED) -> FormatError:
        what = f"missing (expected {expected})" if got is _REQUIRED else f"expected {expected}, got {got!r}"
        return FormatError(f"{self.where}: field {self.prefix + name!r}: {what}")

    def version(self, known: int) -> int:
        """The object's format version; 1 when it has none (written before versions); newer than ``known`` refused."""
        value: int = self.data.get(SCHEMA_FIELD, 1)
        if not _is_whole(value) or value < 1:
            raise self.error(SCHEMA_FIELD, "a format version (a whole number >= 1)", value)
        if value > known:
            raise FormatError(f"{self.where}: field {self.prefix + SCHEMA_FIELD!r}: expected a format version up to "
                              f"{known}, got {value} (written by a newer pytest-abbench: read it with that one)")
        return value

    def _get(self, name: str, ok: Callable[[Any], bool], expected: str, default: Any) -> Any:
        if name not in self.data:
            if default is _REQUIRED:
                raise self.error(name, expected)
            return default
        value = self.data[name]
        if not ok(value):
            raise self.error(name, expected, value)
        return value

    def text(self, name: str, default: Any = _REQUIRED) -> Any:
        return self._get(name, lambda v: isinstance(v, str), "text", default)

    def text_or_none(self, name: str) -> str | None:
        value: str | None = self._get(name, lambda v: v is None or isinstance(v, str), "text or null", None)
        return value

    def whole(self, name: str, default: Any = _REQUIRED) -> Any:
        return self._get(name, _is_whole, "a whole number", default)

    def whole_or_none(self, name: str) -> int | None:
        value: int | None = self._get(name, lambda v: v is None or _is_whole(v), "a whole number or null", None)
        return value

    def number(self, name: str, default: Any = _REQUIRED) -> Any:
        value = self._get(name, _is_number, "a number", default)
        return float(value) if _is_number(value) else value

    def number_or_none(self, name: str) -> float | None:
        value = self._get(name, lambda v: v is None or _is_number(v), "a number or null", None)
        return None if value is None else float(value)

    def flag(self, name: str, default: Any = _REQUIRED) -> Any:
        return self._get(name, lambda v: isinstance(v, bool), "true or false", default)

    def numbers(self, name: str, default: Any = _REQUIRED) -> Any:
        value = self._get(name, lambda v: isinstance(v, list) and all(_is_number(x) for x in v), "a list of numbers",
                          default)
        return [float(x) for x in value] if isinstance(value, list) else value

    def texts(self, name: str, default: Any = _REQUIRED) -> Any:
        return self._get(name, lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                         "a list of text", default)

    def text_map(self, name: str, default: Any = _REQUIRED) -> Any:
        return self._get(name, lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
                         "an object of text values", default)

    def number_map(self, name: str, default: Any = _REQUIRED) -> Any:
        value = self._get(name, lambda v: isinstance(v, dict) and all(_is_number(x) for x in v.values()),
                          "an object of numbers", default)
        return {str(k): float(v) for k, v in value.items()} if isinstance(value, dict) else value

    def whole_map(self, name: str, default: Any = _REQUIRED) -> Any:
        return self._get(name, lambda v: isinstance(v, dict) and all(_is_whole(x) for x in v.values()),
                         "an object of whole numbers", default)

    def objects(self, name: str, default: Any = _REQUIRED) -> list["Fields"]:
        """A list of objects, each read the same way (named ``<name>[<i>].<field>``)."""
        items = self._get(name, lambda v: isinstance(v, list), "a list of objects", default)
        return [Fields(self.where, item, f"{self.prefix}{name}[{i}].") for i, item in enumerate(items)]

    def mapping(self, name: str, default: Any = _REQUIRED) -> Any:
        return self._get(name, lambda v: isinstance(v, dict), "an object", default)

    def or_none(self, name: str, read: Callable[[str], _T]) -> _T | None:
        """``read(name)`` where the field is present and not null; None where it is absent or null."""
        return None if self.data.get(name) is None else read(name)

    def declared(self, typed: type, required: tuple[str, ...] = ()) -> dict[str, Any]:
        """Check each field a TypedDict declares against its type (text, whole number, number, flag, or that or
        null); ``required`` ones must be present.  Fields it does not declare are kept as they are."""
        for name, kind in get_type_hints(typed).items():
            nullable = type(None) in get_args(kind)
            base = next((k for k in get_args(kind) if k is not type(None)), kind) if nullable else kind
            check, expected = _KINDS.get(base, (None, ""))
            if check is None:
                continue
            if nullable:
                check, expected = (lambda v, c=check: v is None or c(v)), f"{expected} or null"
            self._get(name, check, expected, _REQUIRED if name in required else None)
        return dict(self.data)

    def dataclass(self, cls: type[_T]) -> _T:
        """An instance of the dataclass ``cls`` from this object, every field checked against its declared type,
        nested dataclasses, lists, maps and pairs included (a pair is a JSON list of two); the first field that
        does not hold its type, a missing required field or an unknown one raises naming it
        (``ops[0].shapes[1].ci_pct``)."""
        hints, known = _declared(cls)  # type: ignore[arg-type]  # a class is hashable
        unknown = self.data.keys() - known.keys()
        if unknown:
            raise FormatError(f"{self.where}: field {self.prefix + min(unknown)!r}: not a field of {cls.__name__}")
        values: dict[str, Any] = {}
        for name, value in self.data.items():
            values[name] = self._conform(hints[name], value, name)
        for name in _required(cls):  # type: ignore[arg-type]  # a class is hashable
            if name not in values:
                raise self.error(name, _type_words(hints[name]))
        return cls(**values)

    def _conform(self, hint: Any, value: Any, name: str) -> Any:
        """``value`` as the type ``hint`` names (tuples and dataclasses built from JSON lists and objects)."""
        kind = _KINDS.get(hint)
        if kind is not None:  # first: most values are numbers and text (a results record's samples)
            if kind[0](value):
                return float(value) if hint is float else value
            raise self.error(name, kind[1], value)
        origin, args, arms = _hint_parts(hint)
        if origin in (Union, UnionType):
            if value is None and NoneType in args:
                return None
            if len(arms) == 1:
                kind = _KINDS.get(arms[0])
                if kind is not None:  # a number or null, text or null: checked here, the commonest field
                    if kind[0](value):
                        return float(value) if arms[0] is float else value
                    raise self.error(name, _type_words(hint), value)
                if dataclasses.is_dataclass(arms[0]) and isinstance(value, dict):
                    return self._conform(arms[0], value, name)  # a nested record's error names the field inside
            for one in arms:
                try:
                    return self._conform(one, value, name)
                except FormatError:
                    continue
            raise self.error(name, _type_words(hint), value)
        elif hint is Any:
            return value
        elif dataclasses.is_dataclass(hint):  # Fields refuses a value that is not an object, naming the field
            return Fields(self.where, value, f"{self.prefix}{name}.").dataclass(hint)  # type: ignore[arg-type]
        elif origin is list and isinstance(value, list):
            item_kind = _KINDS.get(args[0])
            if item_kind is not None and all(map(item_kind[0], value)):  # a list of samples, read in one pass
                return [float(item) for item in value] if args[0] is float else list(value)
            return [self._conform(args[0], item, f"{name}[{i}]") for i, item in enumerate(value)]
        elif origin is dict and isinstance(value, dict):
            return {k: self._conform(args[1], v, f"{name}.{k}") for k, v in value.items()}
        elif origin is tuple and isinstance(value, list) and len(value) == len(args):
            return tuple(self._conform(a, v, f"{name}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
        raise self.error(name, _type_words(hint), value)

    def nested(self, name: str) -> "Fields":
        """A field that is itself an object, read the same way (its fields named ``<name>.<field>``)."""
        return Fields(self.where, self._get(name, lambda v: isinstance(v, dict), "an object", _REQUIRED),
                      f"{self.prefix}{name}.")


@functools.lru_cache(maxsize=None)
def _required(cls: type) -> tuple[str, ...]:
    """A dataclass's fields without a default, in declared order: a record must hold them."""
    return tuple(f.name for f in dataclasses.fields(cls)
                 if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


@functools.lru_cache(maxsize=None)
def _hint_parts(hint: Any) -> tuple[Any, tuple[Any, ...], tuple[Any, ...]]:
    """A type's origin, its arguments and those that are not None, worked out once per type (a results.jsonl of
    thousands of records asks for the same few)."""
    args = get_args(hint)
    return get_origin(hint), args, tuple(a for a in args if a is not NoneType)


@functools.lru_cache(maxsize=None)
def _declared(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]:
    """A dataclass's field types and fields, resolved once per class (``get_type_hints`` was most of reading a
    large report.json)."""
    return get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls)}


def _type_words(hint: Any) -> str:
    """How a field's type reads in an error: ``a pair of numbers or null``."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, UnionType):
        return " or ".join("null" if a is NoneType else _type_words(a) for a in args)
    if origin is list:
        return f"a list of ({_type_words(args[0])})"
    if origin is dict:
        return f"an object of ({_type_words(args[1])})"
    if origin is tuple:
        return f"a list of {len(args)} ({', '.join(_type_words(a) for a in args)})"
    if dataclasses.is_dataclass(hint):
        return f"an object ({getattr(hint, '__name__', 'a record')})"
    return _KINDS[hint][1] if hint in _KINDS else "any value"


def read_object(path: Path) -> Fields:
    """A JSON file holding one object, for reading field by field (``Fields``)."""
    return Fields(str(path), read_json(path))
