"""Wheel normalisation and nvcc pid removal on synthetic archives and ELF files (the real nvcc
output is rebuilt and compared in tests/integration/test_reproducible_compile.py)."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkimg.compile import elfnames, wheelzip
from sparkimg.compile.audit import targets
from tests.formats import entry, fatbin

DIST = "pkg-1.0.dist-info"


def _wheel(path: Path, members: dict[str, bytes], *, order: list[str] | None = None, when: int = 0,
           mode: int = 0o644, deflate: bool = True, extra: bytes = b"", comment: bytes = b"",
           windows: bool = False) -> Path:
    """A wheel with ``members`` plus a valid RECORD, written in ``order`` with the given metadata."""
    files = dict(members)
    rows = [f"{name},{wheelzip.record_hash(data)},{len(data)}" for name, data in files.items()]
    files[f"{DIST}/RECORD"] = ("\n".join([*rows, f"{DIST}/RECORD,,"]) + "\n").encode()
    with zipfile.ZipFile(path, "w") as archive:
        for index, name in enumerate(order or list(files)):
            info = zipfile.ZipInfo(name, date_time=(1990 + when, 1 + index % 12, 1, 0, 0, 2 * index % 60))
            info.external_attr = (0o100000 | mode) << 16
            info.create_system = 0 if windows else 3
            info.extra = extra
            info.comment = comment
            info.compress_type = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
            archive.writestr(info, files[name], compresslevel=9 if deflate else None)
        archive.comment = comment
    return path


MEMBERS = {"pkg/__init__.py": b"print('hi')\n", "pkg/lib.so": b"\x7fELF" + bytes(64),
           f"{DIST}/METADATA": b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n",
           f"{DIST}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
           "pkg.data/scripts/run": b"#!/bin/sh\n"}


def test_same_members_in_another_order_and_time_normalise_to_the_same_bytes(tmp_path: Path) -> None:
    names = [*MEMBERS, f"{DIST}/RECORD"]
    one = _wheel(tmp_path / "one.whl", MEMBERS, order=names, when=0)
    two = _wheel(tmp_path / "two.whl", MEMBERS, order=list(reversed(names)), when=7, deflate=False,
                 extra=b"\x55\x54\x05\x00\x01\x00\x00\x00\x00", comment=b"built by hand", windows=True)
    assert one.read_bytes() != two.read_bytes()
    for path in (one, two):
        wheelzip.normalise(path, 1_700_000_000)
    assert one.read_bytes() == two.read_bytes()
    with zipfile.ZipFile(one) as archive:
        infos = archive.infolist()
        assert archive.comment == b""
    assert [i.filename for i in infos] == ["pkg.data/scripts/run", "pkg/__init__.py", "pkg/lib.so",
                                           f"{DIST}/METADATA", f"{DIST}/WHEEL", f"{DIST}/RECORD"]
    assert {i.date_time for i in infos} == {(2023, 11, 14, 22, 13, 20)}
    assert {(i.create_system, i.external_attr >> 16, i.extra, i.comment, i.compress_type) for i in infos} == {
        (3, 0o100644, b"", b"", zipfile.ZIP_DEFLATED)}


def test_record_stays_valid_and_contents_are_kept(tmp_path: Path) -> None:
    path = _wheel(tmp_path / "w.whl", MEMBERS, order=list(reversed([*MEMBERS, f"{DIST}/RECORD"])))
    assert wheelzip.record_problems(path) == []
    wheelzip.normalise(path, 1_700_000_000)
    assert wheelzip.record_problems(path) == []
    with zipfile.ZipFile(path) as archive:
        assert {n: archive.read(n) for n in MEMBERS} == MEMBERS


def test_normalise_is_idempotent_and_keeps_execute_bits(tmp_path: Path) -> None:
    path = _wheel(tmp_path / "w.whl", MEMBERS, mode=0o755)
    wheelzip.normalise(path, 0)
    first = path.read_bytes()
    wheelzip.normalise(path, 0)
    assert path.read_bytes() == first
    with zipfile.ZipFile(path) as archive:
        assert {i.external_attr >> 16 for i in archive.infolist()} == {0o100755}
        assert {i.date_time for i in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}  # clamped to 1980


def test_a_rewritten_member_gets_its_record_row_updated(tmp_path: Path) -> None:
    path = _wheel(tmp_path / "w.whl", MEMBERS)
    wheelzip.normalise(path, 0, rewrite=lambda name, data: data + b"!" if name == "pkg/lib.so" else data)
    assert wheelzip.record_problems(path) == []
    with zipfile.ZipFile(path) as archive:
        assert archive.read("pkg/lib.so") == MEMBERS["pkg/lib.so"] + b"!"


def test_record_problems_names_a_stale_row(tmp_path: Path) -> None:
    path = _wheel(tmp_path / "w.whl", MEMBERS)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("pkg/extra.py", b"")
    assert wheelzip.record_problems(path) == ["pkg/extra.py: not in RECORD"]


def test_a_failed_normalise_leaves_the_wheel_and_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "dup.whl"
    with pytest.warns(UserWarning), zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.py", b"1")
        archive.writestr("a.py", b"2")
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"'a\.py' appears more than once"):
        wheelzip.normalise(path, 0)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["dup.whl"]


NAMES = st.lists(st.from_regex(r"[a-z]{1,6}(/[a-z]{1,6}){0,2}\.(py|so|txt)", fullmatch=True), min_size=1,
                 max_size=8, unique=True)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=NAMES, data=st.data())
def test_any_order_time_and_level_normalises_to_one_archive(tmp_path: Path, names: list[str],
                                                            data: st.DataObject) -> None:
    members = {name: data.draw(st.binary(max_size=200)) for name in names}
    order = [*members, f"{DIST}/RECORD"]
    shuffled = data.draw(st.permutations(order))
    one = _wheel(tmp_path / "one.whl", members, order=order, when=data.draw(st.integers(0, 50)))
    two = _wheel(tmp_path / "two.whl", members, order=list(shuffled), when=data.draw(st.integers(0, 50)),
                 deflate=data.draw(st.booleans()), comment=data.draw(st.binary(max_size=8)))
    wheelzip.normalise(one, 1_000_000_000)
    wheelzip.normalise(two, 1_000_000_000)
    assert one.read_bytes() == two.read_bytes()
    assert wheelzip.record_problems(one) == []


# -- nvcc's pid in ELF files ----------------------------------------------------------------------

FATBIN = fatbin(entry(2, 121, b"tmpxft_00001234_00000000 in device code"))


def _elf(pid: str, *, debug: bool = True, loaded: str = "0000000a") -> bytes:
    """A little-endian ELF64 with a build id, a symbol string table and a DWARF string table that
    name nvcc's temp file with ``pid``, and a loaded fatbin section that names it with ``loaded``."""
    name = f"tmpxft_{pid}_00000000-6_kernel.cudafe1.cpp".encode()
    build_id = struct.pack("<III", 4, 20, 3) + b"GNU\0" + bytes(range(20))
    sections = [(".nv_fatbin", 1, 0x2, FATBIN + name.replace(pid.encode(), loaded.encode())),
                (".note.gnu.build-id", 7, 0x2, build_id),
                (".strtab", 3, 0, b"\0" + name + b"\0")]
    if debug:
        sections.append((".debug_line_str", 1, 0x30, b"/src\0" + name + b"\0"))
    shstrtab = b"\0" + b"".join(n.encode() + b"\0" for n, *_ in sections) + b".shstrtab\0"
    sections.append((".shstrtab", 3, 0, shstrtab))
    body, headers, offset, name_at = b"", [bytes(64)], 64, 1
    for section_name, kind, flags, content in sections:
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, kind, flags, 0, offset, len(content), 0, 0, 1, 0))
        name_at += len(section_name) + 1
        body, offset = body + content, offset + len(content)
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x28, offset)
    struct.pack_into("<HHH", header, 0x3A, 64, len(headers), len(headers) - 1)
    return bytes(header) + body + b"".join(headers)


