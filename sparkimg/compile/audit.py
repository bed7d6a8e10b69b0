"""Read the CUDA fatbins inside shared objects and list the SM targets they hold.

This catches the "kernel only supports sm120" class of bug at build time: a layer whose
libraries lack code for a requested architecture fails. Format (little-endian): a fatbin
starts with magic 0xBA55ED50 and a 16-byte header whose u64 at offset 8 is the payload
size; each entry has a u16 kind (1 = PTX, 2 = cubin ELF), a u32 header size at offset 4,
a u64 payload size at offset 8 and a u32 SM number at offset 28.

A linked library holds one fatbin per CUDA object, so the audit also reads them one by one:
a library with sm_121a in most objects can still hold objects that a build system collapsed to
sm_120 (vLLM's CMake did: docs/gb10.md). Each fatbin that lacks a requested architecture is
either *collapsed* (it has code of a requested architecture's major, 12.0 where 12.1a was
asked: a failure) or a *helper* (code only for other majors, such as vLLM's Marlin repack
kernels at sm_80 with PTX: reported, because the library's authors build it that way, and the
PTX, when there is some, is what a GB10 would run).
"""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg._internal import elf

MAGIC = struct.pack("<I", 0xBA55ED50)
KINDS = {1: "ptx", 2: "cubin"}


@dataclass(frozen=True)
class Target:
    kind: str
    sm: int


def targets(data: bytes) -> list[Target]:
    """Every (kind, sm) entry in every fatbin found in ``data``."""
    return [t for fatbin in fatbins(data) for t in fatbin]


def fatbins(data: bytes) -> list[list[Target]]:
    """The (kind, sm) entries of each fatbin found in ``data``, one list per fatbin."""
    every: list[list[Target]] = []
    start = data.find(MAGIC)
    while start != -1:
        if start + 16 > len(data):
            break
        header_size = struct.unpack_from("<H", data, start + 6)[0] or 16
        size = struct.unpack_from("<Q", data, start + 8)[0]
        offset, end = start + header_size, min(start + header_size + size, len(data))
        found: list[Target] = []
        while offset + 32 <= end:
            kind, = struct.unpack_from("<H", data, offset)
            entry_header, = struct.unpack_from("<I", data, offset + 4)
            payload, = struct.unpack_from("<Q", data, offset + 8)
            sm, = struct.unpack_from("<I", data, offset + 28)
            if entry_header < 32 or kind not in KINDS:
                break
            found.append(Target(KINDS[kind], sm))
            offset += entry_header + payload
        if found:
            every.append(found)
        start = data.find(MAGIC, max(end, start + 4))
    return every


def audit_file(name: str, data: bytes, wanted: list[int]) -> dict[str, Any]:
    each = fatbins(data)
    found = [t for fatbin in each for t in fatbin]
    sms = sorted({t.sm for t in found})
    report: dict[str, Any] = {
        "file": name,
        "sm": sms,
        "cubin_sm": sorted({t.sm for t in found if t.kind == "cubin"}),
        "ptx_sm": sorted({t.sm for t in found if t.kind == "ptx"}),
        "missing": [sm for sm in wanted if sm not in sms],
        "fatbins": len(each),
        "machine": elf.machine(data[:elf.HEAD]),  # the CPU audit's reading (``compile.machines``)
    }
    collapsed: dict[str, int] = {}
    helpers: dict[str, int] = {}
    for fatbin in each:
        held = {t.sm for t in fatbin}
        if all(sm in held for sm in wanted):
            continue
        kind = collapsed if any(sm // 10 == w // 10 for sm in held for w in wanted) else helpers
        label = describe(fatbin)
        kind[label] = kind.get(label, 0) + 1
    if collapsed:
        report["collapsed"] = [{"code": k, "fatbins": v} for k, v in sorted(collapsed.items())]
    if helpers:
        report["helpers"] = [{"code": k, "fatbins": v} for k, v in sorted(helpers.items())]
    return report


def describe(fatbin: list[Target]) -> str:
    """``sm_80 + PTX 80``: what one fatbin holds, cubins first."""
    cubins = sorted({t.sm for t in fatbin if t.kind == "cubin"})
    ptx = sorted({t.sm for t in fatbin if t.kind == "ptx"})
    return " + ".join([*(f"sm_{sm}" for sm in cubins), *(f"PTX {sm}" for sm in ptx)])


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
    """Shared objects with CUDA code that lack a wanted architecture, or hold an object collapsed
    to another architecture of a wanted one's major (host-only .so files pass)."""
    return [r for r in reports if r["sm"] and (r["missing"] or r.get("collapsed"))]


def helpers(reports: list[dict[str, Any]]) -> list[str]:
    """One line per kind of helper object found: what it holds and how many there are."""
    return [f"{r['file']}: {h['fatbins']} object(s) with {h['code']} only"
            for r in reports for h in r.get("helpers", [])]


def failure_lines(failing: list[dict[str, Any]]) -> list[str]:
    """Why each shared object in ``failing`` (what ``failures`` found) fails, one line each."""
    lines = []
    for r in failing:
        if r["missing"]:
            lines.append(f"{r['file']}: has sm {r['sm']}, lacks {r['missing']}")
        for c in r.get("collapsed", []):
            lines.append(f"{r['file']}: {c['fatbins']} object(s) built for {c['code']} instead")
    return lines
