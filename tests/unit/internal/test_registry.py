"""The registry client against a loopback HTTP server that demands bearer tokens,
as Docker Hub and NGC do (a stand-in server: the real registry has no token service)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sparkimg._internal.net.registry import RegistryClient
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


def _helper(folder: Path, name: str, server: str, answer: str) -> None:
    """A docker credential helper that knows one server (a fake of the documented protocol)."""
    folder.mkdir(exist_ok=True)
    script = folder / f"docker-credential-{name}"
    script.write_text(f"#!/bin/sh\n[ \"$1\" = get ] || exit 3\nread server\n"
                      f"[ \"$server\" = '{server}' ] || {{ echo 'credentials not found' >&2; exit 1; }}\n"
                      f"printf '%s' '{answer}'\n")
    script.chmod(0o755)


def testcredentials_come_from_the_helper_the_store_or_auths(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """As the docker client: credHelpers for the registry, else credsStore, else auths; a helper that
    has nothing, or an entry that is not base64, gives no credentials rather than an error."""
    import base64

    from sparkimg._internal.net.registry import credentials

    bin_dir, config = tmp_path / "bin", tmp_path / "docker"
    config.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    _helper(bin_dir, "store", "127.0.0.1:5000", '{"ServerURL": "127.0.0.1:5000", "Username": "u", "Secret": "s"}')
    _helper(bin_dir, "pass", "https://10.0.0.1:5000", '{"Username": "p", "Secret": "q"}')
    plain = base64.b64encode(b"a:b").decode()

    def configure(data: object) -> None:
        (config / "config.json").write_text(json.dumps(data))

    configure({"credsStore": "store", "credHelpers": {"10.0.0.1:5000": "pass"},
               "auths": {"10.0.0.2:5000": {"auth": plain}, "10.0.0.3:5000": {"auth": "%%%"}}})
    assert credentials("127.0.0.1:5000") == ("u", "s")
    assert credentials("10.0.0.1:5000") == ("p", "q")  # its own helper, asked with the https:// name
    assert credentials("10.0.0.2:5000") == ("a", "b")  # the store has none: auths
    assert credentials("10.0.0.3:5000") is None
    configure({"credsStore": "../../bin/sh", "auths": {"127.0.0.1:5000": {"auth": plain}}})
    assert credentials("127.0.0.1:5000") == ("a", "b")  # no helper outside PATH's docker-credential-*
    configure(["not", "a", "config"])
    assert credentials("127.0.0.1:5000") is None
