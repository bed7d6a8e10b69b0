"""Hand an assembled image to the local Docker daemon as a pull from a one-shot loopback registry.

``POST /images/load`` makes docker 20.10 re-exec dockerd twice (untar the archive, then apply
the layer); a pull applies the layers in process and skips each layer whose blob digest it
already maps to a diff_id: the base's (``fetch`` pulled it) and every layer an earlier handoff
gave it. Measured for a patch-only change: 66 ms for the pull against 115 ms for the load.

The registry lives for one pull. It listens on 127.0.0.1 on a free port (docker reaches
127.0.0.0/8 over plain HTTP with no configuration: its default insecure range), answers only
under a random repository name, serves only the image's manifest and the store's blobs the
image names, and counts the layers the daemon took. A daemon that cannot reach it (rootless
docker in its own network namespace, a daemon on another host) fails the pull, and the caller
loads an archive instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sparkimg._internal.fs.verified import damaged, damaged_error
from sparkimg.engine.protocol import Engine
from sparkimg.errors import EngineError

_HEAD_LIMIT = 64  # header lines of a request; the daemon sends about ten
_LINE_LIMIT = 8192
_TIMEOUT = 60.0  # seconds a connection may stay silent
_FINISH = 2.0  # seconds an answer may take to finish once the pull is done
_TLS_HANDSHAKE = b"\x16"  # the first byte of a TLS ClientHello: docker tries HTTPS first
_TLS_RECORD = 16389  # the largest TLS record: header and 16 KiB


@dataclass
class Served:
    """What one handoff serves, and what the daemon took of it."""

    name: str  # the repository: random, so no other local process can guess a path
    manifest: bytes
    manifest_digest: str
    media_type: str
    blobs: Mapping[str, Path]  # digest -> file: the config and the layer blobs the store has
    config_digest: str
    layers_sent: int = 0
    bytes_sent: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def took(self, digest: str, size: int) -> None:
        with self._lock:
            self.bytes_sent += size
            if digest != self.config_digest:
                self.layers_sent += 1


def pull(engine: Engine, reference: str, served: Served) -> None:
    """Have the engine pull ``reference``; when it refuses, the blobs served are hashed again and a
    damaged one (the engine checks each blob's digest as it pulls) is named with the fix."""
    try:
        engine.pull_plain(reference)
    except EngineError as exc:
        if bad := damaged(served.blobs):
            raise damaged_error(f"load: the engine refused {reference} ({exc.message})", bad) from None
        raise


@contextmanager
def registry(manifest: bytes, manifest_digest: str, media_type: str, config_digest: str,
             blobs: Mapping[str, Path]) -> Iterator[tuple[str, Served]]:
    """Serve one image on 127.0.0.1 while the block runs: the pullable reference
    (``127.0.0.1:PORT/sparkimg-handoff/RANDOM@MANIFEST``) and the tally of what was served."""
    served = Served(f"sparkimg-handoff/{secrets.token_hex(16)}", manifest, manifest_digest, media_type,
                    dict(blobs), config_digest)
    listener = socket.create_server(("127.0.0.1", 0))
    open_connections: list[tuple[threading.Thread, socket.socket]] = []
    thread = threading.Thread(target=_accept, args=(listener, served, open_connections), daemon=True,
                              name="sparkimg-handoff")
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}/{served.name}@{manifest_digest}", served
    finally:
        # Wakes the blocked accept() at once (no polling loop to wait out), then frees the port.
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join()
        # Let each answer finish, so the tally is whole; cut a connection still open after that.
        for worker, connection in open_connections:
            worker.join(_FINISH)
            if worker.is_alive():
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
                worker.join()


def _accept(listener: socket.socket, served: Served, open_connections: list[tuple[threading.Thread, socket.socket]]
            ) -> None:
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:
            return  # the registry was closed
        worker = threading.Thread(target=_Connection(connection, served).handle, daemon=True)
        open_connections.append((worker, connection))
        worker.start()


