"""Compressing a layer for the trip off the machine (``sparkimg push --compression``): the
compressed bytes are a function of the layer tar, the compressor, its version and its level,
never of the number of threads (docs/media-types.md).

- **zstd**: libzstd through the ``zstandard`` package, always in its multi-threaded mode
  (``threads >= 1``). libzstd cuts the input into jobs whose size follows from the level and
  window, not from the worker count, so 1 and 16 workers write the same frame; its one-thread
  blocking mode (``threads=0``) writes another and is never used. The frame records the
  content size and a checksum.
- **gzip**: pigz's scheme in Python: the tar is cut into 1 MiB blocks, each deflated on its own
  thread with the 32 KiB before it as the dictionary and ended on a byte boundary (a sync
  flush), the last one finished; the pieces are joined in order into one member under a fixed
  header (mtime 0, XFL 0, OS 255). Any gunzip reads it; zlib releases the GIL while it deflates.

A compressed layer is kept in the store, found again by (diff_id, compressor), so an unchanged
layer is never compressed twice.
"""

from __future__ import annotations

import hashlib
import os
import struct
import time
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, cast

from sparkimg.errors import UsageError
from sparkimg.events import Event, Phase, Reporter, silent
from sparkimg.formats import oci
from sparkimg.formats.canonical import hex_of
from sparkimg.store.content import CHUNK, BlobWriter, Store

CHOICES = ("none", "gzip", "zstd")
COMPRESSED = "compressed-layers"  # store records: a layer's compressed blob by diff_id and compressor
GZIP_BLOCK = 1 << 20  # part of the gzip output's definition: another block size writes other bytes
_WINDOW = 32 << 10  # deflate's window: the dictionary each block takes from the one before
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # magic, deflate, no flags, mtime 0, XFL 0, OS 255


@dataclass(frozen=True)
class Compressor:
    """A compressor and its level; ``identity`` names everything its output depends on."""

    name: str  # "gzip" or "zstd"
    level: int

    @property
    def identity(self) -> str:
        if self.name == "gzip":
            return f"gzip-{self.level}/zlib-{zlib.ZLIB_RUNTIME_VERSION}/blocks-{GZIP_BLOCK >> 20}MiB"
        import zstandard

        return f"zstd-{self.level}/libzstd-{'.'.join(map(str, zstandard.ZSTD_VERSION))}/mt"

    def media_type(self, family: str) -> str:
        """The compressed layer's media type in a manifest of ``family``. Docker's schema 2 has no
        zstd type: the OCI one is used there, which Docker CE 23+ and containerd take (they
        read the compression from the bytes)."""
        if self.name == "zstd":
            return oci.OCI_LAYER_ZSTD
        return oci.DOCKER_LAYER_GZIP if family == oci.DOCKER_MANIFEST else oci.OCI_LAYER_GZIP

    def compress(self, source: IO[bytes], size: int, sink: BlobWriter, threads: int) -> None:
        if self.name == "gzip":
            _gzip(source, sink, self.level, threads)
        else:
            import zstandard

            compressor = zstandard.ZstdCompressor(level=self.level, threads=max(1, threads), write_checksum=True,
                                                  write_content_size=True)
            compressor.copy_stream(source, cast(IO[bytes], sink), size=size, read_size=CHUNK, write_size=CHUNK)


LEVELS = {"gzip": (6, 1, 9), "zstd": (3, 1, 19)}  # per compressor: the default level, the lowest, the highest


def chosen(name: str, level: int | None = None) -> Compressor | None:
    """``--compression NAME [--level N]``: None for ``none``."""
    if name == "none":
        return None
    if name not in LEVELS:
        raise UsageError(f"--compression {name}: not one of {', '.join(CHOICES)}")
    default, lowest, highest = LEVELS[name]
    level = default if level is None else level
    if not lowest <= level <= highest:
        raise UsageError(f"--level {level}: {name} takes {lowest} to {highest}",
                         hint=f"leave it out for {name}'s default, {default}")
    return Compressor(name, level)


def _gzip(source: IO[bytes], sink: BlobWriter, level: int, threads: int) -> None:
    """One gzip member, its deflate stream written in independent blocks (pigz's scheme)."""
    crc, length = 0, 0
    sink.write(_GZIP_HEADER)
    with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="sparkimg-gzip") as pool:
        pending: deque[Future[bytes]] = deque()
        previous = b""
        block = source.read(GZIP_BLOCK)
        while True:
            following = source.read(GZIP_BLOCK) if block else b""
            crc, length = zlib.crc32(block, crc), length + len(block)
            pending.append(pool.submit(_deflate, block, previous[-_WINDOW:], level, not following))
            while len(pending) > 2 * max(1, threads) or (pending and not following):
                sink.write(pending.popleft().result())
            if not following:
                break
            previous, block = block, following
    sink.write(struct.pack("<II", crc & 0xFFFFFFFF, length & 0xFFFFFFFF))


def _deflate(block: bytes, dictionary: bytes, level: int, last: bool) -> bytes:
    compressor = (zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, 8, zlib.Z_DEFAULT_STRATEGY, dictionary)
                  if dictionary else zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, 8))
    return compressor.compress(block) + compressor.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def compressed(store: Store, layer: oci.Layer, compressor: Compressor, family: str, threads: int,
               report: Reporter = silent) -> oci.Descriptor:
    """The compressed blob of one layer (stored uncompressed: its digest is its diff_id), from the
    store's record when this compressor made it before, else compressed now into the store."""
    record = f"{hex_of(layer.diff_id)}-{hashlib.sha256(compressor.identity.encode()).hexdigest()[:16]}"
    media_type = compressor.media_type(family)
    known = _known(store.read_record(COMPRESSED, record), layer.diff_id, compressor.identity)
    if known is not None and store.has(hex_of(known[0])):
        return oci.Descriptor(media_type, *known)
    started = time.perf_counter()
    with store.reader(hex_of(layer.descriptor.digest), f"compress: layer {layer.descriptor.digest}") as source, \
            store.writer(what=f"layer {layer.diff_id[:19]} ({compressor.name})") as sink:
        compressor.compress(cast(IO[bytes], source), layer.descriptor.size, sink, threads)
    digest = f"sha256:{sink.sha256}"
    store.write_record(COMPRESSED, record, {"diffID": layer.diff_id, "digest": digest, "size": sink.size,
                                            "compressor": compressor.identity})
    seconds = time.perf_counter() - started
    report(Event(Phase.PUSH, f"compressed {layer.diff_id[:19]} with {compressor.identity}: "
                 f"{layer.descriptor.size} -> {sink.size} bytes in {seconds:.1f} s ({threads} thread(s))",
                 figures={"size": layer.descriptor.size, "compressed": sink.size, "seconds": round(seconds, 3)}))
    return oci.Descriptor(media_type, digest, sink.size)


def _known(record: dict[str, Any] | None, diff_id: str, identity: str) -> tuple[str, int] | None:
    """(digest, size) from a compressed-layer record; a damaged one counts as absent."""
    if record is None or record.get("diffID") != diff_id or record.get("compressor") != identity:
        return None
    digest, size = record.get("digest"), record.get("size")
    if not isinstance(digest, str) or not oci.is_digest(digest) or not isinstance(size, int) or size < 0:
        return None
    return digest, size


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

