"""A zip member read through ISA-L is the member ``zipfile`` reads, in whatever pieces it is
asked for; a damaged or short stream is an error, never fewer bytes taken for the whole."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from sparkimg._internal.fs.inflate import open_member

MEMBERS = {
    "random.bin": os.urandom(3 << 20),  # inflates to itself: many pieces of input
    "zeros.bin": bytes(40 << 20),  # a thousandfold: one piece of input, many of output
    "text.py": b"print('hello')\n" * 5000,
    "empty": b"",
}


def _wheel(path: Path, method: int) -> Path:
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        for name, data in MEMBERS.items():
            archive.writestr(name, data)
    return path


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED, zipfile.ZIP_BZIP2])
@pytest.mark.parametrize("piece", [1, 4096, 1 << 20, 7 << 20])
def test_every_member_reads_as_zipfile_reads_it(tmp_path: Path, method: int, piece: int) -> None:
    path = _wheel(tmp_path / "w.whl", method)
    with zipfile.ZipFile(path) as archive:
        for name, data in MEMBERS.items():
            if piece == 1 and len(data) > 100_000:
                continue  # byte by byte through megabytes says nothing more
            reader = open_member(path, archive, name)
            got = bytearray()
            while chunk := reader.read(piece):
                assert len(chunk) <= piece
                got += chunk
            reader.close()
            assert bytes(got) == data, name


def test_a_piece_never_holds_more_than_was_asked_of_a_bomb(tmp_path: Path) -> None:
    path = _wheel(tmp_path / "w.whl", zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(path) as archive:
        reader = open_member(path, archive, "zeros.bin")
        assert len(reader.read(1000)) == 1000
        reader.close()


def test_a_short_or_damaged_stream_is_an_error(tmp_path: Path) -> None:
    path = _wheel(tmp_path / "w.whl", zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("text.py")
    raw = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename)
    raw[start] = 0b111  # the last block, of type 3: deflate has no such type
    path.write_bytes(bytes(raw))
    with zipfile.ZipFile(path) as archive, pytest.raises(zipfile.BadZipFile, match="damaged deflate stream"):
        reader = open_member(path, archive, "text.py")
        while reader.read(1 << 20):
            pass
    with zipfile.ZipFile(path) as archive, pytest.raises(KeyError):
        open_member(path, archive, "absent")


def test_a_stream_cut_short_is_an_error(tmp_path: Path) -> None:
    """The central directory says more compressed bytes than the stream holds before its end."""
    path = _wheel(tmp_path / "w.whl", zipfile.ZIP_DEFLATED)
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("text.py")
        info.compress_size //= 2  # as a damaged central directory would say
        reader = open_member(path, archive, "text.py")
        with pytest.raises(EOFError):
            while reader.read(1 << 20):
                pass
