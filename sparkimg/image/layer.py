"""Deterministic layer tars, written straight into the store: the bytes are a function of the content.

What is normalised, and why (docs/reproducibility.md has the table):
- entries sorted by path; a directory before what it holds;
- mtime = the lock's SOURCE_DATE_EPOCH; uid/gid 0 with empty uname/gname; modes explicit
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

import os
import shutil
import stat
import sys
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sparkimg._internal.fs.hashing import sha256_of
from sparkimg._internal.fs.tars import open_archive
from sparkimg.errors import BuildError
from sparkimg.formats.oci import Descriptor, Layer
from sparkimg.store.content import CHUNK, BlobWriter, Store

COMPRESSOR = "none"  # what compresses a new layer in the store: nothing (see the module's docstring)
# tarfile's output is stable, but it is CPython's: its minor version is part of the name.
TAR_FORMAT = f"pax/python-tarfile-{sys.version_info[0]}.{sys.version_info[1]}"


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


class _Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...

    def tell(self) -> int: ...


def tar_into(entries: Iterable[Entry], epoch: int, sink: _Sink) -> None:
    """Write the layer tar of ``entries`` to ``sink``, each file's content copied in 1 MiB pieces."""
    with tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT,  # type: ignore[call-overload]
                      copybufsize=CHUNK) as archive:
        for info, entry in _members(entries, epoch):
            if info.type != tarfile.REGTYPE:
                archive.addfile(info)
            elif entry.source is not None:
                with entry.source.open("rb") as content:
                    archive.addfile(info, content)
            else:
                archive.addfile(info, _BytesReader(entry.data or b""))


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


def write_layer(entries: Iterable[Entry], *, epoch: int, media_type: str, created_by: str, store: Store) -> Layer:
    """The layer's tar written into the store as its blob (digest = diff_id), and its descriptor."""
    with store.writer(what=f"layer {created_by}") as sink:
        tar_into(entries, epoch, sink)
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
