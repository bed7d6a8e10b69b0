"""The archive format without an engine: the layout's index and receipt artifact read back, and
what the reader refuses before anything could reach an engine (links, stray names, a blob that
does not hash to its name, a receipt artifact about another image)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from sparkimg.distribution.archive import _unpack
from sparkimg.errors import FetchError, LoadRefused
from sparkimg.formats import oci
from sparkimg.formats.canonical import sha256_prefixed

MANIFEST = oci.Descriptor(oci.DOCKER_MANIFEST, "sha256:" + "a" * 64, 10)


def test_the_index_names_one_image_and_its_receipt() -> None:
    index = oci.layout_index([oci.LayoutEntry(MANIFEST, "127.0.0.1:5000/x/demo:abc", "sha256:" + "b" * 64)])
    entry = oci.LayoutEntry.parse(index)
    assert (entry.manifest, entry.name, entry.receipt) == (MANIFEST, "127.0.0.1:5000/x/demo:abc", "sha256:" + "b" * 64)
    assert b'"org.opencontainers.image.ref.name":"abc"' in index


def test_an_index_without_a_receipt_or_with_two_images_of_one_platform_is_refused() -> None:
    bare = oci.encode({"schemaVersion": 2, "manifests": [MANIFEST.to_json()]})
    with pytest.raises(FetchError, match="carries no receipt"):
        oci.LayoutEntry.parse(bare)
    entry = oci.LayoutEntry(MANIFEST, "x/y:1", "sha256:" + "b" * 64)
    with pytest.raises(FetchError, match="must give each its own platform"):
        oci.LayoutEntry.parse(oci.layout_index([entry, entry]))
    amd64 = oci.LayoutEntry(MANIFEST, "x/y:1", "sha256:" + "b" * 64, platform="linux/amd64")
    with pytest.raises(FetchError, match="must give each its own platform"):
        oci.LayoutEntry.parse(oci.layout_index([amd64, amd64]))
    with pytest.raises(FetchError, match="1 to 8 images"):
        oci.LayoutEntry.parse(oci.encode({"schemaVersion": 2, "manifests": []}))


def test_an_archive_of_two_platforms_gives_the_one_asked_for() -> None:
    arm64 = oci.Descriptor(oci.DOCKER_MANIFEST, "sha256:" + "c" * 64, 10)
    entries = [oci.LayoutEntry(MANIFEST, "x/y:1", "sha256:" + "b" * 64, platform="linux/amd64"),
               oci.LayoutEntry(arm64, "x/y-arm64:1", "sha256:" + "d" * 64, "sha256:" + "e" * 64, "linux/arm64")]
    index = oci.layout_index(entries)
    assert oci.LayoutEntry.parse_all(index) == entries
    assert oci.LayoutEntry.parse(index, "linux/arm64") == entries[1]
    assert oci.LayoutEntry.parse(index, "linux/amd64") == entries[0]
    with pytest.raises(FetchError, match="no image for linux/riscv64; the archive holds linux/amd64, linux/arm64"):
        oci.LayoutEntry.parse(index, "linux/riscv64")
    manifest = oci.docker_archive_manifest([("sha256:" + "1" * 64, ["x/y:1"], ["sha256:" + "2" * 64]),
                                            ("sha256:" + "3" * 64, [], ["sha256:" + "2" * 64])])
    assert oci.docker_archive_layers(manifest) == [
        (oci.blob_path("sha256:" + "1" * 64), ["x/y:1"], [oci.blob_path("sha256:" + "2" * 64)]),
        (oci.blob_path("sha256:" + "3" * 64), [], [oci.blob_path("sha256:" + "2" * 64)])]


def test_the_receipt_artifact_must_be_about_the_archives_manifest() -> None:
    artifact = oci.receipt_artifact(MANIFEST, b"envelope")
    assert oci.receipt_layer(artifact, MANIFEST.digest).digest == sha256_prefixed(b"envelope")
    with pytest.raises(FetchError, match="subject"):
        oci.receipt_layer(artifact, "sha256:" + "c" * 64)


def _tar(path: Path, members: list[tarfile.TarInfo], data: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as archive:
        for info in members:
            content = data.get(info.name)
            if content is not None:
                info.size = len(content)
            archive.addfile(info, io.BytesIO(content) if content is not None else None)
    return path


def _file(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


def test_unpacking_checks_every_blob_and_refuses_what_is_not_a_layout(tmp_path: Path) -> None:
    blob = b"layer"
    good = {"oci-layout": oci.OCI_LAYOUT, "index.json": b"{}", "manifest.json": b"[]",
            oci.blob_path(sha256_prefixed(blob)): blob}
    work = tmp_path / "w1"
    work.mkdir()
    found = _unpack(_tar(tmp_path / "good.tar", [_file(n) for n in good], good), work)
    assert found[sha256_prefixed(blob)].read_bytes() == blob

    bad = {**good, oci.blob_path(sha256_prefixed(blob)): b"other"}
    work = tmp_path / "w2"
    work.mkdir()
    with pytest.raises(LoadRefused, match="does not hash to its name"):
        _unpack(_tar(tmp_path / "bad.tar", [_file(n) for n in bad], bad), work)

    link = tarfile.TarInfo("index.json")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    work = tmp_path / "w3"
    work.mkdir()
    with pytest.raises(LoadRefused, match="unexpected member"):
        _unpack(_tar(tmp_path / "link.tar", [link], {}), work)
    work = tmp_path / "w4"
    work.mkdir()
    stray = {**good, "../escape": b"x"}
    with pytest.raises(LoadRefused, match="unexpected member"):
        _unpack(_tar(tmp_path / "stray.tar", [_file(n) for n in stray], stray), work)
    assert not (tmp_path / "escape").exists()


def test_a_sparse_member_or_one_larger_than_the_file_is_refused_before_it_is_written(tmp_path: Path) -> None:
    """A sparse member extracts as zeros from a few bytes of holes (a 10 KiB file could fill the
    store's disk), and no member of a plain tar is larger than the file holding it."""
    sparse = tmp_path / "sparse.tar"
    with tarfile.open(sparse, "w", format=tarfile.PAX_FORMAT) as out:
        info = tarfile.TarInfo(oci.blob_path("sha256:" + "0" * 64))
        info.pax_headers = {"GNU.sparse.size": str(1 << 40), "GNU.sparse.map": "0,0", "GNU.sparse.realsize":
                            str(1 << 40)}
        out.addfile(info, io.BytesIO(b""))
    work = tmp_path / "w"
    work.mkdir()
    with pytest.raises(LoadRefused, match=r"sparse|more than the file"):
        _unpack(sparse, work)
    assert not list(work.iterdir())

    big = tmp_path / "big.tar"
    with tarfile.open(big, "w") as out:
        out.addfile(tarfile.TarInfo("oci-layout"), io.BytesIO(b""))
    data = bytearray(big.read_bytes())
    header = tarfile.TarInfo("oci-layout")
    header.size = 1 << 32
    data[:512] = header.tobuf(format=tarfile.USTAR_FORMAT)[:512]
    big.write_bytes(bytes(data))
    with pytest.raises(LoadRefused, match="more than the file"):
        _unpack(big, work)


def test_an_unreadable_archive_is_a_refusal_not_a_traceback(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    for name, data in (("empty.tar", b""), ("junk.tar", b"\x00\x01" * 700), ("text.tar", b"[" * 20000)):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(LoadRefused):
            _unpack(tmp_path / name, work)
