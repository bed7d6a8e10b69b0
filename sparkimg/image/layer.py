"""Deterministic layer tars, written straight into the store: the bytes are a function of the content.

What is normalised, and why (docs/reproducibility.md has the table):
- entries sorted by path; a directory before what it holds;
- mtime = the epoch given (assembly: a fixed date, never the lock's); uid/gid 0 with empty uname/gname; modes explicit
  (files 0644, or 0755 when any execute bit is set; directories 0755; links 0777);
- one format, POSIX.1-2001 (pax) as Python's ``tarfile`` writes it, with no atime/ctime
  records (pax headers appear only for long or non-ASCII names);
- a file with several hard links is written as that many regular files (a hard link's
  target depends on walk order, which we do not want the bytes to).

A new layer is stored uncompressed (``COMPRESSOR``): its blob digest is its diff_id, it is
written and hashed in one pass with no second read, and the local engine takes it as it is
(docs/media-types.md says which engine accepts what). Compression is for blobs that leave the
machine and happens there, not on the build path.
"""

from __future__ import annotations

import contextlib
import hashlib
import queue
import shutil
import sys
import tarfile
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sparkimg._internal.elf import HEAD
from sparkimg._internal.fs.hashing import sha256_of
from sparkimg._internal.fs.inflate import open_member
from sparkimg._internal.fs.tars import open_archive
from sparkimg._internal.fs.verified import VerifiedReader
from sparkimg.errors import BuildError
from sparkimg.formats.oci import Descriptor, Layer
from sparkimg.store.content import CHUNK, BlobWriter, Store

_AHEAD_BYTES = 8 << 20  # a zip member over this is inflated by a thread of its own (``_MemberReader``)
_AHEAD_CHUNKS = 8  # how many pieces of CHUNK bytes that thread may run ahead
COMPRESSOR = "none"  # what compresses a new layer in the store: nothing (see the module's docstring)
# tarfile's output is stable, but it is CPython's: its minor version is part of the name.
TAR_FORMAT = f"pax/python-tarfile-{sys.version_info[0]}.{sys.version_info[1]}"
Seen = Callable[[str, bytes], None]  # told each regular file's path and first bytes as it is written


@dataclass(frozen=True)
class ZipMember:
    """A file's content as one member of a zip (a wheel): inflated straight into the layer's tar
    as it is written, and checked there to have this size and sha256 (hex)."""

    archive: Path
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Entry:
    """One member of a layer: ``path`` is relative to the image root (no leading slash)."""

    path: str
    kind: str  # "file", "dir", "symlink" or "whiteout"
    mode: int = 0o644
    source: Path | None = None  # a file's content
    sha256: str | None = None  # the source's name in the store: its bytes are checked as they are copied
    data: bytes | None = None  # or its bytes
    target: str = ""  # a symlink's target
    member: ZipMember | None = None  # or a member of a zip

    def __post_init__(self) -> None:
        parts = self.path.split("/")
        if not self.path or self.path.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise BuildError(f"layer entry {self.path!r}: not a clean relative path")


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
            info.size = len(entry.data) if entry.data is not None else entry.member.size if entry.member \
                else entry.source.stat().st_size if entry.source else 0
        yield info, entry


class _Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...

    def tell(self) -> int: ...


def tar_into(entries: Iterable[Entry], epoch: int, sink: _Sink, seen: Seen | None = None) -> None:
    """Write the layer tar of ``entries`` to ``sink``, each file's content copied in 1 MiB pieces;
    ``seen(path, head)`` is told each regular file's first ``HEAD`` bytes as they pass (the CPU audit)."""
    with contextlib.ExitStack() as zips, \
            tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT,  # type: ignore[call-overload]
                         copybufsize=CHUNK) as archive:
        opened: dict[Path, zipfile.ZipFile] = {}
        for info, entry in _members(entries, epoch):
            if info.type != tarfile.REGTYPE:
                archive.addfile(info)
                continue
            if entry.member is not None:
                member = entry.member
                if member.archive not in opened:
                    opened[member.archive] = zips.enter_context(_open_zip(member.archive))
                head = _copy_member(archive, info, opened[member.archive], member)
            elif entry.source is not None:
                with (VerifiedReader(entry.source, entry.sha256, entry.path) if entry.sha256
                      else entry.source.open("rb")) as content:
                    reader = _Head(content)
                    archive.addfile(info, reader)
                    head = reader.head
            else:
                head = (entry.data or b"")[:HEAD]
                archive.addfile(info, _BytesReader(entry.data or b""))
            if seen is not None:
                seen(entry.path, head)


class _Reader(Protocol):
    def read(self, size: int, /) -> bytes: ...


class _Head:
    """A reader that keeps the first ``HEAD`` bytes that pass through it."""

    def __init__(self, inner: _Reader) -> None:
        self.inner, self.head = inner, b""

    def read(self, size: int = -1) -> bytes:
        chunk = self.inner.read(size)
        if len(self.head) < HEAD:
            self.head += chunk[:HEAD - len(self.head)]
        return chunk


