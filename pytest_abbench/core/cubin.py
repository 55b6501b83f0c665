"""What a compiled CUDA kernel uses, read from its cubin without a GPU: registers per thread and stack frame bytes.

A cubin is an ELF file.  Its ``.nv.info`` section holds attributes per kernel symbol, each ``format, attribute``
then a value; ``EIATTR_REGCOUNT`` (0x2f) and ``EIATTR_FRAME_SIZE`` (0x11) carry ``(symbol index, value)``.  These are
what ``ptxas -v`` prints as "Used N registers" and "N bytes stack frame", and what the CUDA driver answers as a
function's registers and local memory per thread (Triton's ``n_regs``, and ``n_spills`` as local bytes / 4).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

EIATTR_REGCOUNT = 0x2F
EIATTR_FRAME_SIZE = 0x11
_EIFMT_SVAL = 0x04  # a value of its own size follows; other formats carry a 16-bit value in place


class CubinError(ValueError):
    """A file that is not a cubin of the expected shape, or lacks the kernel asked for."""


@dataclass(frozen=True)
class KernelResources:
    registers: int
    frame_bytes: int


def _sections(data: bytes) -> list[tuple[str, int, int, int]]:
    """Each section's (name, offset, size, link), in order, of a 64-bit little-endian ELF."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise CubinError("not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    entsize, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]
    names_at = headers[names_index][4]
    return [(_name(data, names_at + name_at), offset, size, link)
            for name_at, _, _, _, offset, size, link, _, _, _ in headers]


def _name(data: bytes, start: int) -> str:
    return data[start:data.index(b"\0", start)].decode("utf-8", "replace")


def _section(sections: list[tuple[str, int, int, int]], name: str) -> tuple[str, int, int, int]:
    return next(s for s in sections if s[0] == name)


def _symbol_index(data: bytes, sections: list[tuple[str, int, int, int]], name: str) -> int:
    _, offset, size, link = _section(sections, ".symtab")
    names_at = sections[link][1]
    for index in range(size // 24):  # Elf64_Sym: name u32, info u8, other u8, shndx u16, value u64, size u64
        (name_at,) = struct.unpack_from("<I", data, offset + index * 24)
        if _name(data, names_at + name_at) == name:
            return index
    raise CubinError(f"no symbol {name!r} in the cubin")


def kernel_resources(cubin: bytes, name: str) -> KernelResources:
    """Registers per thread and stack frame bytes of kernel ``name`` in ``cubin``."""
    try:
        sections = _sections(cubin)
        symbol = _symbol_index(cubin, sections, name)
        _, offset, size, _ = _section(sections, ".nv.info")
    except (StopIteration, IndexError, struct.error, ValueError) as exc:
        raise CubinError(f"cubin of {name!r}: {exc}") from None
    found: dict[int, int] = {}
    at, end = offset, offset + size
    while at + 4 <= end:
        fmt, attr, value16 = struct.unpack_from("<BBH", cubin, at)
        if fmt != _EIFMT_SVAL:
            at += 4
            continue
        if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and value16 >= 8:
            owner, value = struct.unpack_from("<II", cubin, at + 4)
            if owner == symbol:
                found[attr] = value
        at += 4 + value16
    if EIATTR_REGCOUNT not in found:
        raise CubinError(f"cubin of {name!r}: no register count for it in .nv.info")
    return KernelResources(found[EIATTR_REGCOUNT], found.get(EIATTR_FRAME_SIZE, 0))
