"""Deterministic layers and OCI documents: the bytes are a function of the content alone."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkimg.errors import BuildError, FetchError
from sparkimg.formats import oci
from sparkimg.formats.canonical import sha256_prefixed
from sparkimg.image import layer as layer_mod
from sparkimg.image.load import chain_ids
from sparkimg.store.content import Store
from tests.support import folder_entries

EPOCH = 1700000000


def _tree(root: Path, files: dict[str, bytes], *, mtime: int, mode: int = 0o644) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
        os.utime(path, (mtime, mtime))
    return root


def _layer(root: Path, store: Store) -> oci.Layer:
    return layer_mod.write_layer(folder_entries(root) + layer_mod.whiteouts(["/usr/old.py"]), epoch=EPOCH,
                                 media_type=oci.OCI_LAYER, created_by="test", store=store)


def test_same_content_gives_the_same_bytes_whatever_the_times_modes_and_owners(tmp_path: Path) -> None:
    files = {"usr/lib/a.py": b"a", "usr/lib/pkg/b.py": b"b" * 5000, "usr/bin/tool": b"#!/bin/sh\n"}
    one = _tree(tmp_path / "one", files, mtime=1, mode=0o600)
    two = _tree(tmp_path / "two", dict(reversed(files.items())), mtime=2_000_000_000, mode=0o664)
    (one / "usr/bin/tool").chmod(0o700)
    (two / "usr/bin/tool").chmod(0o755)
    first = _layer(one, Store(tmp_path / "s1"))
    second = _layer(two, Store(tmp_path / "s2"))
    assert first == second
    blob = Store(tmp_path / "s1").blob(first.descriptor.digest.split(":")[1])
    data = blob.read_bytes()
    # Stored uncompressed: the blob is the tar, its digest the diff_id, its size the tar's.
    assert "sha256:" + hashlib.sha256(data).hexdigest() == first.diff_id == first.descriptor.digest
    assert first.descriptor.size == len(data) and first.descriptor.media_type == oci.OCI_LAYER
    with tarfile.open(blob) as archive:
        members = archive.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(EPOCH, 0, 0, "", "")}
    modes = {m.name: m.mode for m in members}
    assert modes["usr/bin/tool"] == 0o755 and modes["usr/lib/a.py"] == 0o644 and modes["usr/lib"] == 0o755
    assert modes["usr/.wh.old.py"] == 0o644
    assert not any(m.pax_headers for m in members)


def test_a_layer_is_hashed_as_written_and_nothing_is_left_in_the_store_tmp(tmp_path: Path) -> None:
    root = _tree(tmp_path / "root", {"a": b"x" * (3 << 20)}, mtime=1)  # bigger than one copy piece
    store = Store(tmp_path / "store")
    first = _layer(root, store)
    assert store.verify(first.descriptor.digest.split(":")[1])
    assert list((store.root / "tmp").iterdir()) == []
    assert _layer(root, store) == first


def test_an_error_while_writing_a_layer_admits_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    gone = tmp_path / "gone"
    entries = [layer_mod.Entry("a", "file", data=b"1"), layer_mod.Entry("b", "file", source=gone)]
    with pytest.raises(FileNotFoundError):
        layer_mod.write_layer(entries, epoch=EPOCH, media_type=oci.OCI_LAYER, created_by="t", store=store)
    assert list((store.root / "blobs" / "sha256").iterdir()) == []
    assert list((store.root / "tmp").iterdir()) == []


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.mark.parametrize("size", [5, (layer_mod._AHEAD_BYTES + (3 << 20)) // 7 * 7])  # read in turn, read ahead
def test_a_zip_member_is_inflated_straight_into_the_tar(tmp_path: Path, size: int) -> None:
    data = (b"cuBLAS!" * (size // 7 + 1))[:size]
    wheel = _zip(tmp_path / "w.whl", {"lib/big.so": data})
    member = layer_mod.ZipMember(wheel, "lib/big.so", size, hashlib.sha256(data).hexdigest())
    store = Store(tmp_path / "store")
    from_zip = layer_mod.write_layer([layer_mod.Entry("usr/lib/big.so", "file", 0o755, member=member)],
                                     epoch=EPOCH, media_type=oci.OCI_LAYER, created_by="t", store=store)
    (tmp_path / "big.so").write_bytes(data)
    from_file = layer_mod.write_layer([layer_mod.Entry("usr/lib/big.so", "file", 0o755, source=tmp_path / "big.so")],
                                      epoch=EPOCH, media_type=oci.OCI_LAYER, created_by="t", store=store)
    assert from_zip == from_file


@pytest.mark.parametrize("size", [5, layer_mod._AHEAD_BYTES + 1])
@pytest.mark.parametrize("lie", ["sha256", "size"])
def test_a_member_that_is_not_what_its_record_says_admits_nothing(tmp_path: Path, size: int, lie: str) -> None:
    """A wheel's RECORD is trusted for the hash the installed RECORD gives; the writer checks it."""
    data = os.urandom(size)
    wheel = _zip(tmp_path / "pkg-1.0-py3-none-any.whl", {"pkg/mod.so": data})
    said = hashlib.sha256(b"not these bytes").hexdigest() if lie == "sha256" else hashlib.sha256(data).hexdigest()
    member = layer_mod.ZipMember(wheel, "pkg/mod.so", size + (lie == "size"), said)
    store = Store(tmp_path / "store")
    with pytest.raises(BuildError) as raised:
        layer_mod.write_layer([layer_mod.Entry("a", "file", data=b"1"), layer_mod.Entry("pkg/mod.so", "file",
                                                                                        member=member)],
                              epoch=EPOCH, media_type=oci.OCI_LAYER, created_by="t", store=store)
    said_text = "holds" if lie == "sha256" else f"ends after {size} bytes"
    assert f"pkg-1.0-py3-none-any.whl: pkg/mod.so: {said_text}" in raised.value.message
    assert list((store.root / "blobs" / "sha256").iterdir()) == []
    assert list((store.root / "tmp").iterdir()) == []


