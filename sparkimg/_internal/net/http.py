"""The body of an HTTP response from a server sparkimg does not control (a registry, a token
service, a package index), read within a size and a time bound.

``requests`` reads a whole body into memory unless told to stream, and its timeout bounds each
read from the socket, not the response: a server that declares gigabytes, that never ends a
chunked body, or that sends a byte every 29 seconds would hold a lock or a pull forever or
exhaust memory. Every document sparkimg asks for (manifests, indexes, configs, tokens, a PyPI
project page, an error message) is small, so each is read here with a limit, and refused with
a ``ResolveError`` naming the URL when it passes the limit or ``DEADLINE_S``. Streams of layers
and files are checked by digest as they are written, not here.

Every body, a document's or a stream's, is also held to a stall rule (``Pace``): at least
``STALL_BYTES`` every ``STALL_S`` seconds. A server that sends a byte a second keeps each socket
read inside its timeout and a small document inside the deadline for minutes; the stall rule
ends it in 20 s with a message that names the stall.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from sparkimg.errors import ResolveError

if TYPE_CHECKING:
    import requests

DOCUMENT_MAX = 4 << 20  # a manifest or index: the OCI distribution spec's size registries must accept
CONFIG_MAX = 16 << 20  # an image config with a long history, or another small blob
TOKEN_MAX = 1 << 20
ERROR_TEXT = 200  # characters of an error body quoted in a message
DEADLINE_S = 300.0  # for the whole body of one document
STALL_S = 20.0  # every this long, a body must have brought at least STALL_BYTES more
STALL_BYTES = 16 << 10
MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
_PIECE = 64 << 10


def request(session: Any, method: str, url: str, *, headers: dict[str, str] | None = None, auth: Any = None,
            data: bytes | None = None, params: dict[str, str] | None = None, timeout: float = 30,
            follow: bool = True, verify: bool | str = True) -> requests.Response:
    """One request, its body not read, following up to ``MAX_REDIRECTS`` redirects of a GET or
    HEAD here: ``requests`` reads a redirect's body whole, without a bound, before it follows (and
    even when told not to follow, to prepare ``Response.next``), so a 302 with an endless body grew
    memory without end. So the request goes to the transport adapter directly and each redirect is
    closed unread; credentials (``auth``, an ``Authorization`` header) go to the first host only,
    as ``requests`` itself does. ``session`` is a ``requests.Session``, or None for a new one;
    ``verify``: True (the system's CAs) or a CA file, for the first host only (a redirect elsewhere
    is verified with the system's)."""
    import requests

    session = session if isinstance(session, requests.Session) else requests.Session()
    first = urlsplit(url).netloc
    for _ in range(MAX_REDIRECTS + 1):
        prepared = session.prepare_request(requests.Request(method, url, headers=headers, auth=auth, data=data,
                                                            params=params))
        here = verify if urlsplit(url).netloc == first else True
        settings = session.merge_environment_settings(prepared.url, {}, True, here, None)
        response: requests.Response = session.get_adapter(prepared.url or url).send(prepared, timeout=timeout,
                                                                                     **settings)
        location = response.headers.get("Location")
        if not follow or method not in ("GET", "HEAD") or response.status_code not in _REDIRECTS or not location:
            return response
        response.close()
        url, params = urljoin(prepared.url or url, location), None
        if urlsplit(url).netloc != first:
            headers = {k: v for k, v in (headers or {}).items() if k.lower() != "authorization"}
            auth = None
    raise ResolveError(f"{url}: more than {MAX_REDIRECTS} redirects", hint="check the server's address")


class Pace:
    """The stall rule for one body: ``arrived`` is told each piece; a window of ``STALL_S`` seconds
    that brought fewer than ``STALL_BYTES`` raises ``ResolveError`` naming ``what``."""

    def __init__(self, what: str) -> None:
        self.what, self.since, self.got = what, time.monotonic(), 0

    def stalled(self, size: int) -> str | None:
        """Why the body counts as stalled after a piece of ``size`` bytes, or None."""
        self.got += size
        now = time.monotonic()
        if now - self.since < STALL_S:
            return None
        if self.got < STALL_BYTES:
            return f"{self.what}: the transfer stalled: {self.got} bytes in {now - self.since:.0f} s"
        self.since, self.got = now, 0
        return None

    def arrived(self, size: int) -> None:
        if (why := self.stalled(size)) is not None:
            raise ResolveError(why, hint="the server is too slow or holding the connection; try again later")


def stream_within(response: requests.Response, what: str, piece: int = 1 << 20) -> Iterator[bytes]:
    """A streamed body in pieces as they arrive, held to the stall rule; a broken transfer is a
    ``ResolveError`` naming ``what``. Closes the response when done or abandoned."""
    import requests
    import urllib3

    pace = Pace(what)
    try:
        while chunk := response.raw.read1(piece, decode_content=True):
            pace.arrived(len(chunk))
            yield chunk
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise ResolveError(f"{what}: the transfer broke off: {exc.__class__.__name__}") from None
    finally:
        response.close()


def declared_length(response: requests.Response) -> int | None:
    """The body size the response's ``Content-Length`` announces; None when it announces none, or
    not in ASCII digits (``"²".isdigit()`` holds, and ``int("²")`` fails)."""
    declared = response.headers.get("Content-Length", "")
    return int(declared) if declared.isascii() and declared.isdigit() else None


def read_within(response: requests.Response, limit: int, what: str) -> bytes:
    """The body of a response requested with ``stream=True``; refused past ``limit`` bytes or
    ``DEADLINE_S``. ``response.content`` (and ``.text``, ``.json()``) then hold these bytes."""
    import requests
    import urllib3

    declared = declared_length(response)
    if declared is not None and declared > limit:
        response.close()
        raise ResolveError(f"{what}: the server announces {declared} bytes; at most {limit} are read",
                           hint="this is not the small document asked for; check the server")
    body = bytearray()
    started = time.monotonic()
    pace = Pace(what)
    try:
        # read1: what has arrived (decoded), so the deadline is checked as often as bytes come
        while piece := response.raw.read1(_PIECE, decode_content=True):
            body += piece
            pace.arrived(len(piece))
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
    import urllib3

    head = bytearray()
    started, pace = time.monotonic(), Pace("the error body")
    try:
        while piece := response.raw.read1(4096, decode_content=True):  # as it arrives, as in read_within
            head += piece
            if len(head) >= 4 * ERROR_TEXT or pace.stalled(len(piece)) or time.monotonic() - started > DEADLINE_S:
                break
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError):
        pass
    finally:
        response.close()
    return bytes(head).decode(errors="replace").strip()[:ERROR_TEXT]
