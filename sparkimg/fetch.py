"""The fetch phase: bring every locked input into the store (and the base into the engine).

After this, build steps need no network. Every download is verified against its pinned
digest before it is admitted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from sparkimg import _tree
from sparkimg.errors import EngineError, FetchError, ResolveError
from sparkimg.events import Event, Kind, Phase, Reporter, silent
from sparkimg.formats.lock import PathPin, PypiPin, SourcePin
from sparkimg.store import CHUNK, Store

if TYPE_CHECKING:
    from sparkimg.engine import Engine
    from sparkimg.formats.oci import BaseImage
    from sparkimg.lock import Lock
    from sparkimg.spec import Spec

@dataclass(frozen=True)
class Fetched:
    """Where each input now is: store digests by input name, and the local base tag."""

    blobs: dict[str, str]
    patch_blobs: dict[str, dict[str, str]]
    base_tag: str | None


def base_tag(spec: Spec, lock: Lock) -> str:
    """A local tag for the pinned base (BuildKit cannot take a bare digest from the local store)."""
    return f"sparkimg-base/{spec.name}:{lock.base.config_digest.split(':', 1)[1][:20]}"


def fetch(spec: Spec, lock: Lock, store: Store, engine: Engine | None, *, report: Reporter = silent) -> Fetched:
    blobs: dict[str, str] = {}
    for name, entry in lock.sources.items():
        blobs[name] = fetch_source(spec, name, entry, store, report)
    patch_blobs: dict[str, dict[str, str]] = {}
    for name, patch_set in lock.patches.items():
        folder = spec.root / patch_set.dir
        patch_blobs[name] = {}
        for item in patch_set.files:
            if not store.has(item.sha256):
                report(Event(Phase.FETCH, f"store patch {name}/{item.file}"))
            patch_blobs[name][item.file] = store.put_file(
                folder / item.file, expected=item.sha256, what=f"patches.{name}/{item.file}"
            )
    tag = fetch_base(spec, lock, engine, report=report) if engine is not None else None
    if engine is not None and tag is not None and lock.toolchain.cuda == "base":
        from sparkimg.basecuda import identify

        identify(engine, tag, lock.base.config_digest, store, report=report)
    return Fetched(blobs, patch_blobs, tag)


def base_image(lock: Lock, store: Store, *, report: Reporter = silent) -> BaseImage:
    """The pinned base's manifest and config bytes, from the store or else its registry (checked
    against the lock's digests). Its layers are not downloaded: the engine has them (``fetch_base``)
    and the image's manifest names them by their descriptors."""
    from sparkimg.formats.oci import BaseImage

    base = lock.base
    manifest_hex, config_hex = base.manifest_digest.split(":", 1)[1], base.config_digest.split(":", 1)[1]
    if not (store.has(manifest_hex) and store.has(config_hex)):
        from sparkimg._registry import RegistryClient

        report(Event(Phase.FETCH, f"base manifest {base.repository}@{base.manifest_digest}"))
        client = RegistryClient()
        try:
            manifest = client.manifest_bytes(base.repository, base.manifest_digest)
            config = client.blob_bytes(base.repository, base.config_digest)
        except ResolveError as exc:
            raise FetchError(f"base: {exc.message}", hint=exc.hint) from None
        store.put_bytes(manifest, expected=manifest_hex, what="base manifest")
        store.put_bytes(config, expected=config_hex, what="base config")
    found = BaseImage(store.blob(manifest_hex).read_bytes(), store.blob(config_hex).read_bytes())
    config_descriptor = found.manifest_json.get("config")
    if not isinstance(config_descriptor, dict) or config_descriptor.get("digest") != base.config_digest:
        raise FetchError(f"base: manifest {base.manifest_digest} names another config than the lock's "
                         f"{base.config_digest}", hint="re-lock the base: `sparkimg lock --update base`")
    return found


def fetch_base(spec: Spec, lock: Lock, engine: Engine, *, report: Reporter = silent) -> str:
    """Pull the base by digest, check its image ID (the config digest the lock pins), tag it locally."""
    base = lock.base
    tag = base_tag(spec, lock)
    if engine.image_id(tag) == base.config_digest:
        return tag
    # By the digest the spec pins when it pins one (an index digest included: the engine picks the
    # platform's manifest), so the config checked below is the spec's, whatever else a lock says.
    pinned = f"{base.repository}@{spec.base.digest or base.manifest_digest}"
    if engine.image_id(pinned) != base.config_digest:
        report(Event(Phase.FETCH, f"pull {pinned}"))
        try:
            engine.pull(pinned)
        except EngineError as exc:
            raise FetchError(f"base: cannot pull {pinned}: {exc.message}",
                             hint="check the registry is reachable and still serves this digest") from None
    found = engine.image_id(pinned)
    if found != base.config_digest:
        raise FetchError(f"base: {pinned} has image ID {found}, the lock pins {base.config_digest}",
                         hint="the registry served other content for a pinned digest; do not build on it")
    engine.tag(pinned, tag)
    return tag


def fetch_source(spec: Spec, name: str, entry: SourcePin, store: Store, report: Reporter = silent) -> str:
    """One locked source into the store (verified by its pin); its blob's sha256."""
    if isinstance(entry, PypiPin):
        if store.has(entry.sha256):
            return entry.sha256
        report(Event(Phase.FETCH, f"download {entry.filename}" + (f" ({_mib(entry.size)})" if entry.size else "")))
        chunks = _progress(_bounded(_download(entry.url), entry.size, entry.url), entry.filename, entry.size, report)
        return store.put_stream(chunks, expected=entry.sha256, what=f"sources.{name}")
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
    from sparkimg import _git  # a git source not yet in the store

    report(Event(Phase.FETCH, f"archive {entry.url} {entry.commit[:12]}"))
    repo = _git.mirror(store, entry.url)
    pin = _git.resolve(repo, entry.url, None, entry.commit)
    if pin.tree != entry.tree:
        raise FetchError(f"sources.{name}: commit {entry.commit} has tree {pin.tree}, "
                         f"the lock pins {entry.tree}")
    digest = store.put_stream(_git.archive(repo, entry.commit), what=f"sources.{name}")
    store.write_record("git", entry.commit, {"archive": digest, "tree": pin.tree})
    return digest


PROGRESS_S = 5.0  # seconds between two progress lines of one download


def _mib(size: int) -> str:
    return f"{size / (1 << 20):,.1f} MiB"


def _progress(chunks: Iterator[bytes], filename: str, size: int | None, report: Reporter) -> Iterator[bytes]:
    """``chunks``, with a line every ``PROGRESS_S`` on how far the download is (a vLLM or torch
    wheel is gigabytes: minutes with nothing said otherwise)."""
    received, last = 0, time.monotonic()
    for chunk in chunks:
        received += len(chunk)
        if time.monotonic() - last >= PROGRESS_S:
            last = time.monotonic()
            of = f" of {_mib(size)}" if size else ""
            report(Event(Phase.FETCH, f"download {filename}: {_mib(received)}{of}", kind=Kind.LOG,
                         figures={"bytes": received, **({"size": size} if size else {})}))
        yield chunk


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

    from sparkimg._pypi import index_credentials

    try:
        with requests.get(url, stream=True, timeout=60, auth=index_credentials(url)) as response:
            if response.status_code != 200:
                raise FetchError(f"{url}: HTTP {response.status_code}")
            yield from response.iter_content(CHUNK)
    except requests.RequestException as exc:
        raise FetchError(f"{url}: {exc.__class__.__name__}: {exc}") from None