def test_pids_are_zeroed_outside_loaded_sections() -> None:
    one, two = _elf("0000000a"), _elf("0000000b")
    assert one != two
    fixed = elfnames.neutralise(one)
    assert fixed == elfnames.neutralise(two) and len(fixed) == len(one)
    assert fixed.count(b"tmpxft_00000000_00000000-6_kernel") == 2  # .strtab and .debug_line_str
    assert fixed.count(b"tmpxft_0000000a_") == 1  # the loaded fatbin section is not touched
    assert fixed.find(FATBIN) == one.find(FATBIN) and targets(fixed) == targets(one)


def test_build_id_is_recomputed_only_when_debug_info_changed() -> None:
    build_id = bytes(range(20))
    assert build_id not in elfnames.neutralise(_elf("0000000a"))
    assert build_id in elfnames.neutralise(_elf("0000000a", debug=False))
    assert build_id not in elfnames.neutralise(_elf("00000000"))  # by what is there, not by what changed
    plain = _elf("00000000", debug=False)
    assert elfnames.neutralise(plain) == plain


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.binary(max_size=300), st.integers(0, 400))
def test_damaged_elf_files_come_back_unchanged_or_fixed_never_raise(noise: bytes, cut: int) -> None:
    for data in (b"\x7fELF" + noise + b"tmpxft_", _elf("00000abc")[:cut] + noise):
        out = elfnames.neutralise(data)
        assert len(out) == len(data)
