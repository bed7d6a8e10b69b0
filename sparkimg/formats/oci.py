"""OCI image data sparkimg writes itself: descriptors, the image manifest, the image config
derived from the base's, and the ``manifest.json`` a ``docker load`` archive needs.

Pure: bytes in, bytes out, no I/O. Every document is encoded one way (``encode``: sorted keys,
no spaces), so its digest is a function of its content. The base's manifest family is kept:
a base pushed as a Docker schema 2 manifest gets a Docker schema 2 image, an OCI base an OCI
image, and the base's layer descriptors are copied verbatim.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sparkimg.errors import FetchError
from sparkimg.formats.canonical import loads, sha256_prefixed

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
# Per manifest family: its config type and the type of an uncompressed layer (what the build
# writes; docs/media-types.md says which engine takes which).
FAMILIES = {OCI_MANIFEST: (OCI_CONFIG, OCI_LAYER), DOCKER_MANIFEST: (DOCKER_CONFIG, DOCKER_LAYER)}
# Config fields that describe the container a legacy builder committed, not the image: dropped.
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_BUILDER_FIELDS = ("container", "container_config", "docker_version", "parent", "id", "comment")


def encode(document: Mapping[str, Any]) -> bytes:
    """The one encoding of an OCI document sparkimg writes."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Descriptor:
        if not isinstance(data, dict):
            raise FetchError(f"{where}: a descriptor must be an object")
        media_type, digest, size = data.get("mediaType"), data.get("digest"), data.get("size")
        if not isinstance(media_type, str) or not isinstance(digest, str) or not _DIGEST.match(digest) \
                or not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise FetchError(f"{where}: a descriptor needs a mediaType, a sha256 digest and a size")
        return cls(media_type, digest, size)


@dataclass(frozen=True)
class Layer:
    """A layer sparkimg wrote: its compressed descriptor and its diff_id (the uncompressed digest)."""

    descriptor: Descriptor
    diff_id: str
    created_by: str
    # The CPU audit's census of its ELF files, (machine, count) by machine (``compile.machines``);
    # None in a record written before the audit, which is then no record: the layer is written again.
    machines: tuple[tuple[str, int], ...] | None = None

    def to_json(self) -> dict[str, Any]:
        data = {**self.descriptor.to_json(), "diffID": self.diff_id, "createdBy": self.created_by}
        if self.machines is not None:
            data["elfMachines"] = dict(self.machines)
        return data

    @classmethod
    def from_json(cls, data: Any, where: str) -> Layer:
        descriptor = Descriptor.from_json(data, where)
        diff_id, created_by, machines = data.get("diffID"), data.get("createdBy"), data.get("elfMachines")
        if not isinstance(diff_id, str) or not _DIGEST.match(diff_id) or not isinstance(created_by, str):
            raise FetchError(f"{where}: a layer needs a diffID and createdBy")
        if machines is not None and (not isinstance(machines, dict) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in machines.items())):
            raise FetchError(f"{where}.elfMachines: must map a machine to a count")
        return cls(descriptor, diff_id, created_by, None if machines is None else tuple(sorted(machines.items())))


@dataclass(frozen=True)
class BaseImage:
    """The pinned base as its registry serves it: manifest and config, bytes kept verbatim."""

    manifest: bytes
    config: bytes

    @property
    def manifest_json(self) -> dict[str, Any]:
        return _object(self.manifest, "base manifest")

    @property
    def config_json(self) -> dict[str, Any]:
        return _object(self.config, "base config")

    @property
    def media_type(self) -> str:
        media_type = self.manifest_json.get("mediaType") or OCI_MANIFEST
        if media_type not in FAMILIES:
            raise FetchError(f"base manifest: unsupported media type {media_type!r}",
                             hint="pin the base by a platform's image manifest, not an index")
        return str(media_type)

    @property
    def layers(self) -> tuple[Descriptor, ...]:
        found = self.manifest_json.get("layers")
        if not isinstance(found, list):
            raise FetchError("base manifest: no layers list")
        return tuple(Descriptor.from_json(d, f"base manifest layers[{i}]") for i, d in enumerate(found))

    @property
    def raw_layers(self) -> list[dict[str, Any]]:
        _ = self.layers  # each checked
        return [dict(d) for d in self.manifest_json["layers"]]

    @property
    def diff_ids(self) -> tuple[str, ...]:
        rootfs = self.config_json.get("rootfs")
        ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise FetchError("base config: no rootfs.diff_ids")
        return tuple(ids)


