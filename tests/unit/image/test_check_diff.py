"""``build --check`` compares two builds' wheels member by member without holding a member in
memory: a wheel out of a compile container may hold one that inflates past what memory holds."""

from __future__ import annotations

import tracemalloc
import zipfile
from pathlib import Path

from sparkimg.image.check import _zip_differences

MiB = 1 << 20


def member_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, (2020, 2, 2, 0, 0, 0))  # both wheels alike but for one byte
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def wheel(path: Path, last: bytes) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open(member_info("pkg/big.bin"), "w", force_zip64=True) as member:
            for _ in range(96):
                member.write(b"\0" * MiB)
            member.write(last)
        archive.writestr(member_info("pkg/__init__.py"), b"")
    return path


def test_a_member_that_inflates_to_96_mib_is_compared_in_pieces(tmp_path: Path) -> None:
    a, b = wheel(tmp_path / "a.whl", b"1"), wheel(tmp_path / "b.whl", b"2")
    assert a.stat().st_size < MiB
    tracemalloc.start()
    try:
        found = _zip_differences("kernel", "pkg-1.0-py3-none-any.whl", a, b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(d.path, d.kind) for d in found] == [("pkg-1.0-py3-none-any.whl!/pkg/big.bin", "content")]
    assert peak < 8 * MiB, peak
