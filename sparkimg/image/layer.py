"""Deterministic layer tars and their gzip blobs: the bytes are a function of the content.

What is normalised, and why (docs/reproducibility.md has the table):
- entries sorted by path; a directory before what it holds;
- mtime = the lock's SOURCE_DATE_EPOCH; uid/gid 0 with empty uname/gname; modes explicit
  (files 0644, or 0755 when any execute bit is set; directories 0755; links 0777);
- one format, POSIX.1-2001 (pax) as Python's ``tarfile`` writes it, with no atime/ctime
  records (pax headers appear only for long or non-ASCII names);
- a file with several hard links is written as that many regular files (a hard link's
  target depends on walk order, which we do not want the bytes to);
- gzip with a fixed level and every header field fixed (mtime 0, no name, XFL 0, OS 255):
  ``tarfile``'s "w:gz" stamps the wall clock and ``gzip.compress`` the OS byte.

The compressor is named with zlib's runtime version (``COMPRESSOR``), recorded in the receipt
and in the cache of compressed blobs by diff_id, since another zlib may compress differently.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import struct
import sys
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sparkimg._internal.fs.hashing import sha256_of
from sparkimg._internal.fs.tars import open_archive
from sparkimg.errors import BuildError
from sparkimg.formats.oci import Descriptor, Layer
from sparkimg.store.content import CHUNK, Store

GZIP_LEVEL = 6
COMPRESSOR = f"gzip-{GZIP_LEVEL}/zlib-{zlib.ZLIB_RUNTIME_VERSION}"
# tarfile's output is stable, but it is CPython's: its minor version is part of the name.
TAR_FORMAT = f"pax/python-tarfile-{sys.version_info[0]}.{sys.version_info[1]}"
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # magic, deflate, no flags, mtime 0, XFL 0, OS 255
COMPRESSED = "gzip"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")  # store records: compressed blob by diff_id and compressor


@dataclass(frozen=True)
class Entry:
    """One member of a layer: ``path`` is relative to the image root (no leading slash)."""

    path: str
    kind: str  # "file", "dir", "symlink" or "whiteout"
    mode: int = 0o644
    source: Path | None = None  # a file's content
    data: bytes | None = None  # or its bytes
    target: str = ""  # a symlink's target

    def __post_init__(self) -> None:
        parts = self.path.split("/")
        if not self.path or self.path.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise BuildError(f"layer entry {self.path!r}: not a clean relative path")


def file_mode(mode: int) -> int:
    return 0o755 if mode & 0o111 else 0o644


def tree_entries(root: Path, *, directory: Callable[[str], bool] = lambda path: True) -> list[Entry]:
    """Every file, link and directory under ``root`` as entries; ``directory(path)`` says whether a
    directory gets an entry of its own (an absent parent is made 0755 by the engine; an entry
    would override the base's metadata of a directory the base already has)."""
    found: list[Entry] = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        base = Path(folder)
        for name in sorted(dirs + files):
            path = base / name
            rel = path.relative_to(root).as_posix()
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                found.append(Entry(rel, "symlink", 0o777, target=os.readlink(path)))
            elif stat.S_ISDIR(info.st_mode):
                if directory(rel):
                    found.append(Entry(rel, "dir", 0o755))
            elif stat.S_ISREG(info.st_mode):
                found.append(Entry(rel, "file", file_mode(info.st_mode), source=path))
            else:
                raise BuildError(f"layer: {rel} is neither a file, a directory nor a link",
                                 hint="a layer holds no devices, sockets or fifos")
    return found


def whiteouts(paths: Iterable[str]) -> list[Entry]:
    """Entries that delete ``paths`` (absolute image paths) from the layers below (OCI whiteouts)."""
    found = []
    for path in paths:
        parent, _, name = path.strip("/").rpartition("/")
        found.append(Entry(f"{parent}/.wh.{name}" if parent else f".wh.{name}", "whiteout", 0o644, data=b""))
    return found


def _members(entries: Iterable[Entry], epoch: int) -> Iterator[tuple[tarfile.TarInfo, Entry]]:
    ordered = sorted(entries, key=lambda e: e.path.encode())
    seen: set[str] = set()
    for entry in ordered:
        if entry.path in seen:
            raise BuildError(f"layer: {entry.path} is written twice")
        seen.add(entry.path)
        info = tarfile.TarInfo(entry.path)
        info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
        info.mode = entry.mode
        if entry.kind == "dir":
            info.type = tarfile.DIRTYPE
        elif entry.kind == "symlink":
            info.type, info.linkname = tarfile.SYMTYPE, entry.target
        else:
            info.type = tarfile.REGTYPE
            info.size = len(entry.data) if entry.data is not None else (entry.source.stat().st_size
                                                                        if entry.source else 0)
        yield info, entry


class _Hashing:
    """A write-only file that hashes what passes through it into ``sink``."""

    def __init__(self, sink: IO[bytes]) -> None:
        self.sink, self.hash, self.size = sink, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        self.sink.write(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    @property
    def digest(self) -> str:
        return "sha256:" + self.hash.hexdigest()


def write_tar(entries: Iterable[Entry], epoch: int, target: Path) -> str:
    """Write the layer tar to ``target``; return its diff_id."""
    with target.open("wb") as handle:
        sink = _Hashing(handle)
        with tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT) as archive:  # type: ignore[call-overload]
            for info, entry in _members(entries, epoch):
                if info.type != tarfile.REGTYPE:
                    archive.addfile(info)
                elif entry.source is not None:
                    with entry.source.open("rb") as content:
                        archive.addfile(info, content)
                else:
                    archive.addfile(info, _BytesReader(entry.data or b""))
        return sink.digest


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self.data) if size < 0 else self.at + size
        chunk, self.at = self.data[self.at:end], min(end, len(self.data))
        return chunk


