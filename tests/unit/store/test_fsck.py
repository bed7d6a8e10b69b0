"""Rot in the store: a flipped bit or a cut tail in a blob is found by ``store verify`` and removed
by ``--repair``; a blob read for anything that leaves the store (an archive, an upload, a layer
written from it) raises ``DamagedBlobError`` naming it, and a sound blob passes through whole."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from sparkimg._internal.fs.verified import VerifiedReader, damaged
from sparkimg.errors import DamagedBlobError
from sparkimg.image.layer import Entry, tar_into
from sparkimg.store.content import Store
from sparkimg.store.fsck import verify_store
from tests.support import rot


def _store(tmp_path: Path) -> tuple[Store, list[str]]:
    store = Store(tmp_path / "store")
    return store, [store.put_bytes(os.urandom(3 << 20 if n == 0 else 4096 + n)) for n in range(5)]


@pytest.mark.parametrize("how", ["flip", "cut"])
def test_a_reader_of_a_damaged_blob_raises_at_its_end_naming_it(tmp_path: Path, how: str) -> None:
    store, blobs = _store(tmp_path)
    with store.reader(blobs[1], "push") as sound:
        assert sound.read(1 << 30) == store.blob(blobs[1]).read_bytes()
    rot(store.blob(blobs[0]), how)
    with store.reader(blobs[0], "push: blob X") as reader, \
            pytest.raises(DamagedBlobError, match=f"push: blob X: the store's blob sha256:{blobs[0]} is damaged"):
        while reader.read(1 << 20):
            pass
    # tarfile reads exactly the size it was given, never the EOF: the check runs at the last byte.
    with VerifiedReader(store.blob(blobs[0]), blobs[0], "tar") as reader, pytest.raises(DamagedBlobError):
        info = tarfile.TarInfo("x")
        info.size = store.blob(blobs[0]).stat().st_size
        with tarfile.open(fileobj=io.BytesIO(), mode="w") as out:
            out.addfile(info, reader)


def test_a_layer_written_from_a_damaged_blob_fails_and_a_sound_one_is_written(tmp_path: Path) -> None:
    store, blobs = _store(tmp_path)
    sink = io.BytesIO()
    tar_into([Entry("etc/patch", "file", source=store.blob(blobs[2]), sha256=blobs[2])], 0, sink)
    with tarfile.open(fileobj=io.BytesIO(sink.getvalue())) as done:
        member = done.extractfile("etc/patch")
        assert member is not None and member.read() == store.blob(blobs[2]).read_bytes()
    rot(store.blob(blobs[2]), "flip")
    with pytest.raises(DamagedBlobError, match=blobs[2]):
        tar_into([Entry("etc/patch", "file", source=store.blob(blobs[2]), sha256=blobs[2])], 0, io.BytesIO())


def test_store_verify_finds_each_damaged_blob_and_repair_removes_only_those(tmp_path: Path) -> None:
    store, blobs = _store(tmp_path)
    assert verify_store(store).ok
    rot(store.blob(blobs[0]), "flip")
    rot(store.blob(blobs[3]), "cut")
    found = verify_store(store, workers=2)
    assert not found.ok and found.exit_code == 1 and found.blobs == 5
    assert sorted(d.sha256 for d in found.damaged) == sorted([blobs[0], blobs[3]])
    assert all(d.found and d.found != d.sha256 for d in found.damaged)
    assert damaged({f"sha256:{b}": store.blob(b) for b in blobs}) == [f"sha256:{blobs[0]}", f"sha256:{blobs[3]}"]
    repaired = verify_store(store, repair=True)
    assert repaired.repaired and repaired.exit_code == 0
    assert [store.has(b) for b in blobs] == [False, True, True, False, True]
    assert verify_store(store).ok and verify_store(store).blobs == 3
    # What --repair took is gone with its work folder: nothing is left in tmp/ but leases the sweep takes.
    assert not [p for p in (store.root / "tmp").rglob("*") if p.is_file() and p.name in (blobs[0], blobs[3])]
