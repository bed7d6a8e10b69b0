"""Rewrite a wheel's zip so that its bytes are a function of its members' names and contents.

A wheel written by a build carries whatever its writer chose: member order, wall-clock times,
the writer's OS and permission bits, extra fields, comments, a compression level.
``normalise`` writes the same members again with all of that fixed:

- members sorted by name, the ``*.dist-info/`` folder last and its ``RECORD`` last of all
  (the order the wheel specification recommends, so an installer can stream the archive);
- every date the lock's SOURCE_DATE_EPOCH, clamped to what a zip can hold (1980 to 2107);
- Unix as the creating system, mode 0644 for files (0755 when the writer gave any execute
  bit), 0755 for folders; no extra fields, no comments, no data descriptors;
- deflate at level 6 for every file (folders stored).

Member contents are kept byte for byte unless ``rewrite`` changes them; then the member's
``RECORD`` row gets the new hash and size. The file is replaced atomically (temp + rename).
Pure apart from the one file it rewrites: no engine, no store.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

ZIP_MIN_EPOCH = 315532800  # 1980-01-01T00:00:00Z, the first time a zip can hold
ZIP_MAX_EPOCH = 4354819198  # 2107-12-31T23:59:58Z, the last
LEVEL = 6
UNIX = 3
FILE_MODE, EXEC_MODE, DIR_MODE = 0o100644, 0o100755, 0o040755
MS_DOS_DIRECTORY = 0x10

Rewrite = Callable[[str, bytes], bytes]


def date_time(epoch: int) -> tuple[int, int, int, int, int, int]:
    """The zip date of ``epoch``, clamped to the range a zip can hold."""
    y, mo, d, h, mi, s = time.gmtime(min(max(epoch, ZIP_MIN_EPOCH), ZIP_MAX_EPOCH))[:6]
    return y, mo, d, h, mi, s


def order(name: str) -> tuple[bool, bool, str]:
    """Sort key: ordinary members by name, then ``*.dist-info/`` members, ``RECORD`` last."""
    top, _, rest = name.partition("/")
    dist_info = top.endswith(".dist-info") and bool(rest or name.endswith("/"))
    return dist_info, dist_info and rest == "RECORD", name


def normalise(path: Path, epoch: int, *, rewrite: Rewrite | None = None) -> None:
    """Rewrite the wheel at ``path`` deterministically (see the module docstring)."""
    stamp = date_time(epoch)
    with zipfile.ZipFile(path) as source:
        infos = source.infolist()
        names = [info.filename for info in infos]
        if len(set(names)) != len(names):
            duplicate = next(n for n in names if names.count(n) > 1)
            raise ValueError(f"{path.name}: member {duplicate!r} appears more than once")
        changed: dict[str, bytes] = {}
        fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        temp = Path(temp_name)
        try:
            with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w") as target:
                for info in sorted(infos, key=lambda i: order(i.filename)):
                    data = b"" if info.is_dir() else source.read(info)
                    if rewrite is not None and not info.is_dir() and not _is_record(info.filename):
                        new = rewrite(info.filename, data)
                        if new != data:
                            changed[info.filename] = data = new
                    if _is_record(info.filename) and changed:
                        data = _updated_record(data, changed)
                    target.writestr(_member(info, stamp), data, compresslevel=None if info.is_dir() else LEVEL)
                target.comment = b""
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise


def _member(info: zipfile.ZipInfo, stamp: tuple[int, int, int, int, int, int]) -> zipfile.ZipInfo:
    member = zipfile.ZipInfo(info.filename, date_time=stamp)
    member.create_system = UNIX
    member.extra = b""
    member.comment = b""
    if info.is_dir():
        member.external_attr = DIR_MODE << 16 | MS_DOS_DIRECTORY
        member.compress_type = zipfile.ZIP_STORED
    else:
        executable = info.create_system == UNIX and (info.external_attr >> 16) & 0o111
        member.external_attr = (EXEC_MODE if executable else FILE_MODE) << 16
        member.compress_type = zipfile.ZIP_DEFLATED
    return member


def _is_record(name: str) -> bool:
    top, _, rest = name.partition("/")
    return top.endswith(".dist-info") and rest == "RECORD"


def record_hash(data: bytes) -> str:
    """A RECORD hash field: ``sha256=`` and the urlsafe base64 digest without padding."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _updated_record(record: bytes, changed: dict[str, bytes]) -> bytes:
    rows = list(csv.reader(io.StringIO(record.decode("utf-8"))))
    for row in rows:
        if len(row) >= 3 and row[0] in changed:
            row[1], row[2] = record_hash(changed[row[0]]), str(len(changed[row[0]]))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode("utf-8")


def record_problems(path: Path) -> list[str]:
    """What is wrong with a wheel's RECORD: a member it lists with another hash or size, a member
    it does not list, a row for no member. Empty when the RECORD matches the archive."""
    with zipfile.ZipFile(path) as archive:
        records = [n for n in archive.namelist() if _is_record(n)]
        if len(records) != 1:
            return [f"{len(records)} RECORD files"]
        record = records[0]
        rows = {row[0]: row for row in csv.reader(io.StringIO(archive.read(record).decode("utf-8"))) if row}
        problems: list[str] = []
        for info in archive.infolist():
            if info.is_dir() or info.filename == record:
                continue
            row = rows.pop(info.filename, None)
            data = archive.read(info)
            if row is None:
                problems.append(f"{info.filename}: not in RECORD")
            elif len(row) < 3 or row[1] != record_hash(data) or row[2] != str(len(data)):
                problems.append(f"{info.filename}: RECORD says {row[1:3]}, the member is "
                                f"{[record_hash(data), str(len(data))]}")
        rows.pop(record, None)
        problems.extend(f"{name}: in RECORD, not in the wheel" for name in rows)
        return problems
