"""Layer readings kept in the store by layer digest: read once, from the store's blob or (a
base layer) from the registry stream, never kept when the stream is not the digest's bytes."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from sparkimg.errors import FetchError
from sparkimg.formats.lockfile import BasePin
from sparkimg.sbom import layers
from sparkimg.sbom.contents import read
from sparkimg.store.content import Store
from tests.formats import lock_file


def _tar(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _base(repository: str) -> BasePin:
    return replace(lock_file().base, repository=repository)


SITE = "usr/lib/python3/dist-packages"
META = b"Metadata-Version: 2.1\nName: six\nVersion: 1.16.0\n"


def test_a_store_layer_is_read_once_and_then_from_its_record(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    digest = "sha256:" + store.put_bytes(_tar({f"{SITE}/six-1.16.0.dist-info/METADATA": META}))
    first = layers.readings([digest], store, base=_base("unused"), base_sizes={})
    store.blob(digest.split(":")[1]).unlink()  # gone: only the kept reading can answer now
    again = layers.readings([digest], store, base=_base("unused"), base_sizes={})
    assert again == first and [d.name for d in read(again).python] == ["six"]


def test_a_base_layer_streams_from_the_registry_and_a_wrong_stream_keeps_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkimg._internal.net import registry

    store = Store(tmp_path / "store")
    blob = gzip.compress(_tar({f"{SITE}/six-1.16.0.dist-info/METADATA": META}), mtime=0)
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    served = {"bytes": blob}

    def stream(_client: object, _ref: object, wanted: str, _size: int) -> object:
        data = served["bytes"]
        for at in range(0, len(data), 7):  # small chunks: the reader joins them
            yield data[at:at + 7]
        if "sha256:" + hashlib.sha256(data).hexdigest() != wanted:
            from sparkimg.errors import ResolveError

            raise ResolveError(f"blob {wanted} does not match its digest")

    monkeypatch.setattr(registry, "client_stream", stream)
    served["bytes"] = gzip.compress(_tar({f"{SITE}/evil-1.dist-info/METADATA": META.replace(b"six", b"evil")}))
    with pytest.raises(FetchError, match="does not match"):
        layers.readings([digest], store, base=_base("127.0.0.1:5000/base"), base_sizes={digest: len(blob)})
    assert store.read_record(layers.READINGS, digest.split(":")[1]) is None  # nothing of the wrong bytes kept
    served["bytes"] = blob
    found = layers.readings([digest], store, base=_base("127.0.0.1:5000/base"), base_sizes={digest: len(blob)})
    assert [d.name for d in read(found).python] == ["six"] and not store.has(digest.split(":")[1])


def test_a_layer_neither_in_the_store_nor_the_base_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="build the spec again"):
        layers.readings(["sha256:" + "a" * 64], Store(tmp_path / "s"), base=_base("x"), base_sizes={})