def config(base: BaseImage, *, env: Mapping[str, str], labels: Mapping[str, str], epoch: int,
           layers: Sequence[Layer], runtime_fields: Mapping[str, Any] | None = None) -> bytes:
    """The image config: the base's, with env and labels added, ``runtime_fields`` set in its
    ``config`` (Entrypoint, Cmd, WorkingDir, User, ExposedPorts; None removes one), ``created``
    and the new history entries at the source epoch, and the new layers' diff_ids after the base's."""
    data = {k: v for k, v in base.config_json.items() if k not in _BUILDER_FIELDS}
    runtime = dict(data.get("config") or {})
    runtime.pop("Image", None)  # the legacy builder's parent image ID: a builder detail
    current = [str(e) for e in runtime.get("Env") or []]
    names = {e.partition("=")[0]: i for i, e in enumerate(current)}
    for key, value in sorted(env.items()):
        known = dict(e.partition("=")[::2] for e in current)
        entry = f"{key}={expand(value, known)}"
        if key in names:
            current[names[key]] = entry
        else:
            names[key] = len(current)
            current.append(entry)
    runtime["Env"] = current
    runtime["Labels"] = {**(runtime.get("Labels") or {}), **labels}
    for field_name, value in (runtime_fields or {}).items():
        if value is None:
            runtime.pop(field_name, None)
        elif field_name == "ExposedPorts":
            runtime[field_name] = {**(runtime.get(field_name) or {}), **value}
        else:
            runtime[field_name] = value
    created = rfc3339(epoch)
    history = list(data.get("history") or [])
    history += [{"created": created, "created_by": layer.created_by, "comment": "sparkimg"} for layer in layers]
    data.update({
        "config": runtime,
        "created": created,
        "history": history,
        "rootfs": {"type": "layers", "diff_ids": [*base.diff_ids, *(layer.diff_id for layer in layers)]},
    })
    return encode(data)


_VARIABLE = re.compile(r"\\\$|\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::(?P<op>[-+])(?P<word>[^}]*))?\}"
                       r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")


def expand(value: str, env: Mapping[str, str]) -> str:
    """``$NAME``, ``${NAME}``, ``${NAME:-word}`` and ``${NAME:+word}`` in a spec env value, from
    the env set before it (the base's, then the spec's in name order), as a Dockerfile's
    ``ENV`` expands them; ``\\$`` is a literal ``$``; an unset name expands to nothing."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "\\$":
            return "$"
        name = match.group("braced") or match.group("plain")
        found = env.get(name, "")
        if match.group("op") == "-":
            return found or match.group("word")
        if match.group("op") == "+":
            return match.group("word") if found else ""
        return found

    return _VARIABLE.sub(one, value)


def manifest(base: BaseImage, config_bytes: bytes, layers: Sequence[Layer],
             annotations: Mapping[str, str] | None = None) -> bytes:
    """The image manifest: the base's family and layer descriptors verbatim, then the new layers."""
    media_type = base.media_type
    config_type, _ = FAMILIES[media_type]
    document: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": media_type,
        "config": Descriptor(config_type, sha256_prefixed(config_bytes), len(config_bytes)).to_json(),
        # The base's descriptors as its manifest has them (annotations, urls and all), after a check.
        "layers": [*base.raw_layers, *(layer.descriptor.to_json() for layer in layers)],
    }
    if annotations and media_type == OCI_MANIFEST:
        document["annotations"] = dict(annotations)
    return encode(document)


def layer_media_type(base: BaseImage) -> str:
    return FAMILIES[base.media_type][1]


def is_digest(text: str) -> bool:
    return bool(_DIGEST.match(text))


# -- a manifest whose new layers were compressed for the trip (sparkimg push --compression) --

