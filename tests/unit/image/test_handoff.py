"""The one-shot loopback registry the daemon pulls a build from: it answers the registry API for
one random repository and one image, refuses everything else, counts what it served and is gone
when the block ends. (The real daemon's pull of it is in tests/integration/test_demo_build.py.)"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkimg.image import handoff

MANIFEST = b'{"schemaVersion":2}'
MANIFEST_DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()
CONFIG, LAYER = b'{"config":{}}', b"layer bytes " * 1000
CONFIG_DIGEST = "sha256:" + hashlib.sha256(CONFIG).hexdigest()
LAYER_DIGEST = "sha256:" + hashlib.sha256(LAYER).hexdigest()


def _registry(tmp_path: Path) -> contextlib.AbstractContextManager[tuple[str, handoff.Served]]:
    (tmp_path / "config").write_bytes(CONFIG)
    (tmp_path / "layer").write_bytes(LAYER)
    blobs = {CONFIG_DIGEST: tmp_path / "config", LAYER_DIGEST: tmp_path / "layer"}
    return handoff.registry(MANIFEST, MANIFEST_DIGEST, "application/vnd.oci.image.manifest.v1+json", CONFIG_DIGEST,
                            blobs)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, handoff.Served]]:
    with _registry(tmp_path) as got:
        yield got


def _ask(reference: str, method: str, path: str, headers: dict[str, str] | None = None
         ) -> tuple[int, dict[str, str], bytes]:
    host, _, _ = reference.partition("/")
    connection = http.client.HTTPConnection(host, timeout=10)
    try:
        connection.request(method, path, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def _repository(reference: str) -> str:
    return reference.partition("/")[2].partition("@")[0]


def test_the_reference_names_loopback_a_random_repository_and_the_manifest_digest(
        served: tuple[str, handoff.Served]) -> None:
    reference, tally = served
    host, _, rest = reference.partition("/")
    assert host.startswith("127.0.0.1:") and rest == f"{tally.name}@{MANIFEST_DIGEST}"
    assert tally.name.startswith("sparkimg-handoff/") and len(tally.name.split("/")[1]) == 32


def test_it_answers_the_registry_api_for_its_image(tmp_path: Path) -> None:
    with _registry(tmp_path) as (reference, tally):
        _pull(reference)
    # Counted once the block ends: the config is not a layer; the whole and the resumed layer are two sends.
    assert tally.layers_sent == 2 and tally.bytes_sent == len(CONFIG) + len(LAYER) + len(LAYER) - 100


def _pull(reference: str) -> None:
    name = _repository(reference)
    status, headers, _ = _ask(reference, "GET", "/v2/")
    assert status == 200 and headers["docker-distribution-api-version"] == "registry/2.0"
    status, headers, body = _ask(reference, "GET", f"/v2/{name}/manifests/{MANIFEST_DIGEST}")
    assert (status, body, headers["docker-content-digest"]) == (200, MANIFEST, MANIFEST_DIGEST)
    assert headers["content-type"] == "application/vnd.oci.image.manifest.v1+json"
    status, headers, body = _ask(reference, "HEAD", f"/v2/{name}/blobs/{LAYER_DIGEST}")
    assert status == 200 and body == b"" and headers["content-length"] == str(len(LAYER))
    assert _ask(reference, "GET", f"/v2/{name}/blobs/{CONFIG_DIGEST}")[2] == CONFIG
    assert _ask(reference, "GET", f"/v2/{name}/blobs/{LAYER_DIGEST}")[2] == LAYER
    # A resumed download gets the rest of the blob.
    status, headers, body = _ask(reference, "GET", f"/v2/{name}/blobs/{LAYER_DIGEST}", {"Range": "bytes=100-"})
    assert (status, body) == (206, LAYER[100:])
    assert headers["content-range"] == f"bytes 100-{len(LAYER) - 1}/{len(LAYER)}"


@pytest.mark.parametrize("path", ["/v2/other/repo/manifests/{manifest}", "/v2/{name}/manifests/latest",
                                  "/v2/{name}/blobs/sha256:" + "0" * 64, "/v2/{name}/blobs/../../etc/passwd",
                                  "/v2/{name}/tags/list", "/v2/_catalog", "/"])
def test_every_other_path_is_unknown(served: tuple[str, handoff.Served], path: str) -> None:
    reference, tally = served
    status, _, body = _ask(reference, "GET", path.format(name=_repository(reference), manifest=MANIFEST_DIGEST))
    assert status == 404 and json.loads(body)["errors"][0]["code"].endswith("_UNKNOWN")
    assert tally.layers_sent == 0


def test_it_takes_no_writes(served: tuple[str, handoff.Served]) -> None:
    reference, _ = served
    assert _ask(reference, "PUT", f"/v2/{_repository(reference)}/manifests/latest")[0] == 405


@pytest.mark.parametrize("sent", [b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"GARBAGE\r\n\r\n",
                                  b"GET /v2/ HTTP/1.1\r\n" + b"X: y\r\n" * 100 + b"\r\n"])
def test_a_tls_hello_or_a_malformed_request_gets_a_400(served: tuple[str, handoff.Served], sent: bytes) -> None:
    """Docker tries HTTPS first: its ClientHello must fail at once so it falls back to plain HTTP."""
    host, _, _ = served[0].partition("/")
    address, port = host.split(":")
    with socket.create_connection((address, int(port)), timeout=10) as connection:
        connection.sendall(sent)
        answer = b""
        while chunk := connection.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ")


def test_the_port_is_closed_when_the_block_ends(tmp_path: Path) -> None:
    with handoff.registry(MANIFEST, MANIFEST_DIGEST, "x", CONFIG_DIGEST, {}) as (reference, _):
        host, _, _ = reference.partition("/")
        assert _ask(reference, "GET", "/v2/")[0] == 200
    address, port = host.split(":")
    with pytest.raises(OSError):
        socket.create_connection((address, int(port)), timeout=2).close()
