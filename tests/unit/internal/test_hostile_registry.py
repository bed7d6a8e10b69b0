"""A registry on loopback that lies or drags: credentials stay with the host that asked for
them, and a body that drips stalls out (the rule, with its window shortened for the test)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sparkimg._internal.net import http as http_mod
from sparkimg._internal.net.registry import ImageRef, RegistryClient
from sparkimg.distribution.push import _blob
from sparkimg.errors import ResolveError

Handle = Callable[[BaseHTTPRequestHandler], None]


@pytest.fixture
def serve() -> Iterator[Callable[[Handle], int]]:
    servers: list[ThreadingHTTPServer] = []

    def start(handle: Handle) -> int:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _any(self) -> None:
                handle(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = _any

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return int(server.server_address[1])

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _answer(request: BaseHTTPRequestHandler, code: int, headers: dict[str, str] | None = None,
            body: bytes = b"") -> None:
    request.rfile.read(int(request.headers.get("Content-Length") or 0))
    request.send_response(code)
    for key, value in (headers or {}).items():
        request.send_header(key, value)
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.write(body)


def test_an_upload_location_on_another_host_gets_no_credentials(serve: Callable[[Handle], int]) -> None:
    """The registry asks for a bearer token on 127.0.0.1:P and sends the upload to localhost:P
    (another host name, the same server): the token goes to the first only, and the push works."""
    seen: list[tuple[str, str, str | None]] = []

    def handle(request: BaseHTTPRequestHandler) -> None:
        host, auth = request.headers["Host"], request.headers.get("Authorization")
        seen.append((host, request.command, auth))
        if request.path.startswith("/token"):
            return _answer(request, 200, body=json.dumps({"token": "s3cret"}).encode())
        if host.startswith("localhost"):
            return _answer(request, 201 if request.command == "PUT" else 202,
                           {"Location": f"http://{host}/upload/1"})
        if auth != "Bearer s3cret":
            return _answer(request, 401, {"WWW-Authenticate": f'Bearer realm="http://{host}/token",service="t"'})
        if request.command == "HEAD":
            return _answer(request, 404)
        return _answer(request, 202, {"Location": f"http://localhost:{port}/upload/1"})

    port = serve(handle)
    data = b"a layer"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    to = ImageRef(f"127.0.0.1:{port}", "team/image")
    pushed = _blob(RegistryClient(), to, digest, len(data), lambda event: None, chunks=lambda: iter([data]))
    assert pushed.how == "uploaded"
    elsewhere = [s for s in seen if s[0].startswith("localhost")]
    assert [c for _, c, _ in elsewhere] == ["PATCH", "PUT"] and all(auth is None for _, _, auth in elsewhere)
    assert any(auth == "Bearer s3cret" for host, _, auth in seen if host.startswith("127.0.0.1"))


def test_another_host_that_asks_for_credentials_is_refused_naming_whose_they_are(
    serve: Callable[[Handle], int]
) -> None:
    def handle(request: BaseHTTPRequestHandler) -> None:
        if request.headers["Host"].startswith("localhost"):
            return _answer(request, 401, {"WWW-Authenticate": 'Basic realm="x"'})
        if request.command == "HEAD":
            return _answer(request, 404)
        return _answer(request, 202, {"Location": f"http://localhost:{port}/upload/1"})

    port = serve(handle)
    to = ImageRef(f"127.0.0.1:{port}", "team/image")
    with pytest.raises(ResolveError, match=f"they belong to 127.0.0.1:{port}"):
        _blob(RegistryClient(), to, "sha256:" + "0" * 64, 1, lambda event: None, chunks=lambda: iter([b"x"]))


def _dripping(request: BaseHTTPRequestHandler, code: int) -> None:
    request.rfile.read(int(request.headers.get("Content-Length") or 0))
    body = json.dumps({"schemaVersion": 2, "padding": "x" * 4000}).encode()
    request.send_response(code)
    request.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    try:
        for byte in body:
            request.wfile.write(bytes([byte]))
            request.wfile.flush()
            time.sleep(0.01)
    except OSError:
        pass  # the client gave up: what the test wants


def test_a_dripping_manifest_or_error_body_stalls_out(serve: Callable[[Handle], int],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_mod, "STALL_S", 0.5)  # 100 bytes a second, where 8 KiB must come each 0.5 s
    monkeypatch.setattr(http_mod, "STALL_BYTES", 8 << 10)
    port = serve(lambda request: _dripping(request, 200 if request.command == "GET" else 500))
    client = RegistryClient()
    started = time.monotonic()
    with pytest.raises(ResolveError, match="stalled"):
        client.manifest_bytes(f"127.0.0.1:{port}/team/image", "sha256:" + "0" * 64)
    assert time.monotonic() - started < 3
    started = time.monotonic()
    with pytest.raises(ResolveError, match="HTTP 500"):  # the error body is quoted only as far as it came
        client.send("PUT", ImageRef(f"127.0.0.1:{port}", "team/image"),
                    f"http://127.0.0.1:{port}/v2/team/image/manifests/latest", data=b"{}", ok=(201,))
    assert time.monotonic() - started < 3


def test_a_stream_that_keeps_its_pace_is_not_a_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_mod, "STALL_S", 0.05)
    pace = http_mod.Pace("a blob")
    for _ in range(5):
        time.sleep(0.03)
        pace.arrived(http_mod.STALL_BYTES)  # enough in every window
    time.sleep(0.06)
    pace.arrived(0)  # the window that closes here brought enough
    time.sleep(0.06)
    with pytest.raises(ResolveError, match="a blob: the transfer stalled: 1 bytes"):
        pace.arrived(1)  # this one did not
