"""Documents from a registry, a token service or a package index are read within a size and a
time bound: a real HTTP server on 127.0.0.1 that announces gigabytes, never ends a chunked body,
drips a byte at a time or answers an error with an endless body gets a ResolveError, quickly and
in little memory."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkimg._internal.net import http as _http
from sparkimg._internal.net import pypi as _pypi
from sparkimg._internal.net.registry import RegistryClient
from sparkimg.errors import ResolveError

MiB = 1 << 20


class Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        return None

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        try:
            if path.endswith("declared"):
                self.send_response(200)
                self.send_header("Content-Length", str(5 << 30))
                self.end_headers()
                self.wfile.write(b"{" * 1024)
            elif path.endswith("drip"):
                self.send_response(500 if path.endswith("error-drip") else 200)
                self.send_header("Content-Length", "100")
                self.end_headers()
                for _ in range(100):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.05)
            elif path.endswith("/token"):
                self.endless(200)
            elif path.endswith("/challenge"):
                self.send_response(401)
                realm = f"http://{self.headers['Host']}/token"
                self.send_header("WWW-Authenticate", f'Bearer realm="{realm}",service="x"')
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif path.endswith("/hop"):  # a redirect whose own body never ends, to a body that never ends
                self.send_response(302)
                self.send_header("Location", path.replace("/hop", "/endless"))
                self.endless_body()
            elif path.endswith("/loop"):
                self.send_response(302)
                self.send_header("Location", path)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif path.endswith("/elsewhere"):  # the same server under another host name
                self.send_response(307)
                port = self.headers["Host"].rsplit(":", 1)[1]
                self.send_header("Location", f"http://localhost:{port}/v2/x/manifests/echo")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif path.endswith("/echo"):
                body = json.dumps({"authorization": self.headers.get("Authorization")}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif path.endswith("/superscript"):
                self.send_response(200)
                self.send_header("Content-Length", "\u00b2")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(b"{}")
                self.close_connection = True
            elif path.endswith("/error"):
                self.endless(500, b"denied: " + b"x" * 300)
            else:  # a manifest, a config, a project page: endless
                self.endless(200)
        except (BrokenPipeError, ConnectionResetError):
            return

    def do_HEAD(self) -> None:  # a file's size, as an index answers it
        self.send_response(200 if self.path.endswith(("sized.whl", "superscript.whl")) else 404)
        sizes = {"sized.whl": "1234", "superscript.whl": "\u00b2"}
        self.send_header("Content-Length", next((v for k, v in sizes.items() if self.path.endswith(k)), "0"))
        self.end_headers()

    def endless(self, status: int, first: bytes = b"") -> None:
        self.send_response(status)
        self.endless_body(first)

    def endless_body(self, first: bytes = b"") -> None:
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.end_headers()
        piece = first or b"[" * (64 << 10)
        while True:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            piece = b"[" * (64 << 10)


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def refused(call: object, match: str) -> tuple[float, int]:
    """Seconds and peak bytes (Python's allocations) until ``call`` raised a ResolveError."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(ResolveError, match=match):
            call()  # type: ignore[operator]
        return time.monotonic() - started, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_an_endless_manifest_is_refused_past_the_document_limit(server: str) -> None:
    took, peak = refused(lambda: RegistryClient().tagged(f"{server}/sparkimg/demo", "latest"),
                         f"sent more than {_http.DOCUMENT_MAX} bytes")
    assert took < 20 and peak < 4 * _http.DOCUMENT_MAX, (took, peak)


def test_a_config_announced_at_five_gigabytes_is_refused_before_it_is_read(server: str) -> None:
    took, peak = refused(lambda: RegistryClient().blob_bytes(f"{server}/sparkimg/demo", "sha256:declared"),
                         "announces 5368709120 bytes")
    assert took < 5 and peak < MiB, (took, peak)


def test_a_body_dripped_a_byte_at_a_time_is_cut_off_at_the_deadline(server: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "DEADLINE_S", 1.0)
    took, _ = refused(lambda: RegistryClient().blob_bytes(f"{server}/sparkimg/demo", "sha256:drip"),
                      "took more than 1 s")
    assert took < 4, took


def test_an_error_with_an_endless_body_is_quoted_briefly(server: str) -> None:
    took, peak = refused(lambda: RegistryClient().tagged(f"{server}/sparkimg/error", "error"),
                         r"HTTP 500: denied: x{192}$")
    assert took < 20 and peak < 4 * _http.DOCUMENT_MAX, (took, peak)


def test_an_error_body_dripped_a_byte_at_a_time_is_cut_off_at_the_deadline(
        server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "DEADLINE_S", 1.0)
    took, _ = refused(lambda: RegistryClient().tagged(f"{server}/sparkimg/demo", "error-drip"), "HTTP 500")
    assert took < 4, took


def test_an_endless_token_response_is_refused(server: str) -> None:
    took, _ = refused(lambda: RegistryClient().tagged(f"{server}/sparkimg/demo", "challenge"),
                      f"token.*sent more than {_http.TOKEN_MAX} bytes")
    assert took < 20, took


def test_an_endless_project_page_is_refused(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pypi, "PROJECT_PAGE_MAX", 8 * MiB)
    monkeypatch.setenv("SPARKIMG_PYPI_INDEX", f"http://{server}/simple/")
    took, peak = refused(lambda: _pypi.resolve_sdist("flashinfer-python", "0.6.1"), f"sent more than {8 * MiB}")
    assert took < 20 and peak < 32 * MiB, (took, peak)
    assert _pypi.upload_time("flashinfer-python", "x.tar.gz") is None


def test_a_layer_longer_than_its_descriptor_is_cut_off(server: str) -> None:
    from sparkimg._internal.net.registry import ImageRef, client_stream

    stream = client_stream(RegistryClient(), ImageRef.parse(f"{server}/sparkimg/demo"), "sha256:" + "0" * 64, MiB)
    took, peak = refused(lambda: sum(len(chunk) for chunk in stream), f"longer than its descriptor's {MiB} bytes")
    assert took < 20 and peak < 16 * MiB, (took, peak)


def test_the_lock_takes_a_wheel_size_from_the_index_or_the_file(server: str, tmp_path: Path) -> None:
    assert _pypi.file_size(f"http://{server}/files/p-1.0-py3-none-any.sized.whl") == 1234
    assert _pypi.file_size(f"http://{server}/files/absent.whl") is None
    wheel = tmp_path / "p-1.0-py3-none-any.whl"
    wheel.write_bytes(b"x" * 77)
    assert _pypi.file_size(wheel.as_uri()) == 77
    assert _pypi.file_size(f"http://{server}/files/p-1.0-py3-none-any.superscript.whl") is None  # "²" is no size


def test_a_redirect_with_an_endless_body_is_left_unread_and_followed(server: str) -> None:
    took, peak = refused(lambda: RegistryClient().tagged(f"{server}/sparkimg/demo", "hop"),
                         r"manifests/endless: the server sent more than")
    assert took < 20 and peak < 4 * _http.DOCUMENT_MAX, (took, peak)
    refused(lambda: RegistryClient().tagged(f"{server}/sparkimg/demo", "loop"), "more than 5 redirects")


def test_credentials_go_to_the_first_host_only(server: str) -> None:
    from sparkimg._internal.net.registry import ImageRef

    client = RegistryClient()
    ref = ImageRef.parse(f"{server}/sparkimg/demo")
    client._tokens[f"{ref.registry}/{ref.repository}/pull"] = "Bearer secret"
    echoed = client.send("GET", ref, f"{ref.base_url}/manifests/echo").json()
    assert echoed == {"authorization": "Bearer secret"}
    assert client.send("GET", ref, f"{ref.base_url}/manifests/elsewhere").json() == {"authorization": None}


def test_a_content_length_that_is_no_number_is_no_size(server: str) -> None:
    from sparkimg._internal.net.registry import ImageRef

    ref = ImageRef.parse(f"{server}/sparkimg/demo")
    assert RegistryClient().send("GET", ref, f"{ref.base_url}/manifests/superscript").content == b"{}"
