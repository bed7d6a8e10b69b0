"""Take nvcc's process ids out of the ELF files a compile layer produces.

nvcc names its intermediate files ``tmpxft_<pid>_<counter>-N_<source>...`` (8 hex digits
each) and those names reach the object: the symbol table (an ``STT_FILE`` symbol) and, with
``-g``, the DWARF line and string tables. Two builds whose nvcc ran under other pids differ
in those bytes only. ``neutralise`` writes ``00000000`` over the pid in every section that is
not loaded at run time (no ``SHF_ALLOC``: ``.strtab``, ``.debug_*``, ``.comment``); names keep
their length, so no offset moves. Sections that are loaded (``.nv_fatbin`` with the device
code, ``.dynsym``/``.dynstr``, data) are never touched, and neither are compressed sections.
Where a ``.debug_*`` section names such a file, the linker's build id (a hash over those sections)
is recomputed from the rewritten file, as ``debugedit --build-id`` does for distribution
packages. A file that is not ELF, or whose headers do not parse, is returned unchanged.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass

MAGIC = b"\x7fELF"
PID = re.compile(rb"(tmpxft_)[0-9a-f]{8}(_[0-9a-f]{8})")
NEUTRAL = rb"\g<1>00000000\g<2>"
SHF_ALLOC = 0x2
SHF_COMPRESSED = 0x800
SHT_NOBITS = 8
SHT_NOTE = 7
NT_GNU_BUILD_ID = 3


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    flags: int
    offset: int
    size: int


def neutralise(data: bytes) -> bytes:
    """``data`` with nvcc's pids zeroed in its non-loaded sections (see the module docstring)."""
    if not data.startswith(MAGIC) or b"tmpxft_" not in data:
        return data
    sections = _sections(data)
    if sections is None:
        return data
    out = bytearray(data)
    debug = False
    for section in sections:
        if section.flags & (SHF_ALLOC | SHF_COMPRESSED) or section.type == SHT_NOBITS:
            continue
        chunk = data[section.offset:section.offset + section.size]
        if PID.search(chunk):
            out[section.offset:section.offset + section.size] = PID.sub(NEUTRAL, chunk)
            debug = debug or section.name.startswith(".debug")
    if debug:
        _rehash_build_id(out, sections)
    return bytes(out)


def member(name: str, data: bytes) -> bytes:
    """``neutralise`` as a wheel member rewrite (``wheelzip.normalise(rewrite=...)``)."""
    return neutralise(data)


def _rehash_build_id(out: bytearray, sections: list[Section]) -> None:
    """Write a build id that is sha1 of the file with the id's own bytes zeroed (truncated or
    zero-padded to the id's length), so equal files get equal ids."""
    endian = "<" if out[5] == 1 else ">"
    for section in sections:
        if section.type != SHT_NOTE or section.name != ".note.gnu.build-id" or section.size < 12:
            continue
        namesz, descsz, kind = struct.unpack_from(endian + "III", out, section.offset)
        start = section.offset + 12 + (namesz + 3) // 4 * 4
        if kind != NT_GNU_BUILD_ID or start + descsz > section.offset + section.size:
            continue
        out[start:start + descsz] = bytes(descsz)
        digest = hashlib.sha1(out, usedforsecurity=False).digest()
        out[start:start + descsz] = (digest * (descsz // len(digest) + 1))[:descsz]


def _sections(data: bytes) -> list[Section] | None:
    """The section headers, or None when they do not parse (truncated, odd sizes)."""
    try:
        if data[4] not in (1, 2) or data[5] not in (1, 2):
            return None
        wide = data[4] == 2
        endian = "<" if data[5] == 1 else ">"
        if wide:
            shoff, = struct.unpack_from(endian + "Q", data, 0x28)
            entsize, count, strndx = struct.unpack_from(endian + "HHH", data, 0x3A)
            layout, want = endian + "IIQQQQ", 64
        else:
            shoff, = struct.unpack_from(endian + "I", data, 0x20)
            entsize, count, strndx = struct.unpack_from(endian + "HHH", data, 0x2E)
            layout, want = endian + "IIIIII", 40
        if shoff == 0 or entsize != want:
            return None
        if count == 0:  # more than 0xff00 sections: the count is in section 0's size
            count = struct.unpack_from(layout, data, shoff)[5]
        if shoff + count * entsize > len(data) or count > 1 << 20:
            return None
        raw = [struct.unpack_from(layout, data, shoff + i * entsize) for i in range(count)]
        if strndx == 0xFFFF:  # the index is in section 0's link field; not worth the bytes here
            return None
        names = raw[strndx][4] if 0 < strndx < count else None
        sections = []
        for name, kind, flags, _addr, offset, size in raw:
            if kind != SHT_NOBITS and offset + size > len(data):
                return None
            end = -1 if names is None else data.find(b"\0", names + name)
            text = data[names + name:end].decode("ascii", "replace") if names is not None and end >= 0 else ""
            sections.append(Section(text, kind, flags, offset, size))
        return sections
    except (struct.error, IndexError):
        return None