UNCOMPRESSED_SIZE = "dev.sparkimg.uncompressed.size"  # on a compressed descriptor: the tar's size
COMPRESSOR = "dev.sparkimg.compressor"  # on a compressed descriptor: what compressed it, and how


def compressed_manifest(manifest: bytes, blobs: Mapping[int, tuple[Descriptor, str]]) -> bytes:
    """The built ``manifest`` with layer ``i`` replaced by its compressed blob ``blobs[i]``
    (descriptor, compressor identity). Each replaced descriptor keeps the tar's size as an
    annotation, so that ``built_manifest`` can give back the exact bytes that were signed."""
    document = _object(manifest, "image manifest")
    layers = list(document.get("layers") or [])
    for index, (descriptor, identity) in blobs.items():
        layers[index] = {**descriptor.to_json(), "annotations": {
            UNCOMPRESSED_SIZE: str(Descriptor.from_json(layers[index], f"layers[{index}]").size),
            COMPRESSOR: identity}}
    return encode({**document, "layers": layers})


def built_manifest(manifest: bytes, diff_ids: Sequence[str]) -> bytes | None:
    """The manifest the build wrote, from one ``compressed_manifest`` made of it: each annotated
    layer back to its tar (the family's uncompressed type, its diff_id, the annotated size).
    None when ``manifest`` is no such thing. A node that gets the signed manifest digest back
    from this knows the served manifest differs from the signed one only in how its layers are
    compressed; the engine checks each decompressed layer against the config's diff_ids."""
    try:
        document = _object(manifest, "image manifest")
    except FetchError:
        return None
    layers, family = document.get("layers"), document.get("mediaType") or OCI_MANIFEST
    if not isinstance(family, str) or family not in FAMILIES or not isinstance(layers, list) \
            or len(layers) != len(diff_ids):
        return None
    restored, changed = [], False
    for layer, diff_id in zip(layers, diff_ids, strict=True):
        notes = layer.get("annotations") if isinstance(layer, dict) else None
        size = notes.get(UNCOMPRESSED_SIZE) if isinstance(notes, dict) else None
        if size is None:
            restored.append(layer)
            continue
        if not isinstance(size, str) or not size.isascii() or not size.isdigit() or len(size) > 20:
            return None
        restored.append({"mediaType": FAMILIES[family][1], "digest": diff_id, "size": int(size)})
        changed = True
    return encode({**document, "layers": restored}) if changed else None


def docker_archive_manifest(images: Sequence[tuple[str, Sequence[str], Sequence[str]]]) -> bytes:
    """``manifest.json`` of a ``docker load`` archive whose blobs sit at ``blobs/sha256/HEX``:
    one entry per image, each (its config digest, its repo tags, its layer digests)."""
    return encode_list([{
        "Config": blob_path(config_digest),
        "RepoTags": list(repo_tags),
        "Layers": [blob_path(d) for d in layer_digests],
    } for config_digest, repo_tags, layer_digests in images])


def encode_list(items: list[dict[str, Any]]) -> bytes:
    return json.dumps(items, sort_keys=True, separators=(",", ":")).encode()


def blob_path(digest: str) -> str:
    return "blobs/sha256/" + digest.split(":", 1)[1]


