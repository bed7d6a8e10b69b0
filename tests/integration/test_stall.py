"""A registry on loopback that drips its answers one byte a second: ``pull`` and ``push`` fail
within 30 s, naming the stall (the rule as shipped, not shortened: each case takes ~20 s)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sparkimg.engine.protocol import Engine

from .helpers import cli, copy_demo


@pytest.fixture
def dripping() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def _drip(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.command == "HEAD":  # "no such blob", at once: the upload that follows drips
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}' * 20
            self.send_response(202 if self.command == "POST" else 200)
            self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
            self.send_header("Location", "/v2/team/image/blobs/uploads/1")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                for byte in body:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(1.0)
            except OSError:
                pass

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = _drip

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_pull_and_push_against_a_registry_dripping_a_byte_a_second_fail_within_30_s(
    dripping: str, tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    assert cli(capsys, store, "keygen", "--out", str(tmp_path / "k"))[0] == 0
    started = time.monotonic()
    code, _, err = cli(capsys, store, "pull", f"{dripping}/team/image:latest", "--key", str(tmp_path / "k.pub"))
    assert code != 0 and "stalled" in err and time.monotonic() - started < 30, err

    demo = copy_demo(tmp_path / "project")
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    code, built, err = cli(capsys, store, "build", str(demo), "--json", "--quiet")
    assert code == 0, err
    try:
        started = time.monotonic()
        code, _, err = cli(capsys, store, "push", str(demo), "--to", f"{dripping}/team/image")
        assert code != 0 and "stalled" in err and time.monotonic() - started < 30, err
    finally:
        engine.remove_image(built["image"]["reference"])
