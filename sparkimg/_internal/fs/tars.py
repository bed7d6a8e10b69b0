"""Reading a tar archive sparkimg did not write (an sdist, a ``sparkimg save`` file, a layer blob
out of a compile container), with every header bounded before it is read.

``tarfile`` reads a member's metadata (a pax header, a GNU long name or long link) into memory in
one piece, whatever size its header claims, and follows a GNU sparse map block by block: a few
hundred kilobytes of gzip can claim gigabytes. Before Python 3.11.10 and 3.12.6 its pax parsing
also backtracks over a run of digits, quadratic in the run (CVE-2024-6232, python/cpython#121285;
measured on this project's 3.11.7: 20,000 digits take 0.87 s, a megabyte would take most of an
hour). Here, before ``tarfile`` parses them:

- a metadata payload over ``HEADER_LIMIT``, or global pax data adding up to more, is refused;
- a pax payload must be well-formed records (``LENGTH KEY=VALUE\\n``, each length exact) with no
  run of more than ``DIGIT_RUN`` digits: the old parser's worst case is then ~8 ms a header;
- a sparse member (old GNU or pax ``GNU.sparse.*``) is refused: it extracts as a file larger than
  its bytes, and none of the archives sparkimg reads has one.

A refusal is a ``tarfile.TarError`` (``tarfile`` passes it on as a ``ReadError`` when it comes from
a header after the first) that says why; each caller turns it into its own error with a hint.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

HEADER_LIMIT = 64 << 10  # one pax header or long name, and all global headers: real ones are a few hundred bytes
DIGIT_RUN = 32  # the longest real value is a size or an mtime: at most 20 digits
_LONG_DIGITS = re.compile(rb"\d{%d}" % (DIGIT_RUN + 1))
_METADATA = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
             tarfile.GNUTYPE_LONGLINK)


def open_archive(path: Path, mode: Literal["r:", "r:*"] = "r:*") -> tarfile.TarFile:
    """``tarfile.open`` for reading (``r:`` uncompressed, ``r:*`` any compression), with
    ``BoundedTarInfo`` headers."""
    return tarfile.open(path, mode, tarinfo=BoundedTarInfo)


def check_pax_records(data: bytes) -> str | None:
    """What is wrong with a pax header's payload, or None: one pass over its records."""
    if _LONG_DIGITS.search(data):
        return f"a run of more than {DIGIT_RUN} digits"
    position, end = 0, len(data)
    while position < end and data[position] != 0:  # the payload's block is padded with NULs
        space = data.find(b" ", position, position + 21)
        digits = data[position:space]
        if space < 0 or not digits.isdigit():
            return f"a record at byte {position} does not start with its length"
        length = int(digits)
        last = position + length - 1
        if length < 5 or last >= end or data[last] != 0x0A or data.find(b"=", space + 2, last) < 0:
            return f"the record at byte {position} is not LENGTH KEY=VALUE\\n of its length"
        position += length
    return None


class BoundedTarInfo(tarfile.TarInfo):
    """A member header that refuses, before reading them, metadata too large or malformed for
    ``tarfile`` to parse safely, and sparse members."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> Any:
        if self.type in _METADATA and self.size > HEADER_LIMIT:
            raise tarfile.HeaderError(f"the header at byte {self.offset} claims {self.size} bytes of "
                                      f"metadata (at most {HEADER_LIMIT} are read)")
        if self.type == tarfile.XGLTYPE:
            held = sum(len(k) + len(v) for k, v in tarfile_.pax_headers.items())
            if held + self.size > HEADER_LIMIT:
                raise tarfile.HeaderError(f"the global headers add up to more than {HEADER_LIMIT} bytes")
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise tarfile.HeaderError(f"the member at byte {self.offset} is sparse; sparse members are not read")
        if self.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE):
            return self._checked_pax(tarfile_)
        return super()._proc_member(tarfile_)  # type: ignore[misc]

    def _checked_pax(self, tarfile_: tarfile.TarFile) -> Any:
        def check(data: bytes) -> None:
            wrong = check_pax_records(data[:self.size])
            if wrong is not None:
                raise tarfile.HeaderError(f"the pax header at byte {self.offset} is malformed: {wrong}")
            if b" GNU.sparse." in data[:self.size]:
                raise tarfile.HeaderError(f"the member after byte {self.offset} is sparse; sparse members "
                                          "are not read")

        real = tarfile_.fileobj
        tarfile_.fileobj = _CheckedRead(real, check)
        try:
            return super()._proc_member(tarfile_)  # type: ignore[misc]
        finally:
            tarfile_.fileobj = real


class _CheckedRead:
    """A file whose next read (a pax header's payload) is checked before ``tarfile`` parses it;
    the others pass through."""

    def __init__(self, fileobj: Any, check: Callable[[bytes], None]) -> None:
        self._fileobj = fileobj
        self._check: Callable[[bytes], None] | None = check

    def read(self, size: int = -1) -> bytes:
        data: bytes = self._fileobj.read(size)
        if self._check is not None:
            check, self._check = self._check, None
            check(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fileobj, name)
