"""The fetch phase: bring every locked input into the store (and the base into the engine).

After this, build steps need no network. Every download is verified against its pinned
digest before it is admitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkimg.errors import EngineError, FetchError, ResolveError
from sparkimg.events import Event, Phase, Progress, Reporter, silent
from sparkimg.source.retrieve import fetch_source
from sparkimg.store.content import Store

if TYPE_CHECKING:
    from sparkimg._internal.net.registry import RegistryClient
    from sparkimg.engine.protocol import Engine
    from sparkimg.formats.oci import BaseImage
    from sparkimg.lock.resolve import Lock
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
        from sparkimg.base.cuda import identify

        identify(engine, tag, lock.base.config_digest, store, report=report)
    return Fetched(blobs, patch_blobs, tag)


def base_image(lock: Lock, store: Store, *, client: RegistryClient | None = None,
               report: Reporter = silent) -> BaseImage:
    """The pinned base's manifest and config bytes, from the store or else its registry (checked
    against the lock's digests; with ``client``: reached as a push's options say). Its layers are
    not downloaded: the engine has them (``fetch_base``) and the image's manifest names them by
    their descriptors."""
    from sparkimg.formats.oci import BaseImage

    base = lock.base
    manifest_hex, config_hex = base.manifest_digest.split(":", 1)[1], base.config_digest.split(":", 1)[1]
    if not (store.has(manifest_hex) and store.has(config_hex)):
        from sparkimg._internal.net.registry import RegistryClient

        report(Event(Phase.FETCH, f"base manifest {base.repository}@{base.manifest_digest}"))
        client = client or RegistryClient.for_base(base.repository, base.transport)
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
        progress = Progress(report, Phase.FETCH, f"pull {pinned}")
        try:
            engine.pull(pinned, progress.update)
            progress.finish()
        except EngineError as exc:
            raise FetchError(f"base: cannot pull {pinned}: {exc.message}",
                             hint="check the registry is reachable and still serves this digest") from None
    found = engine.image_id(pinned)
    if found != base.config_digest:
        raise FetchError(f"base: {pinned} has image ID {found}, the lock pins {base.config_digest}",
                         hint="the registry served other content for a pinned digest; do not build on it")
    engine.tag(pinned, tag)
    return tag
