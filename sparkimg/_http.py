"""The body of an HTTP response from a server sparkimg does not control (a registry, a token
service, a package index), read within a size and a time bound.

``requests`` reads a whole body into memory unless told to stream, and its timeout bounds each
read from the socket, not the response: a server that declares gigabytes, that never ends a
chunked body, or that sends a byte every 29 seconds would hold a lock or a pull forever or
exhaust memory. Every document sparkimg asks for (manifests, indexes, configs, tokens, a PyPI
project page, an error message) is small, so each is read here with a limit, and refused with
a ``ResolveError`` naming the URL when it passes the limit or ``DEADLINE_S``. Streams of layers
and files are checked by digest as they are written, not here.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .errors import ResolveError

if TYPE_CHECKING:
    import requests

DOCUMENT_MAX = 4 << 20  # a manifest or index: the OCI distribution spec's size registries must accept
CONFIG_MAX = 16 << 20  # an image config with a long history, or another small blob
TOKEN_MAX = 1 << 20
ERROR_TEXT = 200  # characters of an error body quoted in a message
DEADLINE_S = 300.0  # for the whole body of one document
_PIECE = 64 << 10


def read_within(response: requests.Response, limit: int, what: str) -> bytes:
    """The body of a response requested with ``stream=True``; refused past ``limit`` bytes or
    ``DEADLINE_S``. ``response.content`` (and ``.text``, ``.json()``) then hold these bytes."""
    import requests
    import urllib3

    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > limit:
        response.close()
        raise ResolveError(f"{what}: the server announces {int(declared)} bytes; at most {limit} are read",
                           hint="this is not the small document asked for; check the server")
    body = bytearray()
    started = time.monotonic()
    try:
        # read1: what has arrived (decoded), so the deadline is checked as often as bytes come
        while piece := response.raw.read1(_PIECE, decode_content=True):
            body += piece
            if len(body) > limit:
                raise ResolveError(f"{what}: the server sent more than {limit} bytes",
                                   hint="this is not the small document asked for; check the server")
            if time.monotonic() - started > DEADLINE_S:
                raise ResolveError(f"{what}: the body took more than {DEADLINE_S:.0f} s",
                                   hint="the server is too slow or holding the connection; try again later")
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
        response.close()
        raise ResolveError(f"{what}: the body broke off: {exc.__class__.__name__}") from None
    except ResolveError:
        response.close()  # the rest is never read
        raise
    response.raw.release_conn()  # read to its end: the connection goes back to the pool
    response._content = bytes(body)  # what .content, .text and .json() read from now on
    return response._content


def error_text(response: requests.Response) -> str:
    """The start of an error response's body, for a message (the rest is never read)."""
    import requests

    head = bytearray()
    started = time.monotonic()
    try:
        for piece in response.iter_content(4096):
            head += piece
            if len(head) >= 4 * ERROR_TEXT or time.monotonic() - started > DEADLINE_S:
                break
    except requests.RequestException:
        pass
    finally:
        response.close()
    return bytes(head).decode(errors="replace").strip()[:ERROR_TEXT]
