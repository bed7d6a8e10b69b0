"""Fatbin parsing on synthetic bytes (the real nvcc output is audited in integration tests)."""

from __future__ import annotations

from sparkimg.image.audit import audit_file, failures, targets
from tests.formats import entry, fatbin


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
