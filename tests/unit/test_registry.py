"""The registry client against a loopback HTTP server that demands bearer tokens,
as Docker Hub and NGC do (a stand-in server: the real registry has no token service)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sparkimg._registry import RegistryClient
from sparkimg.errors import ResolveError


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


CONFIGS = {arch: json.dumps({"os": "linux", "architecture": arch}).encode() for arch in ("arm64", "amd64")}
MANIFESTS = {
    arch: json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                      "config": {"digest": _digest(config), "size": len(config)}, "layers": []}).encode()
    for arch, config in CONFIGS.items()
}
INDEX = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
    {"digest": _digest(m), "platform": {"os": "linux", "architecture": a}} for a, m in MANIFESTS.items()]}).encode()


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def do_GET(self) -> None:
            host = self.headers["Host"]
            seen.append(self.path)
            if self.path.startswith("/token"):
                assert "scope=repository%3Avllm%2Fnightly%3Apull" in self.path
                return self._send(200, json.dumps({"token": "t0k"}).encode(), "application/json")
            if self.headers.get("Authorization") != "Bearer t0k":
                self.send_response(401)
                self.send_header("WWW-Authenticate", f'Bearer realm="http://{host}/token",service="test"')
                self.end_headers()
                return None
            blobs = {**{_digest(c): c for c in CONFIGS.values()}}
            manifests = {"gb10": INDEX, **{_digest(m): m for m in MANIFESTS.values()}}
            name = self.path.rsplit("/", 1)[-1]
            if "/manifests/" in self.path and name in manifests:
                body = manifests[name]
                media = json.loads(body)["mediaType"]
                return self._send(200, body, media, digest=_digest(body))
            if "/blobs/" in self.path and name in blobs:
                return self._send(200, blobs[name], "application/octet-stream")
            return self._send(404, b"{}", "application/json")

        def _send(self, code: int, body: bytes, media: str, digest: str | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", media)
            if digest:
                self.send_header("Docker-Content-Digest", digest)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()


def test_token_auth_and_platform_pick(server: tuple[str, list[str]]) -> None:
    host, seen = server
    resolved = RegistryClient().resolve(f"{host}/vllm/nightly", "gb10", "linux/arm64")
    assert resolved.index_digest == _digest(INDEX)
    assert resolved.manifest_digest == _digest(MANIFESTS["arm64"])
    assert resolved.config_digest == _digest(CONFIGS["arm64"])
    assert any(p.startswith("/token") for p in seen)


def test_missing_platform_is_named(server: tuple[str, list[str]]) -> None:
    host, _ = server
    with pytest.raises(ResolveError) as info:
        RegistryClient().resolve(f"{host}/vllm/nightly", "gb10", "linux/s390x")
    assert "offers linux/amd64, linux/arm64" in info.value.message


def test_unknown_tag_is_404(server: tuple[str, list[str]]) -> None:
    host, _ = server
    with pytest.raises(ResolveError) as info:
        RegistryClient().resolve(f"{host}/vllm/nightly", "nope", "linux/arm64")
    assert "404" in info.value.message
