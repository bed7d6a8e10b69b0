"""The Docker Engine API over its local unix socket: which socket the docker client would use,
and one HTTP request on it. Standard library only (a leaf module), so the engine adapter and the
no-op answer can both ask the daemon in about a millisecond without loading anything (what
only finding the socket needs is imported there).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# The daemon's version as the last answer's ``Server: Docker/VERSION (os)`` header gave it: what
# ``docker version`` would ask for, known without another request.
last_server: str | None = None


def api_socket(client: str) -> str | None:
    """The local daemon's API socket a docker client talks to, when that is certain: DOCKER_HOST unset
    or ``unix://``, no context chosen, and the socket present. Else None: ask through the client."""
    import json
    from pathlib import Path

    from sparkimg._internal.fs.files import read_input
    from sparkimg._internal.locations import docker_config
    from sparkimg.errors import UsageError

    if Path(client).name != "docker" or os.environ.get("DOCKER_CONTEXT"):
        return None
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None
    try:
        context = json.loads(read_input(docker_config(), 4 << 20)).get("currentContext")
    except (OSError, ValueError, AttributeError, RecursionError, UsageError):
        context = None
    if context not in (None, "", "default"):
        return None
    path = host.removeprefix("unix://")
    return path if Path(path).is_socket() else None


def image_path(reference: str, action: str = "/json") -> str:
    """The API path of an image by reference: ``/images/REF/json`` (what ``docker image inspect``
    asks), ``/images/REF/tag``, or ``/images/REF`` with ``action`` empty."""
    from urllib.parse import quote

    return f"/images/{quote(reference, safe='/:@')}{action}"


def http_get(socket_path: str, path: str, timeout: float = 60) -> tuple[int, str]:
    """One HTTP/1.0 GET over a unix socket: (status, body). HTTP/1.0 makes the daemon send the body
    whole and close the connection, so no chunked reading is needed (and no http.client import)."""
    return _request(socket_path, f"GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n".encode(), None, timeout)


def http_call(socket_path: str, method: str, path: str, timeout: float = 60) -> tuple[int, str]:
    """One HTTP/1.0 request with no body (``POST /images/create``, ``DELETE /images/REF``)."""
    head = f"{method} {path} HTTP/1.0\r\nHost: docker\r\nContent-Length: 0\r\n\r\n"
    return _request(socket_path, head.encode(), None, timeout)


def http_lines(socket_path: str, method: str, path: str, headers: dict[str, str], timeout: float = 60
               ) -> tuple[int, Iterator[bytes]]:
    """One HTTP/1.0 request with no body whose answer is read as it comes, a line at a time (the
    JSON stream of ``POST /images/create``): (status, the body's lines). The socket closes when the
    lines are read to the end, or when the iterator is dropped."""
    import socket

    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(socket_path)
        sock.sendall(f"{method} {path} HTTP/1.0\r\nHost: docker\r\nContent-Length: 0\r\n{head}\r\n".encode())
        reader = sock.makefile("rb")
        status = reader.readline(8192).split()
        while reader.readline(8192).strip():  # the answer's header lines
            pass
    except BaseException:
        sock.close()
        raise
    if len(status) < 2 or not status[1].isdigit():
        sock.close()
        raise ValueError(f"not an HTTP response: {b' '.join(status)[:80]!r}")

    def lines() -> Iterator[bytes]:
        with sock, reader:
            yield from reader

    return int(status[1]), lines()


def http_post_file(socket_path: str, path: str, body: Path, content_type: str,
                   timeout: float = 600) -> tuple[int, str]:
    """One HTTP/1.0 POST of a file's bytes over a unix socket (``docker load`` is ``POST /images/load``)."""
    head = (f"POST {path} HTTP/1.0\r\nHost: docker\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {body.stat().st_size}\r\n\r\n")
    return _request(socket_path, head.encode(), body, timeout)


def _request(socket_path: str, head: bytes, body: Path | None, timeout: float) -> tuple[int, str]:
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(socket_path)
        sock.sendall(head)
        if body is not None:
            with body.open("rb") as handle:
                sock.sendfile(handle)
        chunks = []
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    answer_head, _, answer = b"".join(chunks).partition(b"\r\n\r\n")
    global last_server
    for line in answer_head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"server" and value.strip().startswith(b"Docker/"):
            last_server = value.strip().split(b" ", 1)[0].removeprefix(b"Docker/").decode("ascii", "replace")
    status = answer_head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or not status[1].isdigit():
        raise ValueError(f"not an HTTP response: {answer_head[:80]!r}")
    return int(status[1]), answer.decode("utf-8", "replace")
