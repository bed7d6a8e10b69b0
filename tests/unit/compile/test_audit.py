"""Fatbin parsing on synthetic bytes (the real nvcc output is audited in integration tests)."""

from __future__ import annotations

from sparkimg.compile.audit import audit_file, failure_lines, failures, fatbins, helpers, targets
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


def test_each_fatbin_is_one_object() -> None:
    data = fatbin(entry(2, 121)) + b"pad" + fatbin(entry(2, 80), entry(1, 80))
    assert [[(t.kind, t.sm) for t in f] for f in fatbins(data)] == [[("cubin", 121)], [("cubin", 80), ("ptx", 80)]]


def test_an_object_collapsed_to_the_same_major_fails_beside_good_ones() -> None:
    # The library as a whole has sm_121, but one object was built for sm_120 (vLLM's collapse).
    report = audit_file("lib.so", fatbin(entry(2, 121)) + fatbin(entry(2, 120)) + fatbin(entry(2, 120)), [121])
    assert report["missing"] == [] and report["fatbins"] == 3
    assert report["collapsed"] == [{"code": "sm_120", "fatbins": 2}]
    assert failures([report]) == [report]
    assert failure_lines([report]) == ["lib.so: 2 object(s) built for sm_120 instead"]


def test_objects_for_other_majors_are_reported_helpers_not_failures() -> None:
    data = fatbin(entry(2, 121)) + fatbin(entry(2, 80), entry(1, 80)) + fatbin(entry(2, 90), entry(1, 90))
    report = audit_file("lib.so", data, [121])
    assert failures([report]) == []
    assert report["helpers"] == [{"code": "sm_80 + PTX 80", "fatbins": 1}, {"code": "sm_90 + PTX 90", "fatbins": 1}]
    assert helpers([report]) == ["lib.so: 1 object(s) with sm_80 + PTX 80 only",
                                 "lib.so: 1 object(s) with sm_90 + PTX 90 only"]
