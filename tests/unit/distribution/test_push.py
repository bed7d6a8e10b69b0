"""The push client's logic without a registry: targets, chunking, the upload conversation."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from sparkimg._internal.net.registry import ImageRef
from sparkimg.distribution import push as push_mod
from sparkimg.errors import UsageError
from sparkimg.events import silent


@pytest.mark.parametrize("text", ["127.0.0.1:5000/a:tag", "127.0.0.1:5000/a@sha256:" + "1" * 64, "justrepo"])
def test_a_target_is_a_registry_and_repository_only(text: str) -> None:
    with pytest.raises(UsageError, match="REGISTRY/REPO"):
        push_mod.target_of(text)


def test_chunks_are_cut_and_joined_to_the_upload_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(push_mod, "UPLOAD_CHUNK", 4)
    assert list(push_mod._sized([b"ab", b"cdefg", b"", b"hij"])) == [b"abcd", b"efgh", b"ij"]


class _Answer:
    def __init__(self, status: int, location: str | None = None) -> None:
        self.status_code = status
        self.headers = {"Location": location} if location else {}


class _Registry:
    """Records the conversation; the upload location moves on with each chunk, as Distribution's does."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, str], bytes | None]] = []

    def send(self, method: str, ref: ImageRef, url: str, *, headers: dict[str, str] | None = None,
             data: bytes | None = None, **_: Any) -> _Answer:
        self.calls.append((method, url, dict(headers or {}), data))
        if method == "HEAD":
            return _Answer(404)
        if method in ("POST", "PATCH"):
            return _Answer(202, f"/v2/repo/blobs/uploads/u{len(self.calls)}?state=x")
        return _Answer(201)


def test_a_blob_is_uploaded_in_ranged_chunks_then_put_by_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(push_mod, "UPLOAD_CHUNK", 4)
    data = b"0123456789"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    registry = _Registry()
    to = ImageRef.parse("127.0.0.1:5000/repo")
    done = push_mod._blob(registry, to, digest, len(data), silent, chunks=lambda: iter([data]))  # type: ignore[arg-type]
    assert (done.how, done.sent) == ("uploaded", 10)
    methods = [c[0] for c in registry.calls]
    assert methods == ["HEAD", "POST", "PATCH", "PATCH", "PATCH", "PUT"]
    ranges = [c[2]["Content-Range"] for c in registry.calls if c[0] == "PATCH"]
    assert ranges == ["0-3", "4-7", "8-9"]
    put = registry.calls[-1][1]
    assert put == f"http://127.0.0.1:5000/v2/repo/blobs/uploads/u5?state=x&digest={digest}"


def test_a_short_read_is_refused_before_the_digest_is_put() -> None:
    registry = _Registry()
    to = ImageRef.parse("127.0.0.1:5000/repo")
    with pytest.raises(Exception, match="3 bytes read, the manifest says 4"):
        push_mod._blob(registry, to, "sha256:" + "0" * 64, 4, silent, chunks=lambda: iter([b"abc"]))  # type: ignore[arg-type]
    assert registry.calls[-1][0] == "PATCH"