def test_a_damaged_member_is_a_build_error_naming_it(tmp_path: Path) -> None:
    data = os.urandom(layer_mod._AHEAD_BYTES + 1)
    wheel = _zip(tmp_path / "pkg-1.0-py3-none-any.whl", {"pkg/mod.so": data})
    raw = bytearray(wheel.read_bytes())
    middle = len(raw) // 2
    raw[middle:middle + 64] = bytes(64)  # the deflate stream (or its CRC) no longer holds
    wheel.write_bytes(bytes(raw))
    member = layer_mod.ZipMember(wheel, "pkg/mod.so", len(data), hashlib.sha256(data).hexdigest())
    store = Store(tmp_path / "store")
    with pytest.raises(BuildError, match=re.escape("pkg-1.0-py3-none-any.whl: pkg/mod.so")):
        layer_mod.write_layer([layer_mod.Entry("pkg/mod.so", "file", member=member)], epoch=EPOCH,
                              media_type=oci.OCI_LAYER, created_by="t", store=store)
    assert list((store.root / "blobs" / "sha256").iterdir()) == []


@pytest.mark.parametrize("path", ["/abs", "a/../b", "", "a//b", "./a"])
def test_an_entry_path_must_be_clean_and_relative(path: str) -> None:
    with pytest.raises(BuildError):
        layer_mod.Entry(path, "file", data=b"")


def test_an_entry_written_twice_is_refused(tmp_path: Path) -> None:
    entries = [layer_mod.Entry("a", "file", data=b"1"), layer_mod.Entry("a", "file", data=b"2")]
    with pytest.raises(BuildError, match="twice"):
        layer_mod.write_tar(entries, EPOCH, tmp_path / "t.tar")


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z]{1,8}(/[a-z]{1,8}){0,2}", fullmatch=True), st.binary(max_size=64),
                       min_size=1, max_size=8))
def test_any_entry_order_gives_one_tar(tmp_path_factory: pytest.TempPathFactory, files: dict[str, bytes]) -> None:
    folder = tmp_path_factory.mktemp("order")
    names = sorted(files)
    # A name that is also a folder of another cannot be both; keep the files only.
    names = [n for n in names if not any(o.startswith(n + "/") for o in names)]
    entries = [layer_mod.Entry(n, "file", data=files[n]) for n in names]
    one = layer_mod.write_tar(entries, EPOCH, folder / "a.tar")
    two = layer_mod.write_tar(list(reversed(entries)), EPOCH, folder / "b.tar")
    assert one == two and (folder / "a.tar").read_bytes() == (folder / "b.tar").read_bytes()