def _object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        data = loads(raw)
    except ValueError as exc:
        raise FetchError(f"{what}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise FetchError(f"{what}: not a JSON object")
    return data


IMAGE_RECORD = "sparkimg-image/1"


@dataclass(frozen=True)
class ImageRecord:
    """What an assembly wrote into the store: the digests that name the image everywhere (the
    config digest is the image ID on Docker's classic store, the manifest digest on a registry
    and on the containerd store) and the layers sparkimg added on top of the base's."""

    manifest_digest: str
    config_digest: str
    media_type: str
    base_manifest: str
    layers: tuple[Layer, ...]
    compressor: str
    tar_format: str

    def to_json(self) -> dict[str, Any]:
        return {"schema": IMAGE_RECORD, "manifest": self.manifest_digest, "config": self.config_digest,
                "mediaType": self.media_type, "baseManifest": self.base_manifest,
                "layers": [layer.to_json() for layer in self.layers], "compressor": self.compressor,
                "tarFormat": self.tar_format}

    @classmethod
    def from_json(cls, data: Any, where: str) -> ImageRecord:
        if not isinstance(data, dict) or data.get("schema") != IMAGE_RECORD:
            raise FetchError(f"{where}: not a {IMAGE_RECORD} record")
        fields = ("manifest", "config", "mediaType", "baseManifest", "compressor", "tarFormat")
        if not all(isinstance(data.get(k), str) for k in fields) or not isinstance(data.get("layers"), list):
            raise FetchError(f"{where}: needs {', '.join(fields)} and layers")
        for key in ("manifest", "config", "baseManifest"):
            if not _DIGEST.match(data[key]):
                raise FetchError(f"{where}.{key}: not a sha256 digest")
        layers = tuple(Layer.from_json(d, f"{where}.layers[{i}]") for i, d in enumerate(data["layers"]))
        return cls(data["manifest"], data["config"], data["mediaType"], data["baseManifest"], layers,
                   data["compressor"], data["tarFormat"])


# -- attestations (the receipt, the SBOM) as OCI artifacts that refer to their image ---------

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"
RECEIPT_ARTIFACT = "application/vnd.sparkimg.receipt.v1+json"
SBOM_ARTIFACT = "application/vnd.sparkimg.sbom.v1+json"
DSSE_ENVELOPE = "application/vnd.dsse.envelope.v1+json"
ATTESTATIONS = {RECEIPT_ARTIFACT: "receipt", SBOM_ARTIFACT: "SBOM"}


def receipt_artifact(subject: Descriptor, envelope: bytes, artifact_type: str = RECEIPT_ARTIFACT) -> bytes:
    """An OCI artifact manifest whose one layer is a DSSE envelope (the receipt, or with
    ``SBOM_ARTIFACT`` the SBOM) and whose ``subject`` is the image manifest it speaks of (OCI
    image spec 1.1, "Guidelines for artifact usage"): a registry's referrers API lists it under
    the image."""
    return encode({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": Descriptor(OCI_EMPTY, sha256_prefixed(EMPTY), len(EMPTY)).to_json(),
        "layers": [Descriptor(DSSE_ENVELOPE, sha256_prefixed(envelope), len(envelope)).to_json()],
        "subject": subject.to_json(),
    })


def fallback_tag(digest: str) -> str:
    """The tag under which a registry without the referrers API keeps an image's referrers."""
    return digest.replace(":", "-")


def referrers_index(existing: bytes | None, artifact: bytes, artifact_type: str = RECEIPT_ARTIFACT) -> bytes:
    """The referrers index (``sha256-HEX`` fallback tag) with ``artifact`` added once; entries of
    other tools are kept as they were."""
    manifests: list[dict[str, Any]] = []
    if existing:
        found = _object(existing, "referrers index").get("manifests")
        manifests = [m for m in found if isinstance(m, dict)] if isinstance(found, list) else []
    entry = {**Descriptor(OCI_MANIFEST, sha256_prefixed(artifact), len(artifact)).to_json(),
             "artifactType": artifact_type}
    if not any(m.get("digest") == entry["digest"] for m in manifests):
        manifests.append(entry)
    return encode({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests})


def receipt_referrers(index: bytes, artifact_type: str = RECEIPT_ARTIFACT) -> list[str]:
    """The digests of the sparkimg receipts (or SBOMs) a referrers index lists, oldest first."""
    found = _object(index, "referrers index").get("manifests")
    if not isinstance(found, list):
        return []
    return [str(m["digest"]) for m in found if isinstance(m, dict) and m.get("artifactType") == artifact_type
            and isinstance(m.get("digest"), str) and _DIGEST.match(m["digest"])]


# -- one tag for several platforms: an image index ---------------------------------------

DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"


def platform_of(platform: str) -> dict[str, str]:
    """An index descriptor's ``platform`` for ``linux/arm64``: ``{"architecture": "arm64", "os": "linux"}``."""
    os_name, _, architecture = platform.partition("/")
    return {"architecture": architecture, "os": os_name}


def platform_index(images: Sequence[tuple[Descriptor, str]]) -> tuple[bytes, str]:
    """The index of one image manifest per platform (``images``: each manifest's descriptor and
    its platform, ``linux/arm64``), and its media type: an OCI image index, or for Docker v2
    manifests Docker's equivalent, the manifest list (as ``docker buildx`` writes for them)."""
    media_type = DOCKER_LIST if all(d.media_type == DOCKER_MANIFEST for d, _ in images) else OCI_INDEX
    manifests = [{**d.to_json(), "platform": platform_of(platform)} for d, platform in images]
    return encode({"schemaVersion": 2, "mediaType": media_type, "manifests": manifests}), media_type


def chosen_manifest(index: bytes, platform: str, where: str) -> Descriptor:
    """The descriptor of ``platform``'s image in an image index (or manifest list); none is a
    ``ResolveError`` naming the platforms it holds."""
    manifests = _object(index, where).get("manifests")
    listed = [m for m in manifests if isinstance(m, dict)] if isinstance(manifests, list) else []
    want = platform_of(platform)
    for entry in listed:
        found = entry.get("platform") or {}
        if isinstance(found, dict) and found.get("os") == want["os"] and found.get("architecture") == want[
                "architecture"] and not found.get("variant"):
            return Descriptor.from_json(entry, where)
    held = sorted("/".join(str((m.get("platform") or {}).get(k, "?")) for k in ("os", "architecture")) for m in listed)
    raise FetchError(f"{where}: no image for {platform}; the index holds {', '.join(held) or 'none'}",
                     hint="pass --platform with one of those, or push an image for this platform")


# -- an image archive: an OCI image layout with docker's manifest.json beside it ----------

OCI_LAYOUT = encode({"imageLayoutVersion": "1.0.0"})
REF_NAME = "org.opencontainers.image.ref.name"
CONTAINERD_NAME = "io.containerd.image.name"
RECEIPT_ANNOTATION = "dev.sparkimg.receipt"  # on the image's index entry: the receipt artifact's digest
SBOM_ANNOTATION = "dev.sparkimg.sbom"  # and the SBOM artifact's, when the archive carries one


MAX_LAYOUT_IMAGES = 8  # one per platform: an archive sparkimg writes holds one or two


def layout_index(images: Sequence[LayoutEntry]) -> bytes:
    """``index.json`` of an archive holding ``images``: one (so ``podman load`` and skopeo need no
    choice), or one per platform (``save --with``). Each entry names its image (REPO:TAG), the
    digest of its receipt artifact (whose ``subject`` is that image's manifest) and of its SBOM
    artifact, and records its platform (``linux/arm64``) in its descriptor."""
    return encode({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [image.to_json() for image in images]})


@dataclass(frozen=True)
class LayoutEntry:
    """An image an archive's ``index.json`` lists: its manifest, name, receipt artifact, SBOM
    artifact (None: the archive carries none) and platform (None: not recorded)."""

    manifest: Descriptor
    name: str
    receipt: str
    sbom: str | None = None
    platform: str | None = None

    def to_json(self) -> dict[str, Any]:
        tag = self.name.rpartition(":")[2] if ":" in self.name.rsplit("/", 1)[-1] else "latest"
        notes = {CONTAINERD_NAME: self.name, REF_NAME: tag, RECEIPT_ANNOTATION: self.receipt}
        if self.sbom is not None:
            notes[SBOM_ANNOTATION] = self.sbom
        entry = {**self.manifest.to_json(), "annotations": notes}
        if self.platform is not None:
            entry["platform"] = platform_of(self.platform)
        return entry

    @classmethod
    def parse_all(cls, index: bytes) -> list[LayoutEntry]:
        """Every image ``index.json`` lists; several only when each names a platform of its own."""
        found = _object(index, "index.json").get("manifests")
        if not isinstance(found, list) or not 1 <= len(found) <= MAX_LAYOUT_IMAGES:
            raise FetchError(f"index.json: an archive sparkimg reads lists 1 to {MAX_LAYOUT_IMAGES} images "
                             "(one per platform)")
        entries = [cls._entry(item, f"index.json manifests[{number}]") for number, item in enumerate(found)]
        platforms = [entry.platform for entry in entries]
        if len(entries) > 1 and (None in platforms or len(set(platforms)) != len(platforms)):
            raise FetchError("index.json: an archive with several images must give each its own platform")
        return entries

    @classmethod
    def parse(cls, index: bytes, platform: str | None = None) -> LayoutEntry:
        """The archive's one image, or of several (``save --with``) ``platform``'s; a ``FetchError``
        naming the platforms it holds when none is."""
        entries = cls.parse_all(index)
        if len(entries) == 1:
            return entries[0]
        chosen = [entry for entry in entries if entry.platform == platform]
        if not chosen:
            held = ", ".join(str(entry.platform) for entry in entries)
            raise FetchError(f"index.json: no image for {platform or 'no platform'}; the archive holds {held}",
                             hint="pass --platform with one of those")
        return chosen[0]

    @classmethod
    def _entry(cls, item: Any, where: str) -> LayoutEntry:
        if not isinstance(item, dict):
            raise FetchError(f"{where}: not a JSON object")
        manifest = Descriptor.from_json(item, where)
        if manifest.media_type not in FAMILIES:
            raise FetchError(f"{where}: {manifest.media_type!r} is not an image manifest")
        notes = item.get("annotations")
        notes = notes if isinstance(notes, dict) else {}
        name, receipt = notes.get(CONTAINERD_NAME), notes.get(RECEIPT_ANNOTATION)
        if not isinstance(receipt, str) or not _DIGEST.match(receipt):
            raise FetchError(f"{where}: no {RECEIPT_ANNOTATION} annotation: the archive carries no receipt",
                             hint="write the archive with `sparkimg save`, which puts the receipt in it")
        sbom = notes.get(SBOM_ANNOTATION)
        if sbom is not None and not (isinstance(sbom, str) and _DIGEST.match(sbom)):
            raise FetchError(f"{where}: the {SBOM_ANNOTATION} annotation is not a sha256 digest")
        found = item.get("platform")
        platform = (f"{found.get('os')}/{found.get('architecture')}" if isinstance(found, dict)
                    and isinstance(found.get("os"), str) and isinstance(found.get("architecture"), str) else None)
        return cls(manifest, name if isinstance(name, str) else "", receipt, sbom, platform)


RECEIPT_MAX = 16 << 20  # bytes of a DSSE receipt (a few KiB) or SBOM (under 1 MiB for a serving image)


def receipt_layer(artifact: bytes, subject: str, artifact_type: str = RECEIPT_ARTIFACT) -> Descriptor:
    """The DSSE envelope's descriptor in a receipt (or SBOM) artifact whose ``subject`` must be
    ``subject``."""
    what = f"{ATTESTATIONS.get(artifact_type, 'attestation')} artifact"
    document = _object(artifact, what)
    layers = document.get("layers")
    if document.get("artifactType") != artifact_type or not isinstance(layers, list) or len(layers) != 1:
        raise FetchError(f"{what}: not a sparkimg {what}")
    if Descriptor.from_json(document.get("subject"), f"{what} subject").digest != subject:
        raise FetchError(f"{what}: its subject is not the image manifest {subject}")
    layer = Descriptor.from_json(layers[0], f"{what} layer")
    if layer.size > RECEIPT_MAX:
        raise FetchError(f"{what}: the envelope is {layer.size} bytes; one is never that large")
    return layer


def docker_archive_layers(manifest_json: bytes) -> list[tuple[str, list[str], list[str]]]:
    """A ``docker load`` archive's entries: each (its config path, its repo tags, its layer paths)."""
    try:
        found = loads(manifest_json)
    except ValueError as exc:
        raise FetchError(f"manifest.json: not JSON ({exc})") from None
    if not isinstance(found, list) or not 1 <= len(found) <= MAX_LAYOUT_IMAGES:
        raise FetchError(f"manifest.json: an archive sparkimg reads holds 1 to {MAX_LAYOUT_IMAGES} images")
    entries = []
    for entry in found:
        if not isinstance(entry, dict) or not isinstance(entry.get("Config"), str) \
                or not isinstance(entry.get("Layers"), list):
            raise FetchError("manifest.json: an entry without a Config path and a Layers list")
        tags = entry.get("RepoTags") or []
        entries.append((entry["Config"], [str(t) for t in tags], [str(p) for p in entry["Layers"]]))
    return entries
