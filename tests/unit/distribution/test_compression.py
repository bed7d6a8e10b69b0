"""Layer compression for push: the bytes are a function of the tar, the compressor and its
level, not of the thread count; any gunzip or zstd reader gets the tar back; a compressed
layer is kept in the store by (diff_id, compressor) and reused; and the pushed manifest gives
the signed manifest's bytes back, and nothing else does."""

from __future__ import annotations

import gzip
import io
import random
import subprocess
from pathlib import Path

import pytest
import zstandard

from sparkimg.distribution import compression
from sparkimg.errors import UsageError
from sparkimg.formats import oci
from sparkimg.formats.canonical import sha256_prefixed
from sparkimg.store.content import BlobWriter, Store

# Incompressible and compressible stretches, over several gzip blocks and zstd jobs, and an odd end.
_RANDOM = random.Random(22)
DATA = b"".join(_RANDOM.randbytes(700_000) if i % 2 else b"layer tar %d " % i * 90_000 for i in range(9)) + b"end"


def _decompressed(data: bytes, media_type: str) -> bytes:
    if media_type.endswith("+zstd"):
        return zstandard.ZstdDecompressor().decompress(data)
    return gzip.decompress(data)


def _compress(compressor: compression.Compressor, data: bytes, threads: int) -> bytes:
    out = io.BytesIO()
    compressor.compress(io.BytesIO(data), len(data), BlobWriter(out), threads)
    return out.getvalue()