def _open_zip(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise BuildError(f"{path.name}: cannot read it: {exc}",
                         hint="the store's copy is damaged; remove it and build again") from None


class _Checked:
    """A zip member's content as it is read, hashed and counted on the way: ``check`` breaks the
    build when its size or sha256 is not the entry's (a wheel whose RECORD lies)."""

    def __init__(self, archive: zipfile.ZipFile, member: ZipMember) -> None:
        self.member, self.hash, self.size = member, hashlib.sha256(), 0
        try:
            self.stream = open_member(member.archive, archive, member.name)
        except (KeyError, zipfile.BadZipFile, OSError) as exc:
            raise self._broken(exc) from None

    def _broken(self, why: object) -> BuildError:
        return BuildError(f"{self.member.archive.name}: {self.member.name}: {why}",
                          hint="the wheel is damaged, or its RECORD does not match its files; rebuild it "
                          "or pin another")

    def read(self, size: int = -1) -> bytes:
        """``size`` bytes; fewer only at the member's end, which must be at its size."""
        try:
            chunk = self.stream.read(size)
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
            raise self._broken(exc) from None
        self.hash.update(chunk)
        self.size += len(chunk)
        if len(chunk) < size and self.size < self.member.size:
            raise self._broken(f"ends after {self.size} bytes, not the {self.member.size} its RECORD gives")
        return chunk

    def check(self) -> None:
        if (self.size, self.hash.hexdigest()) != (self.member.size, self.member.sha256):
            raise self._broken(f"holds {self.size} bytes with sha256 {self.hash.hexdigest()[:16]}…, not the "
                               f"{self.member.size} bytes with sha256 {self.member.sha256[:16]}… its RECORD gives")


class _ReadAhead:
    """A reader whose ``read(CHUNK)`` runs in a thread of its own, up to ``_AHEAD_CHUNKS`` pieces
    ahead of the tar: inflating and hashing (zlib, ISA-L and hashlib let go of the GIL) run beside
    the store's hashing and writing of what came before. Used for members over ``_AHEAD_BYTES``;
    about a third off a gigabyte wheel layer's build (bench/scale.py)."""

    def __init__(self, source: _Checked) -> None:
        self.source, self.held = source, b""
        self.pieces: queue.Queue[bytes | BaseException] = queue.Queue(_AHEAD_CHUNKS)
        self.stop = threading.Event()
        self.worker = threading.Thread(target=self._run, name="read ahead", daemon=True)
        self.worker.start()

    def _run(self) -> None:
        """Every piece into the queue, then b"" (or what went wrong); gives up once ``stop`` is set."""
        while not self.stop.is_set():
            try:
                item: bytes | BaseException = self.source.read(CHUNK)
            except BaseException as exc:  # handed to the reader's thread, which raises it
                item = exc
            while not self.stop.is_set():
                try:
                    self.pieces.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if not isinstance(item, bytes) or not item:
                return

    def read(self, size: int) -> bytes:
        """``size`` bytes, fewer only at the end."""
        while len(self.held) < size:
            item = self.pieces.get()
            if isinstance(item, BaseException):
                raise item
            if not item:
                self.pieces.put(item)  # the end stays the end for the next read
                break
            self.held += item
        chunk, self.held = self.held[:size], self.held[size:]
        return chunk

    def close(self) -> None:
        self.stop.set()
        self.worker.join()


def _copy_member(archive: tarfile.TarFile, info: tarfile.TarInfo, zipped: zipfile.ZipFile, member: ZipMember) -> bytes:
    """Copy one zip member into the tar, checked; return its first ``HEAD`` bytes."""
    checked = _Checked(zipped, member)
    ahead = _ReadAhead(checked) if member.size > _AHEAD_BYTES else None
    reader = _Head(ahead or checked)
    try:
        archive.addfile(info, reader)
    finally:
        if ahead is not None:
            ahead.close()  # the worker has stopped: the hash is final
        checked.stream.close()
    checked.check()
    return reader.head


def write_tar(entries: Iterable[Entry], epoch: int, target: Path) -> str:
    """Write the layer tar to ``target``; return its diff_id."""
    with target.open("wb") as handle:
        sink = BlobWriter(handle)
        tar_into(entries, epoch, sink)
    return sink.digest


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self.data) if size < 0 else self.at + size
        chunk, self.at = self.data[self.at:end], min(end, len(self.data))
        return chunk


def write_layer(entries: Iterable[Entry], *, epoch: int, media_type: str, created_by: str, store: Store,
                seen: Seen | None = None) -> Layer:
    """The layer's tar written into the store as its blob (digest = diff_id), and its descriptor
    (``seen`` as in ``tar_into``)."""
    with store.writer(what=f"layer {created_by}") as sink:
        tar_into(entries, epoch, sink, seen)
    digest = f"sha256:{sink.sha256}"
    return Layer(Descriptor(media_type, digest, sink.size), digest, created_by)


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
