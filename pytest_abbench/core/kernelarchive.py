"""One side's persistent kernel cache as one file: ``abbench kernels export`` writes it, ``--ab-kernel-import``
seeds a cache from it.

A fresh machine (a CI fleet) starts with an empty kernel cache and compiles
every kernel cold.  The file is a gzip'd tar of one key folder
(``core.kernelcache``): its key description ``abbench-key.json`` first, then
Triton's cache entries (``<hash>/<file>``) as paths relative to the folder.
It is unpacked only into the folder of a side whose key equals the one it
holds: a switch that is not in Triton's own cache key would otherwise load
the other build's kernels without a word.

Unpacking never writes outside the folder (absolute names, ``..``, links and
devices are refused before anything is written), never replaces a file the
folder holds, and writes each file through a temporary file and
``os.replace``, Triton's group files (``__grp__*``) last: Triton reads the
folder while others write it, and a kernel is whole once its group file is.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Iterator, Mapping

from pytest_abbench.core.cellfiles import read_origin
from pytest_abbench.core.fileio import CorruptFileError, Fields, atomic_file
from pytest_abbench.core.kernelcache import KEY_FILE, KEY_SCHEMA
from pytest_abbench.core.layout import SIDES, RootLayout, origin_file

GROUP_PREFIX = "__grp__"  # Triton's group file: names a kernel's files, written after them
KEY_FIELDS = ("campaign", "side", "triton", "switch_env", "env", "campaign_source", "device")
_CHUNK = 1 << 20
# What a kernel file may hold, checked from each member's header before its bytes are read.  A Triton cache entry
# is a kernel's IR stages, cubin and metadata: the largest seen here were a few MB (topk's side B: 40.8 MB of IR
# over five kernels, every stage); 64 MiB a member and 4 GiB in all leave room for kernels many times larger.  A
# 204 KB file of one 200 MiB member of zeros was accepted, and each member was read whole into memory three times.
MAX_MEMBER_BYTES = 64 << 20
MAX_TOTAL_BYTES = 4 << 30
MAX_MEMBERS = 200_000
MAX_KEY_BYTES = 1 << 20  # abbench-key.json: a few hundred bytes


class KernelArchiveError(ValueError):
    """A kernel file that cannot be written or used: names the file (and the member) and why."""


@dataclass(frozen=True)
class KernelArchive:
    """A readable kernel file: its path, the key it was compiled under, how many files and kernels it holds."""

    path: Path
    key: dict[str, Any]  # abbench-key.json without its format version: ``KernelCacheKey.to_json``
    files: int
    kernels: int
    sha256: str = ""  # of the whole file, as read
    size: int = 0  # bytes its members unpack to

    def made_by(self) -> str:
        """What the file says made it: campaign, side, Triton, device, the switch's variables."""
        switch = ", ".join(f"{k}={v}" for k, v in sorted(dict(self.key.get("switch_env") or {}).items())) or "none"
        triton = self.key.get("triton")
        version = triton.get("version") if isinstance(triton, Mapping) else triton
        return (f"campaign {self.key.get('campaign')}, side {self.key.get('side')}, triton {version}, "
                f"device {self.key.get('device')}, switch {switch}")

    @property
    def side(self) -> str:
        return str(self.key["side"])

    @property
    def campaign(self) -> str:
        return str(self.key["campaign"])


# -- export ---------------------------------------------------------------------
def cache_files(folder: Path) -> list[Path]:
    """The files of a key folder worth carrying: every regular file but the key itself, Triton's unfinished
    temporary folders (``tmp.*``) and hidden files (a write in flight), in name order."""
    found = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if rel.as_posix() == KEY_FILE or any(part.startswith((".", "tmp.")) for part in rel.parts):
            continue
        if path.is_file() and not path.is_symlink():
            found.append(path)
    return found