class _Connection:
    """One request per connection (answers say ``Connection: close``): the registry API's GET and
    HEAD of ``/v2/``, of the manifest by digest and of the blobs; every other path is unknown."""

    def __init__(self, connection: socket.socket, served: Served) -> None:
        self.connection = connection
        self.served = served

    def handle(self) -> None:
        with self.connection:
            self.connection.settimeout(_TIMEOUT)
            try:
                if self.connection.recv(1, socket.MSG_PEEK) == _TLS_HANDSHAKE:
                    # Read the hello (one record, sent whole) so that closing sends no reset before the
                    # answer, which a TLS client reads as "HTTP response to HTTPS client" and falls back.
                    self.connection.recv(_TLS_RECORD)
                    self._answer(400, b"", {})
                    return
                with self.connection.makefile("rb") as reader:
                    request = _request(reader)
                if request is None:
                    self._answer(400, b"", {})
                elif request[0] not in ("GET", "HEAD"):
                    self._answer(405, b"", {})
                else:
                    self._route(*request)
            except OSError:
                return  # the daemon hung up or went silent: its pull fails, and the caller loads instead

    def _route(self, method: str, path: str, headers: dict[str, str]) -> None:
        served = self.served
        head = method == "HEAD"
        if path == "/v2/":
            self._answer(200, b"{}", {"Content-Type": "application/json"}, head=head)
            return
        prefix = f"/v2/{served.name}/"
        if not path.startswith(prefix):
            self._unknown("NAME_UNKNOWN", "repository name not known to registry")
            return
        kind, _, digest = path[len(prefix):].partition("/")
        if kind == "manifests" and digest == served.manifest_digest:
            self._answer(200, served.manifest, {"Content-Type": served.media_type, "Docker-Content-Digest": digest},
                         head=head)
        elif kind == "blobs" and digest in served.blobs:
            self._blob(head, digest, served.blobs[digest], headers.get("range", ""))
        else:
            self._unknown("MANIFEST_UNKNOWN" if kind == "manifests" else "BLOB_UNKNOWN", f"{digest} unknown")

    def _blob(self, head: bool, digest: str, path: Path, wanted: str) -> None:
        try:
            handle = path.open("rb")
        except OSError:
            self._unknown("BLOB_UNKNOWN", f"{digest} unknown")
            return
        with handle:
            size = os.fstat(handle.fileno()).st_size
            start = _range_start(wanted, size)
            extra = {"Content-Range": f"bytes {start}-{size - 1}/{size}"} if start else {}
            self._head(206 if start else 200, size - start,
                       {"Content-Type": "application/octet-stream", "Docker-Content-Digest": digest, **extra})
            if head:
                return
            self.connection.sendfile(handle, start, size - start)
        self.served.took(digest, size - start)

    def _unknown(self, code: str, message: str) -> None:
        body = json.dumps({"errors": [{"code": code, "message": message}]}).encode()
        self._answer(404, body, {"Content-Type": "application/json"})

    def _answer(self, status: int, body: bytes, headers: dict[str, str], *, head: bool = False) -> None:
        self._head(status, len(body), headers)
        if not head:
            self.connection.sendall(body)

    def _head(self, status: int, length: int, headers: dict[str, str]) -> None:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", f"Content-Length: {length}",
                 "Connection: close", "Docker-Distribution-API-Version: registry/2.0",
                 *(f"{k}: {v}" for k, v in headers.items())]
        self.connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))


def _request(reader: IO[bytes]) -> tuple[str, str, dict[str, str]] | None:
    """Method, path and headers of one HTTP/1.x request; None for anything else."""
    parts = reader.readline(_LINE_LIMIT).decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    headers: dict[str, str] = {}
    for _ in range(_HEAD_LIMIT):
        line = reader.readline(_LINE_LIMIT).decode("latin-1").strip()
        if not line:
            return parts[0], parts[1], headers
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return None


_REASONS = {200: "OK", 206: "Partial Content", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def _range_start(wanted: str, size: int) -> int:
    """The first byte of ``Range: bytes=N-`` (how a client resumes a blob); 0 for anything else."""
    spec = wanted.strip().removeprefix("bytes=")
    if wanted.strip().startswith("bytes=") and spec.endswith("-") and spec[:-1].isascii() and spec[:-1].isdigit():
        start = int(spec[:-1])
        return start if 0 < start < size else 0
    return 0
