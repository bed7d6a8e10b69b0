"""The CPU audit: an ELF file's machine read from its header, and a layer refused (exit 6) when it
holds a file another CPU runs, naming layer, file and machine; device code passes."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from sparkimg._internal import elf, emulation
from sparkimg.compile.machines import Census, refuse, summary
from sparkimg.errors import AuditError


def _header(machine: int, *, big: bool = False) -> bytes:
    order = ">" if big else "<"
    return b"\x7fELF\x02" + (b"\x02" if big else b"\x01") + b"\x01" + bytes(9) + struct.pack(order + "HH", 3, machine)


def test_the_machine_is_read_from_the_header() -> None:
    with open(Path(sys.executable).resolve(), "rb") as handle:  # a real program of this machine
        assert elf.machine(handle.read(elf.HEAD)) == elf.wanted(emulation.native())
    assert elf.machine(_header(62)) == "x86_64"
    assert elf.machine(_header(183)) == "aarch64"
    assert elf.machine(_header(183, big=True)) == "aarch64"  # in the file's own byte order
    assert elf.machine(_header(190)) == "cuda"
    assert elf.machine(_header(4242)) == "EM_4242"
    assert elf.machine(b"#!/bin/sh\n" + bytes(20)) is None
    assert elf.machine(b"\x7fELF") is None  # too short to say


@pytest.mark.parametrize(("platform", "machine", "foreign"), [
    ("linux/amd64", "x86_64", False), ("linux/amd64", "aarch64", True), ("linux/arm64", "x86_64", True),
    ("linux/arm64", "aarch64", False), ("linux/arm64", "cuda", False), ("linux/arm64", "EM_4242", True),
    ("linux/arm64", None, False),
])
def test_foreign_is_another_cpu_never_device_code(platform: str, machine: str | None, foreign: bool) -> None:
    assert elf.foreign(platform, machine) is foreign


def test_a_census_counts_every_elf_file_and_refuses_the_foreign_ones() -> None:
    census = Census("linux/arm64")
    census.see("usr/lib/a.so", _header(183))
    census.see("usr/lib/b.so", _header(62))
    census.see("usr/lib/kernel.cubin", _header(190))
    census.see("usr/lib/readme.txt", b"hello")
    assert census.counts == {"aarch64": 1, "x86_64": 1, "cuda": 1}
    assert summary(census.counts) == "1 aarch64, 1 cuda, 1 x86_64"
    with pytest.raises(AuditError) as raised:
        census.check("wheels")
    assert raised.value.exit_code == 6
    message = str(raised.value)
    assert "layer wheels: 1 ELF file(s) built for another CPU than linux/arm64's aarch64" in message
    assert "usr/lib/b.so: x86_64" in message and "fix: pin the wheel built for linux/arm64" in message


def test_many_foreign_files_are_counted_past_the_first_ten() -> None:
    with pytest.raises(AuditError, match=r"\.\.\. and 5 more"):
        refuse("big", "linux/amd64", [(f"f{i}.so", "aarch64") for i in range(15)])
    refuse("clean", "linux/amd64", [])  # nothing foreign: nothing raised
    assert summary({}) == "no ELF files"