def write_archive(folder: Path, dest: Path) -> tuple[int, int]:
    """Write ``folder`` (a key folder holding its ``abbench-key.json``) into ``dest`` as one file, atomically;
    returns (files, kernels) written besides the key."""
    files = cache_files(folder)
    with atomic_file(dest) as handle:
        with tarfile.open(fileobj=handle, mode="w:gz") as tar:
            for path in (folder / KEY_FILE, *files):
                info = tarfile.TarInfo(path.relative_to(folder).as_posix())
                found = path.stat()
                info.size, info.mtime, info.mode = found.st_size, int(found.st_mtime), 0o644
                with open(path, "rb") as data:
                    tar.addfile(info, data)
    kernels = {path.relative_to(folder).parts[0] for path in files if path.parent != folder}
    return len(files), len(kernels)


def recorded_folders(layout: RootLayout, side: str) -> dict[Path, set[str]]:
    """The kernel cache folders ``side``'s cells of a root used, as their ``origin.json`` records them, with the
    campaign file(s) that used each one."""
    found: dict[Path, set[str]] = {}
    for key, folder in layout.cell_folders():
        if key.side != side or not origin_file(folder).is_file():
            continue
        try:
            origin = read_origin(origin_file(folder))
        except CorruptFileError:
            continue
        cache = origin.get("kernel_cache")
        if isinstance(cache, str) and cache:
            found.setdefault(Path(cache), set()).add(str(origin.get("campaign") or ""))
    return found


# -- import ---------------------------------------------------------------------
def member_problem(member: tarfile.TarInfo) -> str | None:
    """Why ``member`` may not be unpacked into a folder; None when it may."""
    name = PurePosixPath(member.name)
    if member.name.startswith("/") or name.is_absolute():
        return "an absolute path"
    if ".." in name.parts:
        return "a path that climbs out of the folder (..)"
    if not name.parts or name.parts == (".",):
        return "an empty path"
    if member.issym() or member.islnk():
        return "a link"
    if not (member.isfile() or member.isdir()):
        return "not a plain file or folder"
    return None


class _BoundedReads:
    """The decompressed stream of a kernel file, refusing any one read over ``limit`` bytes.

    tarfile reads a PAX or GNU long-name header's payload whole, in one read, before a caller sees the header: a
    small file whose first member is a header of gigabytes of zeros would allocate them in pytest's own process.
    Member data is read in ``_CHUNK`` pieces (``_chunks``), so no read of a sound file comes near the limit.
    """

    def __init__(self, stream: Any, path: Path, limit: int) -> None:
        self.stream, self.path, self.limit = stream, path, limit

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > self.limit:
            raise KernelArchiveError(f"{self.path}: a tar header asks to read {size} bytes at once, over the "
                                     f"{self.limit} a member may be: refused, nothing unpacked")
        return bytes(self.stream.read(size))

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self.stream.seek(offset, whence))

    def tell(self) -> int:
        return int(self.stream.tell())


@contextlib.contextmanager
def _open(path: Path) -> Iterator[tarfile.TarFile]:
    """The kernel file as a tar (gzip'd, as ``write_archive`` makes it, or plain), read through ``_BoundedReads``."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise KernelArchiveError(f"{path}: no such file") from None
    except OSError as exc:
        raise KernelArchiveError(f"{path}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(mode):  # /dev/zero, a FIFO, a folder: never a kernel file, and reading one may not end
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else \
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
        raise KernelArchiveError(f"{path}: {kind}, not a kernel file `abbench kernels export` wrote")
    with contextlib.ExitStack() as stack:
        try:
            raw = stack.enter_context(open(path, "rb"))
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            stream = stack.enter_context(gzip.GzipFile(fileobj=raw)) if gzipped else raw
            bounded: Any = _BoundedReads(stream, path, MAX_MEMBER_BYTES + _CHUNK)  # the file API tarfile uses
            tar = stack.enter_context(tarfile.open(fileobj=bounded, mode="r:"))
        except FileNotFoundError:
            raise KernelArchiveError(f"{path}: no such file") from None
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise KernelArchiveError(f"{path}: not a kernel file `abbench kernels export` wrote ({exc})") from None
        yield tar


def _members(path: Path, tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The archive's members, each checked (``member_problem``) and within the limits by its header; a torn or
    corrupt archive raises naming ``path``."""
    total = count = 0
    try:
        for member in tar:
            problem = member_problem(member)
            if problem is not None:
                raise KernelArchiveError(f"{path}: member {member.name!r} is {problem}: refused, nothing unpacked")
            count += 1
            total += member.size
            limit = MAX_KEY_BYTES if member.name == KEY_FILE else MAX_MEMBER_BYTES
            if member.size > limit:
                raise KernelArchiveError(f"{path}: member {member.name!r} is {member.size} bytes, over the "
                                         f"{limit} a member may be: refused, nothing unpacked")
            if total > MAX_TOTAL_BYTES or count > MAX_MEMBERS:
                raise KernelArchiveError(f"{path}: over {MAX_TOTAL_BYTES} bytes or {MAX_MEMBERS} members in all at "
                                         f"member {member.name!r}: refused, nothing unpacked")
            yield member
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise KernelArchiveError(f"{path}: truncated or corrupt ({exc})") from None