def gzip_file(source: Path, target: Path) -> tuple[str, int]:
    """Compress ``source`` into ``target`` with every gzip header byte fixed; (digest, size)."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, 8, zlib.Z_DEFAULT_STRATEGY)
    crc, length = 0, 0
    with source.open("rb") as reader, target.open("wb") as handle:
        sink = _Hashing(handle)
        sink.write(_GZIP_HEADER)
        for chunk in iter(lambda: reader.read(CHUNK), b""):
            crc, length = zlib.crc32(chunk, crc), length + len(chunk)
            sink.write(compressor.compress(chunk))
        sink.write(compressor.flush())
        sink.write(struct.pack("<II", crc & 0xFFFFFFFF, length & 0xFFFFFFFF))
    return sink.digest, sink.size


def write_layer(entries: Iterable[Entry], *, epoch: int, media_type: str, created_by: str, store: Store,
                work: Path) -> Layer:
    """The layer's tar, its gzip blob admitted to the store (reused when this diff_id was
    compressed before by this compressor), and its descriptor."""
    work.mkdir(parents=True, exist_ok=True)
    tar = work / "layer.tar"
    diff_id = write_tar(entries, epoch, tar)
    record_name = f"{diff_id.split(':', 1)[1]}-{hashlib.sha256(COMPRESSOR.encode()).hexdigest()[:16]}"
    known = _compressed(store.read_record(COMPRESSED, record_name), diff_id)
    if known is not None and store.has(known[0].split(":", 1)[1]):
        tar.unlink()
        return Layer(Descriptor(media_type, known[0], known[1]), diff_id, created_by)
    compressed = work / "layer.tar.gz"
    digest, size = gzip_file(tar, compressed)
    tar.unlink()
    store.put_file(compressed, expected=digest.split(":", 1)[1], what=f"layer {created_by}")
    compressed.unlink()
    store.write_record(COMPRESSED, record_name, {"diff_id": diff_id, "digest": digest, "size": size,
                                                 "compressor": COMPRESSOR})
    return Layer(Descriptor(media_type, digest, size), diff_id, created_by)


def _compressed(record: dict[str, object] | None, diff_id: str) -> tuple[str, int] | None:
    """(digest, size) from a compressed-blob record; a damaged one counts as absent (compressed again)."""
    if record is None or record.get("diff_id") != diff_id or record.get("compressor") != COMPRESSOR:
        return None
    digest, size = record.get("digest"), record.get("size")
    if not isinstance(digest, str) or not _DIGEST.match(digest) or not isinstance(size, int) or size < 0:
        return None
    return digest, size


def read_members(blob: Path) -> dict[str, tuple[tarfile.TarInfo, str | None]]:
    """A layer blob's members: path -> (header, sha256 of its content for a regular file)."""
    found: dict[str, tuple[tarfile.TarInfo, str | None]] = {}
    try:
        with open_archive(blob) as archive:
            for info in archive:
                handle = archive.extractfile(info) if info.isreg() else None
                found[info.name] = (info, sha256_of(handle) if handle is not None else None)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BuildError(f"layer blob {blob.name}: cannot read it: {exc}",
                         hint="the store's copy is damaged; remove it and build again") from None
    return found


def clear(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
