"""Fatbin parsing on synthetic bytes (the real nvcc output is audited in integration tests)."""

from __future__ import annotations

import struct

from sparkimg.build.audit import audit_file, failures, targets


def entry(kind: int, sm: int, payload: bytes = b"\0" * 8) -> bytes:
    header = bytearray(64)
    struct.pack_into("<H", header, 0, kind)
    struct.pack_into("<I", header, 4, 64)
    struct.pack_into("<Q", header, 8, len(payload))
    struct.pack_into("<I", header, 28, sm)
    return bytes(header) + payload


def fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def test_targets_lists_every_entry() -> None:
    data = b"ELF junk" + fatbin(entry(2, 121), entry(1, 120)) + b"tail" + fatbin(entry(2, 90))
    found = [(t.kind, t.sm) for t in targets(data)]
    assert found == [("cubin", 121), ("ptx", 120), ("cubin", 90)]


def test_missing_architecture_is_a_failure() -> None:
    report = audit_file("lib.so", fatbin(entry(2, 120)), [121])
    assert report["missing"] == [121]
    assert failures([report]) == [report]


def test_host_only_library_passes() -> None:
    report = audit_file("host.so", b"\x7fELF no cuda here", [121])
    assert failures([report]) == []
