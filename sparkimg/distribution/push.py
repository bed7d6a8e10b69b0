"""``sparkimg push``: upload an image from sparkimg's own OCI data to a registry, so the registry
serves the very manifest the receipt names (``docker push`` compresses the layers again and
writes another manifest).

Over the distribution API: each blob is asked for first (HEAD) and skipped when the registry
has it; a base layer is mounted from the base's repository when that lives on the same
registry, else streamed from the base's registry; new layers and the config come from the
store. Uploads go in chunks (PATCH with Content-Range, then PUT with the digest), so a
multi-GB layer never sits in memory. Then, in this order: the manifest by digest, the receipt
and the SBOM (each: its blobs, its artifact manifest, the referrers fallback index), and only
then the tags, so that no tag ever names an image whose receipt is not there yet
(docs/distribution.md). A
patch-only change sends one small layer, the config and the manifest.

With ``--compression gzip|zstd`` the new layers (stored as plain tars) are compressed first, in
parallel, deterministically and once per (diff_id, compressor) (``compression.py``); the
registry then serves the built manifest with those layers' descriptors swapped, each annotated
with its tar's size so that a node gets the signed manifest's digest back from it (``pull``).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from sparkimg._internal.net.reach import NO_REACH, Reach, Reached, split_transport
from sparkimg._internal.net.registry import ImageRef, RegistryClient, client_stream
from sparkimg.distribution.attached import attachments
from sparkimg.distribution.compression import Compressor, compressed
from sparkimg.errors import ResolveError, UsageError
from sparkimg.events import Event, Kind, Phase, Reporter, silent
from sparkimg.fetch.inputs import base_image
from sparkimg.formats import oci
from sparkimg.formats.canonical import hex_of, sha256_prefixed
from sparkimg.formats.lockfile import BasePin
from sparkimg.lock.resolve import Lock
from sparkimg.store.content import CHUNK, Store

UPLOAD_CHUNK = 32 * CHUNK  # bytes per PATCH


@dataclass(frozen=True)
class BlobPush:
    digest: str
    size: int
    how: str  # "present", "mounted" or "uploaded"
    sent: int  # bytes sent

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "size": self.size, "how": self.how, "sent": self.sent}


@dataclass(frozen=True)
class Pushed:
    repository: str  # REGISTRY/REPO
    manifest_digest: str
    config_digest: str
    tags: tuple[str, ...]
    blobs: tuple[BlobPush, ...]
    receipt: str | None  # the digest of the attached receipt artifact
    sbom: str | None  # the digest of the attached SBOM artifact
    built_manifest: str  # the manifest the build wrote and the receipt names (the same when uncompressed)
    compression: str  # the compressor identity of the new layers as pushed, or "none"
    manifest_size: int = 0  # the pushed manifest's bytes, and its media type: its descriptor in an index
    media_type: str = oci.OCI_MANIFEST
    reached: Reached | None = None  # how the registry was reached: transport, CA file

    @property
    def descriptor(self) -> oci.Descriptor:
        return oci.Descriptor(self.media_type, self.manifest_digest, self.manifest_size)

    @property
    def sent(self) -> int:
        return sum(b.sent for b in self.blobs)

    def to_json(self) -> dict[str, Any]:
        return {"repository": self.repository, "manifest": self.manifest_digest, "config": self.config_digest,
                "reference": f"{self.repository}@{self.manifest_digest}", "tags": list(self.tags),
                "sent_bytes": self.sent, "blobs": [b.to_json() for b in self.blobs], "receipt": self.receipt,
                "sbom": self.sbom, "built_manifest": self.built_manifest, "compression": self.compression,
                "registry": self.reached.to_json() if self.reached is not None else None}


def target_of(text: str, reach: Reach = NO_REACH) -> ImageRef:
    """``--to REGISTRY/REPO``: a repository, with no tag or digest (tags are given with --tag), as
    docker and skopeo name one; skopeo's ``docker://`` and ``https://`` may lead it, ``http://``
    with ``--plain-http`` (``reach``)."""
    try:
        ref = ImageRef.parse(text, reach)
        _, bare = split_transport(text, reach.plain_http)
    except UsageError as exc:
        raise UsageError(f"--to {exc.message}", hint=exc.hint) from None
    if "@" in bare or ":" in bare.rsplit("/", 1)[-1] or "/" not in bare:
        raise UsageError(f"--to {text}: give a registry and repository (REGISTRY/REPO), no tag or digest",
                         hint="e.g. --to 127.0.0.1:5000/sparkimg/demo --tag latest")
    return ref


def base_reader(base: BasePin, client: RegistryClient, registry: str) -> RegistryClient:
    """The client that reads the base's manifest and layers for a push to ``registry``: the push's
    own where the base lives on that registry (its ``--plain-http`` or ``--ca-file`` hold there),
    else one that reaches the base as its lock says (``lock --plain-http``: ``transport``)."""
    if ImageRef.parse(base.repository, client.reach).registry == registry:
        return client
    return RegistryClient.for_base(base.repository, base.transport)


def push_built(record: oci.ImageRecord, lock: Lock, store: Store, target: str, tags: Sequence[str], receipt: Path,
               image: str, *, receipt_required: bool, compression: Compressor | None = None, threads: int = 1,
               client: RegistryClient | None = None, report: Reporter = silent) -> Pushed:
    """Push an image the store built with what goes with it: the receipt at ``receipt`` (refused
    when it is another image's; when it is not there, refused if ``receipt_required``, else said)
    and the SBOM beside it (``attached``). The one push of ``sparkimg push`` and the nightly."""
    attached = attachments(receipt, record, image, required=receipt_required, phase=Phase.PUSH, report=report)
    client = client or RegistryClient()
    reader = base_reader(lock.base, client, target_of(target, client.reach).registry)
    return push(record, base_image(lock, store, client=reader, report=report), lock, store, target, tags,
                receipt=attached.receipt,
                sbom=attached.sbom, client=client, compression=compression, threads=threads, report=report)


def push(record: oci.ImageRecord, base: oci.BaseImage, lock: Lock, store: Store, target: str,
         tags: Sequence[str], *, receipt: bytes | None = None, sbom: bytes | None = None,
         client: RegistryClient | None = None,
         compression: Compressor | None = None, threads: int = 1, report: Reporter = silent) -> Pushed:
    """Upload ``record`` (its base's layers, new layers, config and manifest) to ``target``; with
    ``compression``, the new layers compressed (``threads`` per layer) and the manifest to match;
    ``receipt`` and ``sbom`` (DSSE envelopes) attached beside it, before any tag moves."""
    client = client or RegistryClient()
    to = target_of(target, client.reach)
    reader = base_reader(lock.base, client, to.registry)
    base_ref = reader.ref(lock.base.repository)
    manifest = store.read_checked(hex_of(record.manifest_digest), "push: the image manifest")
    config = store.read_checked(hex_of(record.config_digest), "push: the image config")
    new = [layer.descriptor for layer in record.layers]
    if compression is not None:
        new = _compressed(record, store, compression, threads, report)
        first = len(base.layers)
        manifest = oci.compressed_manifest(manifest, {first + i: (d, compression.identity) for i, d in enumerate(new)})
    manifest_digest = sha256_prefixed(manifest)
    done: list[BlobPush] = []
    for descriptor in base.layers:
        done.append(_blob(client, to, descriptor.digest, descriptor.size, report,
                          mount_from=base_ref.repository if base_ref.registry == to.registry else None,
                          chunks=lambda d=descriptor: client_stream(reader, base_ref, d.digest, d.size)))
    for descriptor in new:
        done.append(_blob(client, to, descriptor.digest, descriptor.size, report,
                          chunks=lambda d=descriptor.digest: _file_chunks(store, d)))
    done.append(_blob(client, to, record.config_digest, len(config), report, chunks=lambda: iter([config])))
    media_type = record.media_type
    # Tags last: a push that fails at any step before leaves every tag where it was; one that
    # fails between tags leaves those moved on a complete image with its receipt attached.
    put_manifest(client, to, manifest_digest, manifest, media_type, manifest_digest)
    subject = oci.Descriptor(media_type, manifest_digest, len(manifest))
    attached = attach(client, to, subject, receipt, store, report) if receipt is not None else None
    described = attach(client, to, subject, sbom, store, report, oci.SBOM_ARTIFACT) if sbom is not None else None
    for tag in tags:
        put_manifest(client, to, tag, manifest, media_type, manifest_digest)
    report(Event(Phase.PUSH, f"pushed {to.registry}/{to.repository}@{manifest_digest} "
                 f"({', '.join(tags) or 'no tags'}): {sum(b.sent for b in done)} bytes sent, "
                 f"{sum(b.how == 'present' for b in done)} blob(s) already there", kind=Kind.DONE,
                 figures={"sent": sum(b.sent for b in done)}))
    return Pushed(f"{to.registry}/{to.repository}", manifest_digest, record.config_digest, tuple(tags),
                  tuple(done), attached, described, record.manifest_digest,
                  compression.identity if compression is not None else "none", len(manifest), media_type,
                  client.reached(to))


@dataclass(frozen=True)
class PushedIndex:
    """Several platforms' images under one tag: each pushed with its own receipt and SBOM, and an
    image index (or Docker manifest list) naming each with its platform, under the tags."""

    repository: str
    digest: str
    media_type: str
    tags: tuple[str, ...]
    images: tuple[tuple[str, Pushed], ...]  # (platform, the image as pushed)
    reached: Reached | None = None  # how the registry was reached: transport, CA file

    def to_json(self) -> dict[str, Any]:
        return {"repository": self.repository, "index": self.digest, "media_type": self.media_type,
                "reference": f"{self.repository}@{self.digest}", "tags": list(self.tags),
                "sent_bytes": sum(p.sent for _, p in self.images),
                "registry": self.reached.to_json() if self.reached is not None else None,
                "platforms": {platform: p.to_json() for platform, p in self.images}}


def push_index(images: Sequence[tuple[str, Pushed]], target: str, tags: Sequence[str], *,
               client: RegistryClient | None = None, report: Reporter = silent) -> PushedIndex:
    """The index of ``images`` (already pushed, each with its receipt attached, one per platform:
    ``pipeline.ship`` refuses two before any is sent), by digest, then under each of ``tags``: a
    tag moves only once every platform's image is complete."""
    platforms = [platform for platform, _ in images]
    client = client or RegistryClient()
    to = target_of(target, client.reach)
    index, media_type = oci.platform_index([(pushed.descriptor, platform) for platform, pushed in images])
    digest = sha256_prefixed(index)
    put_manifest(client, to, digest, index, media_type, digest)
    for tag in tags:
        put_manifest(client, to, tag, index, media_type, digest)
    report(Event(Phase.PUSH, f"pushed {to.registry}/{to.repository}@{digest}: an index of "
                 f"{', '.join(platforms)} ({', '.join(tags) or 'no tags'})", kind=Kind.DONE))
    return PushedIndex(f"{to.registry}/{to.repository}", digest, media_type, tuple(tags), tuple(images),
                       client.reached(to))


def _compressed(record: oci.ImageRecord, store: Store, compressor: Compressor, threads: int,
                report: Reporter) -> list[oci.Descriptor]:
    """The new layers' compressed descriptors, in order; layers compressed side by side (their
    events pass one at a time)."""
    lock = threading.Lock()

    def said(event: Event) -> None:
        with lock:
            report(event)

    with ThreadPoolExecutor(max_workers=max(1, min(len(record.layers), threads)),
                            thread_name_prefix="sparkimg-layer") as pool:
        return list(pool.map(lambda layer: compressed(store, layer, compressor, record.media_type, threads, said),
                             record.layers))


def put_manifest(client: RegistryClient, to: ImageRef, reference: str, manifest: bytes, media_type: str,
                 digest: str) -> None:
    """PUT ``manifest`` under ``reference`` (its digest or a tag); the registry must store it as ``digest``."""
    response = client.send("PUT", to, f"{to.base_url}/manifests/{reference}", data=manifest,
                           headers={"Content-Type": media_type}, ok=(201,), scope="pull,push")
    said = response.headers.get("Docker-Content-Digest")
    if said and said != digest:
        raise ResolveError(f"{to.registry}/{to.repository}:{reference}: the registry stored the manifest as "
                           f"{said}, not {digest}")


def attach(client: RegistryClient, to: ImageRef, subject: oci.Descriptor, envelope: bytes, store: Store,
           report: Reporter, artifact_type: str = oci.RECEIPT_ARTIFACT) -> str:
    """Put the receipt (or the SBOM) beside the image as an OCI artifact whose ``subject`` is the image manifest;
    where the registry has no referrers API (Distribution 2.8), list it in the ``sha256-HEX``
    fallback index too. That index is read, changed and written: writers from this store take
    turns (a lock in the store); the registry itself offers no conditional write."""
    for blob in (oci.EMPTY, envelope):
        _blob(client, to, sha256_prefixed(blob), len(blob), report, chunks=lambda b=blob: iter([b]))
    artifact = oci.receipt_artifact(subject, envelope, artifact_type)
    digest = sha256_prefixed(artifact)
    client.send("PUT", to, f"{to.base_url}/manifests/{digest}", data=artifact, ok=(201,), scope="pull,push",
                headers={"Content-Type": oci.OCI_MANIFEST})
    referrers = client.send("GET", to, f"{to.base_url}/referrers/{subject.digest}", ok=(200, 404),
                            headers={"Accept": oci.OCI_INDEX})
    if referrers.status_code != 200 or not referrers.headers.get("Content-Type", "").startswith(oci.OCI_INDEX):
        tag = oci.fallback_tag(subject.digest)
        with store.lock(f"referrers-{hashlib.sha256(f'{to.registry}/{to.repository}'.encode()).hexdigest()[:16]}"):
            found = client.send("GET", to, f"{to.base_url}/manifests/{tag}", ok=(200, 404),
                                headers={"Accept": oci.OCI_INDEX})
            index = oci.referrers_index(found.content if found.status_code == 200 else None, artifact, artifact_type)
            client.send("PUT", to, f"{to.base_url}/manifests/{tag}", data=index, ok=(201,), scope="pull,push",
                        headers={"Content-Type": oci.OCI_INDEX})
    report(Event(Phase.PUSH, f"attached the {oci.ATTESTATIONS[artifact_type]} as {digest[:19]} "
                 f"(subject {subject.digest[:19]})"))
    return digest


def _blob(client: RegistryClient, to: ImageRef, digest: str, size: int, report: Reporter, *,
          chunks: Any, mount_from: str | None = None) -> BlobPush:
    """One blob: present (HEAD), mounted from another repository, or uploaded in chunks."""
    head = client.send("HEAD", to, f"{to.base_url}/blobs/{digest}", ok=(200, 404), scope="pull,push")
    if head.status_code == 200:
        return BlobPush(digest, size, "present", 0)
    start = f"{to.base_url}/blobs/uploads/"
    if mount_from is not None:
        answer = client.send("POST", to, f"{start}?mount={digest}&from={mount_from}", ok=(201, 202),
                             scope="pull,push", headers={"Content-Length": "0"})
        if answer.status_code == 201:
            report(Event(Phase.PUSH, f"mounted {digest[:19]} from {mount_from}"))
            return BlobPush(digest, size, "mounted", 0)
    else:
        answer = client.send("POST", to, start, ok=(202,), scope="pull,push", headers={"Content-Length": "0"})
    location = _location(to, answer)
    sent = 0
    for chunk in _sized(chunks()):
        answer = client.send("PATCH", to, location, data=chunk, ok=(202, 204), scope="pull,push",
                             headers={"Content-Type": "application/octet-stream",
                                      "Content-Range": f"{sent}-{sent + len(chunk) - 1}",
                                      "Content-Length": str(len(chunk))})
        sent += len(chunk)
        location = _location(to, answer)
    if sent != size:
        raise ResolveError(f"blob {digest}: {sent} bytes read, the manifest says {size}")
    separator = "&" if "?" in location else "?"
    client.send("PUT", to, f"{location}{separator}digest={digest}", ok=(201,), scope="pull,push",
                headers={"Content-Length": "0"})
    report(Event(Phase.PUSH, f"uploaded {digest[:19]} ({sent} bytes)", figures={"sent": sent}))
    return BlobPush(digest, size, "uploaded", sent)


def _location(to: ImageRef, response: Any) -> str:
    location = response.headers.get("Location")
    if not location:
        raise ResolveError(f"{to.registry}: an upload answer without a Location header")
    return str(urljoin(to.base_url + "/", location))


def _sized(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The stream cut or joined into UPLOAD_CHUNK-sized pieces (the last one shorter)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        while len(pending) >= UPLOAD_CHUNK:
            yield pending[:UPLOAD_CHUNK]
            pending = pending[UPLOAD_CHUNK:]
    if pending:
        yield pending


def _file_chunks(store: Store, digest: str) -> Iterator[bytes]:
    with store.reader(hex_of(digest), f"push: blob {digest}") as handle:  # a damaged blob stops the upload
        while chunk := handle.read(UPLOAD_CHUNK):
            yield chunk
