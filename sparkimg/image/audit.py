"""Read the CUDA fatbins inside shared objects and list the SM targets they hold.

This catches the "kernel only supports sm120" class of bug at build time: a layer whose
libraries lack code for a requested architecture fails. Format (little-endian): a fatbin
starts with magic 0xBA55ED50 and a 16-byte header whose u64 at offset 8 is the payload
size; each entry has a u16 kind (1 = PTX, 2 = cubin ELF), a u32 header size at offset 4,
a u64 payload size at offset 8 and a u32 SM number at offset 28.
"""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = struct.pack("<I", 0xBA55ED50)
KINDS = {1: "ptx", 2: "cubin"}


@dataclass(frozen=True)
class Target:
    kind: str
    sm: int


def targets(data: bytes) -> list[Target]:
    """Every (kind, sm) entry in every fatbin found in ``data``."""
    found: list[Target] = []
    start = data.find(MAGIC)
    while start != -1:
        if start + 16 > len(data):
            break
        header_size = struct.unpack_from("<H", data, start + 6)[0] or 16
        size = struct.unpack_from("<Q", data, start + 8)[0]
        offset, end = start + header_size, min(start + header_size + size, len(data))
        while offset + 32 <= end:
            kind, = struct.unpack_from("<H", data, offset)
            entry_header, = struct.unpack_from("<I", data, offset + 4)
            payload, = struct.unpack_from("<Q", data, offset + 8)
            sm, = struct.unpack_from("<I", data, offset + 28)
            if entry_header < 32 or kind not in KINDS:
                break
            found.append(Target(KINDS[kind], sm))
            offset += entry_header + payload
        start = data.find(MAGIC, max(end, start + 4))
    return found


def audit_file(name: str, data: bytes, wanted: list[int]) -> dict[str, Any]:
    found = targets(data)
    sms = sorted({t.sm for t in found})
    cubins = sorted({t.sm for t in found if t.kind == "cubin"})
    return {
        "file": name,
        "sm": sms,
        "cubin_sm": cubins,
        "ptx_sm": sorted({t.sm for t in found if t.kind == "ptx"}),
        "missing": [sm for sm in wanted if sm not in sms],
    }


def audit_output(path: Path, wanted: list[int]) -> list[dict[str, Any]]:
    """Audit a wheel (every .so inside it) or a bare shared object."""
    reports: list[dict[str, Any]] = []
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if member.endswith(".so") or ".so." in member:
                    reports.append(audit_file(f"{path.name}!{member}", archive.read(member), wanted))
    elif path.suffix == ".so" or ".so." in path.name:
        reports.append(audit_file(path.name, path.read_bytes(), wanted))
    return reports


def failures(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Shared objects with CUDA code that lack a wanted architecture (host-only .so files pass)."""
    return [r for r in reports if r["sm"] and r["missing"]]