@pytest.mark.parametrize("name", ["gzip", "zstd"])
def test_the_same_bytes_for_any_thread_count_and_any_reader_gets_the_tar_back(name: str) -> None:
    compressor = compression.chosen(name)
    assert compressor is not None
    outputs = {threads: _compress(compressor, DATA, threads) for threads in (1, 2, 3, 8)}
    assert len(set(outputs.values())) == 1, {t: sha256_prefixed(o)[:19] for t, o in outputs.items()}
    blob = outputs[1]
    assert len(blob) < len(DATA) * 0.8
    assert _decompressed(blob, compressor.media_type(oci.OCI_MANIFEST)) == DATA
    if name == "gzip":
        assert gzip.decompress(blob) == DATA
        assert blob[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no clock, no name, OS 255
        command = ["gzip", "-dc"]
    else:
        frame = zstandard.get_frame_parameters(blob)
        assert frame.content_size == len(DATA) and frame.has_checksum
        command = ["zstd", "-dc"]
    tool = subprocess.run(["sh", "-c", f"command -v {command[0]}"], capture_output=True, text=True).stdout.strip()
    if tool:  # the system's own decompressor agrees (gzip always, zstd where installed)
        assert subprocess.run(command, input=blob, capture_output=True, check=True).stdout == DATA


@pytest.mark.parametrize("data", [b"", b"x", b"y" * compression.GZIP_BLOCK, b"z" * (compression.GZIP_BLOCK + 1)])
def test_gzip_edges_empty_one_byte_and_block_boundaries(data: bytes) -> None:
    compressor = compression.Compressor("gzip", 6)
    assert gzip.decompress(_compress(compressor, data, 2)) == data
    assert _compress(compressor, data, 1) == _compress(compressor, data, 4)


def test_the_level_is_part_of_the_bytes_and_the_identity() -> None:
    fast, slow = compression.Compressor("zstd", 1), compression.Compressor("zstd", 9)
    assert _compress(fast, DATA, 2) != _compress(slow, DATA, 2)
    assert fast.identity != slow.identity and fast.identity.startswith("zstd-1/libzstd-")
    assert compression.Compressor("gzip", 6).identity.startswith("gzip-6/zlib-")


def test_bad_choices_are_refused_with_the_range() -> None:
    assert compression.chosen("none") is None
    with pytest.raises(UsageError, match="gzip takes 1 to 9"):
        compression.chosen("gzip", 12)
    with pytest.raises(UsageError, match="not one of"):
        compression.chosen("brotli")


def test_media_types_follow_the_manifest_family() -> None:
    gz, zst = compression.Compressor("gzip", 6), compression.Compressor("zstd", 3)
    assert gz.media_type(oci.DOCKER_MANIFEST) == oci.DOCKER_LAYER_GZIP
    assert gz.media_type(oci.OCI_MANIFEST) == oci.OCI_LAYER_GZIP
    assert zst.media_type(oci.DOCKER_MANIFEST) == zst.media_type(oci.OCI_MANIFEST) == oci.OCI_LAYER_ZSTD


def _layer(store: Store, data: bytes) -> oci.Layer:
    digest = "sha256:" + store.put_bytes(data)
    return oci.Layer(oci.Descriptor(oci.DOCKER_LAYER, digest, len(data)), digest, "test")


def test_a_layer_is_compressed_once_per_compressor_and_a_lost_blob_is_made_again(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    layer = _layer(store, DATA)
    zst = compression.Compressor("zstd", 3)
    first = compression.compressed(store, layer, zst, oci.DOCKER_MANIFEST, 2)
    blob = store.blob(first.digest.split(":")[1])
    stamp = blob.stat().st_ino, blob.stat().st_mtime_ns
    assert compression.compressed(store, layer, zst, oci.DOCKER_MANIFEST, 1) == first  # from the record
    assert (blob.stat().st_ino, blob.stat().st_mtime_ns) == stamp  # not written again
    other = compression.compressed(store, layer, compression.Compressor("gzip", 6), oci.DOCKER_MANIFEST, 2)
    assert other.digest != first.digest and other.media_type == oci.DOCKER_LAYER_GZIP
    blob.chmod(0o644)
    blob.unlink()  # the record survives its blob: compressed again, to the same bytes
    assert compression.compressed(store, layer, zst, oci.DOCKER_MANIFEST, 3) == first
    assert sha256_prefixed(blob.read_bytes()) == first.digest


def _manifest(family: str, layers: list[dict[str, object]]) -> bytes:
    config = oci.Descriptor(oci.FAMILIES[family][0], "sha256:" + "c" * 64, 100).to_json()
    return oci.encode({"schemaVersion": 2, "mediaType": family, "config": config, "layers": layers})


@pytest.mark.parametrize("family", [oci.DOCKER_MANIFEST, oci.OCI_MANIFEST])
def test_the_pushed_manifest_gives_back_the_signed_bytes(family: str) -> None:
    base = {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": "sha256:" + "b" * 64,
            "size": 5, "urls": ["kept/verbatim"]}
    diff_ids = ["sha256:" + "d" * 64, "sha256:" + "e" * 64, "sha256:" + "f" * 64]
    new = [oci.Descriptor(oci.FAMILIES[family][1], d, 1000 + i).to_json() for i, d in enumerate(diff_ids[1:])]
    built = _manifest(family, [base, *new])
    swapped = {1: (oci.Descriptor(oci.OCI_LAYER_ZSTD, "sha256:" + "1" * 64, 400), "zstd-3/libzstd-x/mt"),
               2: (oci.Descriptor(oci.OCI_LAYER_ZSTD, "sha256:" + "2" * 64, 10), "zstd-3/libzstd-x/mt")}
    pushed = oci.compressed_manifest(built, swapped)
    assert pushed != built and b'"dev.sparkimg.uncompressed.size":"1000"' in pushed
    assert oci.built_manifest(pushed, diff_ids) == built
    assert oci.built_manifest(built, diff_ids) is None  # nothing compressed: nothing to give back
    # Any other difference gives other bytes, so the signed digest does not match.
    assert oci.built_manifest(pushed, [diff_ids[0], diff_ids[2], diff_ids[1]]) != built
    assert oci.built_manifest(pushed.replace(b'"1000"', b'"1001"'), diff_ids) != built
    assert oci.built_manifest(pushed.replace(b'"1000"', b'"+1000"'), diff_ids) is None
    assert oci.built_manifest(pushed, diff_ids[:2]) is None
    assert oci.built_manifest(b"not json", diff_ids) is None
