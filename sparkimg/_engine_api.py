"""The Docker Engine API over its local unix socket: which socket the docker client would use,
and one HTTP GET on it. Standard library only (a leaf module), so the engine adapter and the
no-op build check can both ask the daemon in about a millisecond without loading anything.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ._locations import docker_config


def api_socket(client: str) -> str | None:
    """The local daemon's API socket a docker client talks to, when that is certain: DOCKER_HOST unset
    or ``unix://``, no context chosen, and the socket present. Else None: ask through the client."""
    if Path(client).name != "docker" or os.environ.get("DOCKER_CONTEXT"):
        return None
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return None
    try:
        context = json.loads(docker_config().read_text()).get("currentContext")
    except (OSError, ValueError, AttributeError, RecursionError):
        context = None
    if context not in (None, "", "default"):
        return None
    path = host.removeprefix("unix://")
    return path if Path(path).is_socket() else None


def image_path(reference: str) -> str:
    """The API path ``docker image inspect REF`` asks."""
    from urllib.parse import quote

    return f"/images/{quote(reference, safe='/:@')}/json"


def http_get(socket_path: str, path: str, timeout: float = 60) -> tuple[int, str]:
    """One HTTP/1.0 GET over a unix socket: (status, body). HTTP/1.0 makes the daemon send the body
    whole and close the connection, so no chunked reading is needed (and no http.client import)."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(socket_path)
        sock.sendall(f"GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
        chunks = []
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or not status[1].isdigit():
        raise ValueError(f"not an HTTP response: {head[:80]!r}")
    return int(status[1]), body.decode("utf-8", "replace")