def test_chain_ids_follow_the_oci_definition() -> None:
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    chains = chain_ids([a, b])
    assert chains[0] == a
    assert chains[1] == "sha256:" + hashlib.sha256(f"{a} {b}".encode()).hexdigest()


def _base(media_type: str = oci.DOCKER_MANIFEST) -> oci.BaseImage:
    config = oci.encode({"architecture": "amd64", "os": "linux", "container": "abc", "docker_version": "20.10",
                         "config": {"Env": ["PATH=/usr/bin", "LANG=C"], "Image": "sha256:x", "Labels": {"a": "1"}},
                         "history": [{"created": "2020-01-01T00:00:00Z", "created_by": "import"}],
                         "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "d" * 64]}})
    manifest = oci.encode({"schemaVersion": 2, "mediaType": media_type,
                           "config": {"mediaType": oci.DOCKER_CONFIG, "digest": sha256_prefixed(config),
                                      "size": len(config)},
                           "layers": [{"mediaType": oci.DOCKER_LAYER, "digest": "sha256:" + "e" * 64, "size": 9}]})
    return oci.BaseImage(manifest, config)


def test_the_config_keeps_the_base_adds_env_labels_and_history_at_the_epoch() -> None:
    new = oci.Layer(oci.Descriptor(oci.DOCKER_LAYER, "sha256:" + "f" * 64, 5), "sha256:" + "9" * 64, "sparkimg: x")
    config = json.loads(oci.config(_base(), env={"LANG": "C.UTF-8", "NEW": "1"}, labels={"b": "2"}, epoch=EPOCH,
                                   layers=[new]))
    assert config["config"]["Env"] == ["PATH=/usr/bin", "LANG=C.UTF-8", "NEW=1"]
    assert config["config"]["Labels"] == {"a": "1", "b": "2"}
    assert "Image" not in config["config"] and "container" not in config and "docker_version" not in config
    assert config["created"] == "2023-11-14T22:13:20Z"
    assert config["history"][-1] == {"created": "2023-11-14T22:13:20Z", "created_by": "sparkimg: x",
                                     "comment": "sparkimg"}
    assert config["rootfs"]["diff_ids"] == ["sha256:" + "d" * 64, "sha256:" + "9" * 64]


def test_the_manifest_keeps_the_base_family_and_its_layer_descriptors_verbatim() -> None:
    base = _base()
    new = oci.Layer(oci.Descriptor(oci.layer_media_type(base), "sha256:" + "f" * 64, 5), "sha256:" + "9" * 64, "x")
    config = oci.config(base, env={}, labels={}, epoch=EPOCH, layers=[new])
    manifest = json.loads(oci.manifest(base, config, [new]))
    assert manifest["mediaType"] == oci.DOCKER_MANIFEST and manifest["config"]["mediaType"] == oci.DOCKER_CONFIG
    assert manifest["layers"][0] == base.manifest_json["layers"][0]
    assert manifest["layers"][1]["mediaType"] == oci.DOCKER_LAYER
    assert manifest["config"]["digest"] == sha256_prefixed(config)
    assert oci.manifest(base, config, [new]) == oci.manifest(base, config, [new])


def test_an_index_or_odd_base_manifest_is_a_clear_error() -> None:
    with pytest.raises(FetchError, match="unsupported media type"):
        _ = _base("application/vnd.oci.image.index.v1+json").media_type
    with pytest.raises(FetchError, match="not JSON"):
        _ = oci.BaseImage(b"{", b"{}").manifest_json


def test_the_image_record_round_trips() -> None:
    new = oci.Layer(oci.Descriptor(oci.OCI_LAYER, "sha256:" + "f" * 64, 5), "sha256:" + "9" * 64, "x")
    record = oci.ImageRecord("sha256:" + "1" * 64, "sha256:" + "2" * 64, oci.OCI_MANIFEST, "sha256:" + "3" * 64,
                             (new,), layer_mod.COMPRESSOR, layer_mod.TAR_FORMAT)
    assert oci.ImageRecord.from_json(record.to_json(), "r") == record
    with pytest.raises(FetchError):
        oci.ImageRecord.from_json({**record.to_json(), "layers": [{"digest": "x"}]}, "r")


def test_spec_env_expands_variables_as_a_dockerfile_env_did() -> None:
    config = json.loads(oci.config(_base(), env={"PATH": "/opt/bin:$PATH", "A": "${LANG}-${NONE:-x}",
                                                 "B": "$A \\$A ${A:+set}"}, labels={}, epoch=EPOCH, layers=[]))
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    assert env["PATH"] == "/opt/bin:/usr/bin"  # replaced in place, from the base's value
    assert env["A"] == "C-x" and env["B"] == "C-x $A set"  # in name order: A before B
    assert oci.expand("$1 and $", {}) == "$1 and $"


def test_a_large_wheel_gets_a_layer_of_its_own_and_small_ones_share_one() -> None:
    from sparkimg.image.assemble import SPLIT_BYTES, wheel_groups

    big, small = SPLIT_BYTES + 1, SPLIT_BYTES
    assert wheel_groups([("a.whl", "1", small), ("b.whl", "2", big), ("c.whl", "3", 10), ("d.whl", "4", big)]) == [
        [("a.whl", "1"), ("c.whl", "3")], [("b.whl", "2")], [("d.whl", "4")]]
    assert wheel_groups([("b.whl", "2", big)]) == [[("b.whl", "2")]]
    assert wheel_groups([("a.whl", "1", 5), ("c.whl", "3", 6)]) == [[("a.whl", "1"), ("c.whl", "3")]]
    assert wheel_groups([]) == [[]]


@pytest.mark.parametrize("size", [40, layer_mod._AHEAD_BYTES + 1])  # read in turn, read ahead
def test_each_files_first_bytes_are_seen_as_it_is_written_with_no_second_read(tmp_path: Path, size: int) -> None:
    aarch64 = (b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x03\x00\xb7\x00" + bytes(size))[:size]
    wheel = _zip(tmp_path / "w.whl", {"lib/a.so": aarch64})
    (tmp_path / "x.so").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x03\x00\x3e\x00")
    seen: dict[str, bytes] = {}
    layer_mod.write_layer([
        layer_mod.Entry("usr/a.so", "file", member=layer_mod.ZipMember(wheel, "lib/a.so", size,
                                                                          hashlib.sha256(aarch64).hexdigest())),
        layer_mod.Entry("usr/x.so", "file", source=tmp_path / "x.so"),
        layer_mod.Entry("usr/t.txt", "file", data=b"text"),
        layer_mod.Entry("usr/empty", "file", data=b""),
        layer_mod.Entry("usr", "dir", 0o755),
    ], epoch=EPOCH, media_type=oci.OCI_LAYER, created_by="t", store=Store(tmp_path / "store"),
        seen=lambda path, head: seen.__setitem__(path, head))
    assert seen == {"usr/a.so": aarch64[:20], "usr/x.so": (tmp_path / "x.so").read_bytes()[:20],
                    "usr/t.txt": b"text", "usr/empty": b""}


def test_a_layer_records_its_census_and_a_record_without_one_is_no_record() -> None:
    layer = oci.Layer(oci.Descriptor(oci.OCI_LAYER, "sha256:" + "f" * 64, 5), "sha256:" + "9" * 64, "x",
                      (("aarch64", 2), ("cuda", 1)))
    assert layer.to_json()["elfMachines"] == {"aarch64": 2, "cuda": 1}
    assert oci.Layer.from_json(layer.to_json(), "r") == layer
    older = {k: v for k, v in layer.to_json().items() if k != "elfMachines"}
    assert oci.Layer.from_json(older, "r").machines is None  # assembly writes it again, audited
    with pytest.raises(FetchError, match="elfMachines: must map a machine to a count"):
        oci.Layer.from_json({**layer.to_json(), "elfMachines": {"aarch64": "two"}}, "r")