def _chunks(path: Path, tar: tarfile.TarFile, member: tarfile.TarInfo) -> Iterator[bytes]:
    """A member's bytes in chunks, never more than its header said; a short one raises naming it."""
    got = 0
    try:
        handle = tar.extractfile(member)
        while handle is not None and (chunk := handle.read(_CHUNK)):
            got += len(chunk)
            yield chunk
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise KernelArchiveError(f"{path}: member {member.name!r} is truncated or corrupt ({exc})") from None
    if got != member.size:
        raise KernelArchiveError(f"{path}: member {member.name!r} is truncated ({got} of {member.size} bytes)")


def _read_member(path: Path, tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """A member whole (the key, a group file: small by the limits ``_members`` applies)."""
    return b"".join(_chunks(path, tar, member))


def _read_to_end(path: Path, tar: tarfile.TarFile) -> None:
    """Read the compressed stream past the tar's end, so gzip checks its length and CRC."""
    try:
        if tar.fileobj is not None:
            while tar.fileobj.read(_CHUNK):
                pass
    except (OSError, EOFError, zlib.error) as exc:
        raise KernelArchiveError(f"{path}: truncated or corrupt ({exc})") from None


def _parse_key(path: Path, data: bytes) -> dict[str, Any]:
    """The key a kernel file's ``abbench-key.json`` member holds, every field present."""
    where = f"{path}: {KEY_FILE}"
    try:
        fields = Fields(where, json.loads(data.decode("utf-8")))
        fields.version(KEY_SCHEMA)
    except (UnicodeDecodeError, ValueError) as exc:  # FormatError is a ValueError
        raise KernelArchiveError(f"{where}: not a kernel cache key ({exc})") from None
    missing = [name for name in KEY_FIELDS if name not in fields.data]
    if missing:
        raise KernelArchiveError(f"{where}: not a kernel cache key (no {', '.join(missing)})")
    key = {name: fields.data[name] for name in KEY_FIELDS}
    if key["side"] not in SIDES:
        raise KernelArchiveError(f"{where}: field 'side': expected A or B, got {key['side']!r}")
    return key


def read_archive(path: Path) -> KernelArchive:
    """Read a kernel file whole: every member checked and read (a torn file is found before anything is
    unpacked), its key parsed.  Raises KernelArchiveError naming the file."""
    key: dict[str, Any] | None = None
    files, size, kernels = 0, 0, set()
    names: set[str] = set()
    folders: set[str] = set()
    with _open(path) as tar:
        for member in _members(path, tar):
            if not member.isfile():
                continue
            parts = PurePosixPath(member.name).parts
            if member.name == KEY_FILE:
                key = _parse_key(path, _read_member(path, tar, member))
                continue
            for _ in _chunks(path, tar, member):  # read to check it, never held
                pass
            files += 1
            size += member.size
            names.add(PurePosixPath(member.name).as_posix())  # "./x" is "x"
            folders.update(PurePosixPath(*parts[:i]).as_posix() for i in range(1, len(parts)))
            if len(parts) > 1:
                kernels.add(parts[0])
        _read_to_end(path, tar)
    clash = sorted(names & folders)
    if clash:  # unpacking would write the file, then fail on the member inside it
        raise KernelArchiveError(f"{path}: member {clash[0]!r} is a file and the folder of another member: refused, "
                                 "nothing unpacked")
    if key is None:
        raise KernelArchiveError(f"{path}: holds no {KEY_FILE}: not a kernel file `abbench kernels export` wrote")
    with open(path, "rb") as handle:
        sha256 = hashlib.file_digest(handle, "sha256").hexdigest()
    return KernelArchive(path, key, files, len(kernels), sha256, size)


def key_differences(file_key: Mapping[str, Any], session_key: Mapping[str, Any]) -> list[str]:
    """Each key field where a file's key and a session's differ, as ``field: file X, this session Y`` (a mapping
    field, such as the switch's variables, by entry: ``switch_env.NAME``)."""
    def shown(value: Any) -> str:
        return "(unset)" if value is None else repr(value)

    found = []
    for name in KEY_FIELDS:
        mine, theirs = file_key.get(name), session_key.get(name)
        if mine == theirs:
            continue
        if isinstance(mine, Mapping) and isinstance(theirs, Mapping):
            for entry in sorted(set(mine) | set(theirs)):
                if mine.get(entry) != theirs.get(entry):
                    found.append(f"{name}.{entry}: file {shown(mine.get(entry))}, this session "
                                 f"{shown(theirs.get(entry))}")
        else:
            found.append(f"{name}: file {shown(mine)}, this session {shown(theirs)}")
    return found


def _inside(folder: Path, target: Path) -> bool:
    real = os.path.realpath(folder)
    return os.path.realpath(target).startswith(real + os.sep)


def _place(folder: Path, name: str, chunks: Iterable[bytes]) -> bool:
    """Write ``chunks`` at ``folder/name`` through a temporary file and ``os.replace``; False where the folder holds
    the file already (it is left as it is: the same key's file, maybe being read)."""
    target = folder / name
    if not _inside(folder, target):  # a folder of the cache that is a link out of it
        raise KernelArchiveError(f"{target}: outside {folder} (a link in the cache folder): refused")
    if target.exists():
        return False
    for parent in reversed(target.relative_to(folder).parents):
        here = folder / parent
        if here.exists() and not here.is_dir():  # a member named like a folder another member needs
            raise KernelArchiveError(f"{here}: a file where a member needs a folder ({name}): refused")
    with atomic_file(target) as handle:
        for chunk in chunks:
            handle.write(chunk)
    return True


def unpack(archive: KernelArchive, folder: Path) -> int:
    """Unpack ``archive``'s kernels into ``folder`` (the key folder of the same key); returns the files written.

    The file is read again member by member: one changed since ``read_archive`` is refused as it was then.
    """
    written = 0
    groups: list[tuple[str, bytes]] = []
    with _open(archive.path) as tar:
        for member in _members(archive.path, tar):
            if not member.isfile() or member.name == KEY_FILE:
                continue
            if PurePosixPath(member.name).name.startswith(GROUP_PREFIX):
                # last: a kernel is whole once its group file is there
                groups.append((member.name, _read_member(archive.path, tar, member)))
                continue
            written += _place(folder, member.name, _chunks(archive.path, tar, member))
        _read_to_end(archive.path, tar)
    for name, data in groups:
        written += _place(folder, name, [data])
    return written


def key_of_folder(folder: Path) -> dict[str, Any]:
    """The key a key folder's ``abbench-key.json`` holds, read as an imported file's; KernelArchiveError where it
    has none or a bad one."""
    record = folder / KEY_FILE
    if not record.is_file():
        raise KernelArchiveError(f"{folder} holds no {KEY_FILE}: it is not a kernel cache key folder")
    try:
        data = record.read_bytes()
    except OSError as exc:
        raise KernelArchiveError(f"{record}: cannot read it ({exc.strerror or exc})") from None
    return _parse_key(folder, data)
