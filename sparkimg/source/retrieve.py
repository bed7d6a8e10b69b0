"""A locked source into the store, verified by its pin: a PyPI file (wheel or sdist) downloaded
within its locked size and with progress, a local folder as a deterministic tar, a git commit as
an archive of its mirror. What the fetch stage and the preflight read sources through."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from sparkimg._internal.fs import tree as _tree
from sparkimg._internal.units import mib
from sparkimg.errors import FetchError, ResolveError
from sparkimg.events import Event, Kind, Phase, Progress, Reporter, silent
from sparkimg.formats.lockfile import PathPin, PypiPin, SourcePin
from sparkimg.store import downloads
from sparkimg.store.content import CHUNK, Store

if TYPE_CHECKING:
    from sparkimg.spec import Spec


def fetch_source(spec: Spec, name: str, entry: SourcePin, store: Store, report: Reporter = silent) -> str:
    """One locked source into the store (verified by its pin); its blob's sha256."""
    if isinstance(entry, PypiPin):
        if store.has(entry.sha256):
            return entry.sha256
        if downloads.admit(store, entry.sha256, f"sources.{name}"):
            report(Event(Phase.FETCH, f"{entry.filename}: from the shared download cache"))
            return entry.sha256
        report(Event(Phase.FETCH, f"download {entry.filename}" + (f" ({mib(entry.size)})" if entry.size else "")))
        chunks = _progress(_bounded(_download(entry.url), entry.size, entry.url), entry.filename, entry.size, report)
        digest = store.put_stream(chunks, expected=entry.sha256, what=f"sources.{name}")
        if (refused := downloads.keep(store, digest)) is not None:
            report(Event(Phase.FETCH, refused, kind=Kind.WARNING))
        return digest
    if isinstance(entry, PathPin):
        folder = spec.root / entry.path
        described = _tree.describe(folder)
        if described["sha256"] != entry.sha256:
            raise FetchError(f"sources.{name}: {entry.path} changed since the lock",
                             hint=f"run `sparkimg lock --update {name}`")
        return store.put_bytes(_tree.tar(folder), what=f"sources.{name}")
    record = store.read_record("git", entry.commit)
    if record and store.has(record["archive"]):
        return str(record["archive"])
    from sparkimg._internal.net import git as _git  # a git source not yet in the store

    report(Event(Phase.FETCH, f"archive {entry.url} {entry.commit[:12]}"))
    repo = _git.mirror(store, entry.url)
    pin = _git.resolve(repo, entry.url, None, entry.commit)
    if pin.tree != entry.tree:
        raise FetchError(f"sources.{name}: commit {entry.commit} has tree {pin.tree}, "
                         f"the lock pins {entry.tree}")
    digest = store.put_stream(_git.archive(repo, entry.commit), what=f"sources.{name}")
    store.write_record("git", entry.commit, {"archive": digest, "tree": pin.tree})
    return digest


def _progress(chunks: Iterator[bytes], filename: str, size: int | None, report: Reporter) -> Iterator[bytes]:
    """``chunks``, reporting how far the download is (a vLLM or torch wheel is gigabytes: minutes
    with nothing said otherwise): a bar with size, rate and ETA on a terminal, a line every few
    seconds elsewhere (``events.Progress``)."""
    progress = Progress(report, Phase.FETCH, f"download {filename}", size)
    for chunk in chunks:
        progress.advance(len(chunk))
        yield chunk
    progress.finish()


def _bounded(chunks: Iterator[bytes], size: int | None, url: str) -> Iterator[bytes]:
    """``chunks``, cut off once they pass the ``size`` the lock recorded (None: the lock has none):
    a server that never ends a file would fill the disk before the sha256 could be checked."""
    received = 0
    for chunk in chunks:
        received += len(chunk)
        if size is not None and received > size:
            raise FetchError(f"{url}: longer than the {size} bytes the lock records; nothing was admitted",
                             hint="the index serves other bytes than it did when locked; do not build on it")
        yield chunk


def _download(url: str) -> Iterator[bytes]:
    parsed = urlparse(url)
    if parsed.scheme == "file":
        path = Path(unquote(parsed.path))
        try:
            with open(path, "rb") as handle:
                while chunk := handle.read(CHUNK):
                    yield chunk
        except OSError as exc:
            raise FetchError(f"{url}: {exc.strerror}") from None
        return
    import requests  # here, not at module level: importing it costs ~0.1 s that only downloads need

    from sparkimg._internal.net.http import stream_within
    from sparkimg._internal.net.pypi import index_credentials

    try:
        with requests.get(url, stream=True, timeout=60, auth=index_credentials(url)) as response:
            if response.status_code != 200:
                raise FetchError(f"{url}: HTTP {response.status_code}")
            yield from stream_within(response, url, CHUNK)
    except requests.RequestException as exc:
        raise FetchError(f"{url}: {exc.__class__.__name__}: {exc}") from None
    except ResolveError as exc:
        raise FetchError(exc.message, hint=exc.hint) from None
