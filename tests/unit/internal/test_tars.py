"""Tar headers that ``tarfile`` would read whole, parse in quadratic time, or follow as sparse
maps are refused before they are read, in every reader of archives sparkimg did not write."""

from __future__ import annotations

import gzip
import io
import tarfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkimg._internal.fs.tars import DIGIT_RUN, HEADER_LIMIT, check_pax_records, open_archive
from sparkimg.distribution import archive
from sparkimg.errors import BuildError, LoadRefused
from sparkimg.image import layer
from sparkimg.source import sdist as _sdist

MiB = 1 << 20


def header(name: str, kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % tarfile.BLOCKSIZE)


def pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    length = len(body) + 1
    length += len(str(length + len(str(length)))) - 1  # the length counts its own digits
    return str(length).encode() + body


def member(name: str = "pkg-1.0/a.txt", data: bytes = b"hello\n") -> bytes:
    return header(name, tarfile.REGTYPE, len(data)) + padded(data)


def write(path: Path, *chunks: bytes | Iterator[bytes], compress: bool = False) -> Path:
    with (gzip.open(path, "wb") if compress else path.open("wb")) as out:
        for chunk in chunks:
            for piece in ([chunk] if isinstance(chunk, bytes) else chunk):
                out.write(piece)
        out.write(b"\0" * tarfile.BLOCKSIZE * 2)
    return path


def zeros(size: int) -> Iterator[bytes]:
    for _ in range(size // MiB):
        yield b"\0" * MiB


def names(path: Path) -> list[str]:
    with open_archive(path) as tar:
        return tar.getnames()


def test_an_archive_with_ordinary_pax_headers_reads_as_tarfile_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "ok.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, pax in (("d/" + "x" * 300, {"mtime": "1700000000.123456789"}),
                          ("d/b", {"SCHILY.xattr.user.note": "1" * DIGIT_RUN, "comment": "é"})):
            info = tarfile.TarInfo(name)
            info.size, info.pax_headers = 3, pax
            tar.addfile(info, io.BytesIO(b"abc"))
    with tarfile.open(path) as plain, open_archive(path) as bounded:
        assert [(m.name, m.pax_headers, m.size) for m in plain] == [(m.name, m.pax_headers, m.size) for m in bounded]


def test_a_pax_header_claiming_more_than_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    size = 128 * MiB  # 128 KiB of gzip
    path = write(tmp_path / "bomb.tar.gz", header("././@PaxHeader", tarfile.XHDTYPE, size), zeros(size),
                 member(), compress=True)
    assert path.stat().st_size < MiB
    tracemalloc.start()
    try:
        with pytest.raises(tarfile.TarError, match="claims 134217728 bytes of metadata"):
            names(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MiB, peak


@pytest.mark.parametrize("kind", [tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XGLTYPE])
def test_a_long_name_or_global_header_over_the_limit_is_refused(tmp_path: Path, kind: bytes) -> None:
    size = HEADER_LIMIT + tarfile.BLOCKSIZE
    path = write(tmp_path / "long.tar", header("././@LongLink", kind, size), padded(b"n" * size), member())
    with pytest.raises(tarfile.TarError, match="bytes of metadata"):
        names(path)


def test_global_headers_adding_up_past_the_limit_are_refused(tmp_path: Path) -> None:
    records = b"".join(pax_record(f"k{i}", "v" * 1000) for i in range(HEADER_LIMIT // 1000 * 2 // 3))  # 2/3 of it each
    one = header("pax_global_header", tarfile.XGLTYPE, len(records)) + padded(records)
    with pytest.raises(tarfile.TarError, match="global headers add up"):
        names(write(tmp_path / "g.tar", one, one.replace(b"k", b"j"), member()))


@pytest.mark.parametrize("value, refused", [("7" * (DIGIT_RUN + 1), True), ("7" * DIGIT_RUN, False)])
def test_a_run_of_digits_that_makes_old_tarfile_quadratic_is_refused(tmp_path: Path, value: str,
                                                                    refused: bool) -> None:
    records = pax_record("comment", value)
    path = write(tmp_path / "digits.tar", header("././@PaxHeader", tarfile.XHDTYPE, len(records)),
                 padded(records), member())
    if refused:
        with pytest.raises(tarfile.TarError, match="run of more than"):
            names(path)
    else:
        assert names(path) == ["pkg-1.0/a.txt"]


@pytest.mark.parametrize("payload", [b"99 comment=x\n", b"12 =nokey\n\n\n", b"x comment=y\n", b"6 a=b",
                                     b"14 comment=x\n"])
def test_a_malformed_pax_record_is_refused(tmp_path: Path, payload: bytes) -> None:
    assert check_pax_records(payload) is not None
    path = write(tmp_path / "bad.tar", header("././@PaxHeader", tarfile.XHDTYPE, len(payload)), padded(payload),
                 member())
    with pytest.raises(tarfile.TarError, match="malformed"):
        names(path)


def test_sparse_members_are_refused_old_gnu_and_pax(tmp_path: Path) -> None:
    old = tarfile.TarInfo("pkg-1.0/holes")
    old.type = tarfile.GNUTYPE_SPARSE
    with pytest.raises(tarfile.TarError, match="sparse"):
        names(write(tmp_path / "old.tar", old.tobuf(format=tarfile.GNU_FORMAT)))
    records = b"".join(pax_record(k, v) for k, v in (("GNU.sparse.major", "1"), ("GNU.sparse.minor", "0"),
                                                     ("GNU.sparse.name", "pkg-1.0/holes"),
                                                     ("GNU.sparse.realsize", str(1 << 40))))
    path = write(tmp_path / "pax.tar", header("././@PaxHeader", tarfile.XHDTYPE, len(records)), padded(records),
                 member())
    with pytest.raises(tarfile.TarError, match="sparse"):
        names(path)


def test_each_reader_of_foreign_archives_refuses_with_its_own_error(tmp_path: Path) -> None:
    bomb = write(tmp_path / "bomb.tar.gz", header("././@PaxHeader", tarfile.XHDTYPE, 2 * MiB), zeros(2 * MiB),
                 member(), compress=True)
    with pytest.raises(BuildError, match=r"cannot unpack: .*bytes of metadata"):
        _sdist.unpack(bomb, tmp_path / "out", strip=True, what="sources.pkg")
    with pytest.raises(BuildError, match=r"cannot read .*bytes of metadata"):
        _sdist.read_members(bomb, {"setup.py"}, strip=True, what="sources.pkg")
    with pytest.raises(BuildError, match=r"cannot read it: .*bytes of metadata"):
        layer.read_members(bomb)
    plain = tmp_path / "save.tar"
    plain.write_bytes(gzip.decompress(bomb.read_bytes()))
    (tmp_path / "work").mkdir()
    with pytest.raises(LoadRefused, match=r"cannot read the archive: .*bytes of metadata"):
        archive._unpack(plain, tmp_path / "work")
