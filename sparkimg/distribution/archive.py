"""``sparkimg save`` and ``sparkimg load``: an image, its receipt and its SBOM as one file, for a
node no registry reaches.

The file is an OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/…``) with
Docker's ``manifest.json`` beside it, so ``docker load`` and ``podman load`` both take it. Its
blobs are sparkimg's own (the manifest the receipt names, its config and layers), and the
receipt and the SBOM travel as in a registry: each an OCI artifact whose ``subject`` is the
image manifest, its digest noted on the image's ``index.json`` entry. ``--without-base`` leaves
the base's layers out: the loading engine must have the base already (Docker's classic store
takes them by chain).

The bytes are a function of the image: members are written by the layer writer
(``build/layer.py``: sorted, pax, fixed owners and modes, mtime the image's ``created``).

``load`` reads everything first, each blob checked against its digest, and verifies the receipt
(signature, statement, recipe, and that it names this manifest and config) and the SBOM when
the file carries one (``sbom.attest.verified``) before the engine sees a byte; it then sends
only the layers the engine lacks (``build/load.py``), checks the engine's image ID and
diff_ids, and only then tags the image.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sparkimg._internal.fs.atomic import fsync_dir, naming
from sparkimg._internal.fs.tars import open_archive
from sparkimg.distribution.attached import attachments
from sparkimg.engine.protocol import Engine
from sparkimg.errors import EngineError, FetchError, LoadRefused, UsageError
from sparkimg.events import Event, Kind, Phase, Reporter, silent
from sparkimg.formats import oci
from sparkimg.formats.canonical import hex_of, sha256_prefixed
from sparkimg.formats.statement import facts
from sparkimg.signing.keys import PublicKey
from sparkimg.spec.model import split_reference
from sparkimg.store.content import Store

_BLOB = re.compile(r"^blobs/sha256/([0-9a-f]{64})$")
_FILES = ("oci-layout", "index.json", "manifest.json")
MAX_DOCUMENT = 16 << 20  # index, manifests, config, receipt: never this large
MAX_MEMBERS = 4096  # a saved image has a few dozen



@dataclass(frozen=True)
class SavedImage:
    """One image in an archive: its name, platform, manifest, config, receipt and SBOM artifacts
    and the layers the file holds of it."""

    name: str
    platform: str
    manifest_digest: str
    config_digest: str
    receipt: str  # the receipt artifact's digest
    sbom: str | None  # the SBOM artifact's digest, when the file carries one
    layers: tuple[str, ...]  # in the file
    left_out: tuple[str, ...]  # the base's, with --without-base

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "platform": self.platform, "manifest": self.manifest_digest,
                "config": self.config_digest, "receipt": self.receipt, "sbom": self.sbom, "layers": list(self.layers),
                "left_out": list(self.left_out)}


@dataclass(frozen=True)
class Saved:
    """The file ``save`` wrote: its images (one, or one per platform), size and sha256."""

    path: Path
    images: tuple[SavedImage, ...]
    size: int
    sha256: str

    @property
    def first(self) -> SavedImage:
        """The spec's image (``--with``'s follow it)."""
        return self.images[0]

    def to_json(self) -> dict[str, Any]:
        # The first image's fields at the top, as a one-image archive has always said them.
        found = {"path": str(self.path), **self.first.to_json(), "size": self.size, "sha256": f"sha256:{self.sha256}"}
        if len(self.images) > 1:
            found["platforms"] = {image.platform: image.to_json() for image in self.images}
        return found


@dataclass(frozen=True)
class ToSave:
    """An image ``save`` writes: the store's record of it, its base, its receipt and SBOM
    (DSSE envelopes) and the name ``docker load`` gives it."""

    record: oci.ImageRecord
    base: oci.BaseImage
    base_repository: str
    receipt: bytes
    sbom: bytes | None
    name: str


def layers_in_store(record: oci.ImageRecord, base: oci.BaseImage, base_repository: str, store: Store,
                    report: Reporter = silent, *, with_base: bool = True) -> list[str]:
    """The image's layer digests, base first (unless ``with_base`` is false), each in the store: a
    base layer the store has not seen is copied from the base's registry, checked by digest."""
    from sparkimg._internal.net.registry import ImageRef, RegistryClient, client_stream

    base_layers = [d.digest for d in base.layers]
    layers = [*(base_layers if with_base else []), *(layer.descriptor.digest for layer in record.layers)]
    client: RegistryClient | None = None
    sizes = {d.digest: d.size for d in base.layers}
    for digest in layers:
        if not store.has(hex_of(digest)):  # a base layer the store has not seen: from the base's registry
            if digest not in sizes:
                raise FetchError(f"layer {digest} of the image is not in the store",
                                 hint="build the spec again: the build writes its layers into the store")
            client = client or RegistryClient()
            report(Event(Phase.FETCH, f"base layer {digest[:19]} from {base_repository}"))
            store.put_stream(client_stream(client, ImageRef.parse(base_repository), digest, sizes[digest]),
                             expected=hex_of(digest), what=f"base layer {digest}")
    return layers


def save_built(record: oci.ImageRecord, store: Store, receipt: Path, image: str, target: Path, *,
               tag: str | None = None, without_base: bool = False, report: Reporter = silent) -> Saved:
    """Save the image ``image`` the store built (``record``) as ``tag`` (default: ``image``) with
    its receipt (``receipt``, refused when it is another image's or absent: the archive carries
    one) and the SBOM beside it."""
    return save(store, [to_save(record, store, receipt, image, tag=tag, report=report)], target,
                without_base=without_base, report=report)


def to_save(record: oci.ImageRecord, store: Store, receipt: Path, image: str, *, tag: str | None = None,
            report: Reporter = silent) -> ToSave:
    """What ``save`` needs of a built image: its receipt and the SBOM beside it (``attached``), its
    base's manifest and config from the store (``sparkimg fetch`` puts them there)."""
    attached = attachments(receipt, record, image, required=True, phase=Phase.SAVE, report=report)
    assert attached.receipt is not None and attached.statement is not None
    found = facts(attached.statement)
    base_manifest = store.blob(hex_of(record.base_manifest))
    base_config = str(found.get("base.config_digest") or "")
    if not base_manifest.is_file() or not base_config.startswith("sha256:") or not store.has(hex_of(base_config)):
        raise UsageError(f"{receipt}: the store lacks the base's manifest or config", hint="run `sparkimg fetch` first")
    base = oci.BaseImage(base_manifest.read_bytes(), store.blob(hex_of(base_config)).read_bytes())
    base_repository = split_reference(str(found.get("base.reference") or ""))[0]
    return ToSave(record, base, base_repository, attached.receipt, attached.sbom, tag or image)


def save_receipted(receipt: Path, store: Store, target: Path, *, tag: str | None = None, without_base: bool = False,
                   report: Reporter = silent) -> Saved:
    """Save the image the receipt at ``receipt`` names, from the store (``save_built``)."""
    from sparkimg.image.assemble import image_record
    from sparkimg.receipts.verify import receipt_facts

    if not receipt.is_file():
        raise UsageError(f"{receipt}: no receipt there; the archive carries one",
                         hint="pass the receipt `sparkimg build` wrote, or the SPEC")
    found = receipt_facts(receipt)
    key = str(found.get("image.key") or "")
    record = image_record(store, key) if key else None
    if record is None:
        raise UsageError(f"{receipt}: the store has no image for key {key[:16] or '?'}",
                         hint="build it into this store first: `sparkimg build SPEC`, with the spec and lock the "
                         "receipt was built from")
    return save_built(record, store, receipt, str(found.get("image.reference") or ""), target, tag=tag,
                      without_base=without_base, report=report)


def save(store: Store, images: Sequence[ToSave], target: Path, *, without_base: bool = False,
         report: Reporter = silent) -> Saved:
    """Write ``images`` (one, or one per platform; each with its base's layers unless
    ``without_base``, its receipt and SBOM in artifacts whose subject is the image) to ``target``.
    ``docker load`` tags the first with its name and loads the others untagged; ``sparkimg load``
    picks one by platform."""
    from sparkimg.image.layer import Entry, write_tar

    documents: dict[str, bytes] = {}
    layers: list[str] = []
    entries: list[oci.LayoutEntry] = []
    docker: list[tuple[str, list[str], list[str]]] = []
    saved: list[SavedImage] = []
    created: list[object] = []
    for number, image in enumerate(images):
        if not image.name or "@" in image.name:
            raise UsageError(f"{target}: no name to load the image as ({image.name!r})", hint="pass --tag REPO:TAG")
        record = image.record
        manifest = store.read_checked(hex_of(record.manifest_digest), "save: the image manifest")
        config = store.read_checked(hex_of(record.config_digest), "save: the image config")
        base_layers = [d.digest for d in image.base.layers]
        mine = layers_in_store(record, image.base, image.base_repository, store, report, with_base=not without_base)
        subject = oci.Descriptor(record.media_type, record.manifest_digest, len(manifest))
        artifact = oci.receipt_artifact(subject, image.receipt)
        described = oci.receipt_artifact(subject, image.sbom, oci.SBOM_ARTIFACT) if image.sbom is not None else None
        documents.update({sha256_prefixed(b): b for b in (manifest, config, oci.EMPTY, image.receipt, artifact,
                                                          *((image.sbom, described) if described else ()))})
        found = oci.BaseImage(manifest, config).config_json  # the image's own word for its platform
        platform = f"{found.get('os', 'linux')}/{found.get('architecture', 'unknown')}"
        created.append(found["created"])
        entry = oci.LayoutEntry(subject, image.name, sha256_prefixed(artifact),
                                sha256_prefixed(described) if described is not None else None, platform)
        entries.append(entry)
        docker.append((record.config_digest, [image.name] if number == 0 else [],
                       [*base_layers, *(layer.descriptor.digest for layer in record.layers)]))
        layers.extend(mine)
        saved.append(SavedImage(image.name, platform, record.manifest_digest, record.config_digest, entry.receipt,
                                entry.sbom, tuple(dict.fromkeys(mine)), tuple(base_layers) if without_base else ()))
    files = [
        Entry("oci-layout", "file", data=oci.OCI_LAYOUT),
        Entry("index.json", "file", data=oci.layout_index(entries)),
        Entry("manifest.json", "file", data=oci.docker_archive_manifest(docker)),
        Entry("blobs", "dir", 0o755),
        Entry("blobs/sha256", "dir", 0o755),
        *(Entry(oci.blob_path(d), "file", data=b) for d, b in documents.items()),
        *(Entry(oci.blob_path(d), "file", source=store.blob(hex_of(d)), sha256=hex_of(d))
          for d in dict.fromkeys(layers)),
    ]
    # Members dated by the first image's ``created``: the file is a function of its images.
    epoch = int(datetime.fromisoformat(str(created[0])).timestamp())
    target = target.absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with naming(target):
            write_tar(files, epoch, Path(temp))
            with open(temp, "rb") as written:
                os.fsync(written.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)
    digest = _sha256(target)
    for one in saved:
        report(Event(Phase.SAVE, f"saved {one.name} ({one.platform}, {one.manifest_digest[:19]}) to {target}: "
                     f"{len(one.layers)} layer(s)" + (f", {len(one.left_out)} base layer(s) left out"
                                                       if one.left_out else ""), kind=Kind.DONE,
                     figures={"bytes": target.stat().st_size}))
    return Saved(target, tuple(saved), target.stat().st_size, digest)


@dataclass(frozen=True)
class Loaded:
    reference: str
    manifest_digest: str
    config_digest: str
    diff_ids: tuple[str, ...]
    receipt: str
    sent: int  # layers sent to the engine
    checks: tuple[str, ...]
    sbom: str | None = None  # the SBOM artifact that verified, when the file carries one

    def to_json(self) -> dict[str, Any]:
        return {"reference": self.reference, "manifest": self.manifest_digest, "config": self.config_digest,
                "diff_ids": list(self.diff_ids), "receipt": self.receipt, "sbom": self.sbom,
                "sent_layers": self.sent, "checks": list(self.checks)}


def load_archive(path: Path, key: PublicKey, engine: Engine, store: Store, *, recipe: Path | None = None,
                 tag: str | None = None, receipt_out: Path | None = None, platform: str | None = None,
                 report: Reporter = silent) -> Loaded:
    """Verify the receipt in the archive at ``path``, then load the image and tag it (``tag``, else
    the name the archive gives): its image for ``platform`` (default: this machine's), which an
    image of another platform is refused for."""
    work = store.temp_dir("archive.")
    try:
        return _load(path, key, engine, store, work, recipe=recipe, tag=tag, receipt_out=receipt_out,
                     platform=platform, report=report)
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def _load(path: Path, key: PublicKey, engine: Engine, store: Store, work: Path, *, recipe: Path | None,
          tag: str | None, receipt_out: Path | None, platform: str | None, report: Reporter) -> Loaded:
    from sparkimg._internal.emulation import native, refusal

    wanted = platform or native()
    files = _unpack(path, work)
    try:
        entry = oci.LayoutEntry.parse(files["index.json"].read_bytes(), wanted)
        manifest = _blob(files, entry.manifest.digest, "the image manifest")
        envelope_descriptor = oci.receipt_layer(_blob(files, entry.receipt, "the receipt artifact"),
                                                entry.manifest.digest)
        envelope = _blob(files, envelope_descriptor.digest, "the receipt")
        image = oci.BaseImage(manifest, b"{}")
        config_digest = str((image.manifest_json.get("config") or {}).get("digest"))
        config = _blob(files, config_digest, "the image config")
        image = oci.BaseImage(manifest, config)
        layers, diff_ids = [d.digest for d in image.layers], image.diff_ids
        docker = oci.docker_archive_layers(files["manifest.json"].read_bytes())
    except FetchError as exc:
        raise LoadRefused(f"{path}: {exc.message}", hint=exc.hint) from None
    if len(layers) != len(diff_ids):
        raise LoadRefused(f"{path}: the manifest has {len(layers)} layers, the config {len(diff_ids)} diff_ids")
    held = f"{image.config_json.get('os', '?')}/{image.config_json.get('architecture', '?')}"
    if refused := refusal(held, platform, "load", "load an archive of that platform"):
        raise LoadRefused(f"{path}: {refused[0]}", hint=refused[1])
    if (oci.blob_path(config_digest), [oci.blob_path(d) for d in layers]) not in [(c, ls) for c, _, ls in docker]:
        raise LoadRefused(f"{path}: manifest.json (what `docker load` reads) is not the image the OCI index "
                          f"names ({entry.manifest.digest})")
    signed = _verified(envelope, key, recipe, work, entry.manifest.digest, config_digest, path, report)
    sbom = _verified_sbom(files, entry, envelope, key, path, report)
    # The name comes from the signed receipt (or the operator's --tag), never from the archive's own
    # index.json or manifest.json, which no signature covers.
    named = str(signed.get("image.reference") or "")
    name = tag or named
    if not name or name.startswith("-") or any(c.isspace() for c in name):
        raise UsageError(f"{path}: no usable name to tag the image as ({name!r})", hint="pass --tag REPO:TAG")
    from sparkimg.image.load import chain_ids, send

    # The layers the engine has under the name already (a previous version) need not be sent;
    # the others the archive holds are sent; one it leaves out must be in the engine already.
    previous = engine.inspect(name)
    existed = engine.inspect(config_digest) is not None  # under another name: never removed below
    have = set(chain_ids(previous.layers)) if previous is not None else set()
    if not engine.loads_by_chain:  # podman: every layer goes in the archive it loads
        have = set()
        if absent := [d for d in layers if d not in files]:
            raise LoadRefused(f"{path}: podman needs every layer in the file, and it leaves out {len(absent)} "
                              "(the base's)", hint="save without --without-base for a podman node")
    chains = chain_ids(diff_ids)
    needed = {layers[i] for i, chain in enumerate(chains) if chain not in have and layers[i] in files}
    try:
        info = send(engine, store, config=files[config_digest], config_digest=config_digest, layers=layers,
                    blob=lambda digest: files[digest] if digest in needed else None, repo_tags=[],
                    report=report, what=name)
    except EngineError as exc:
        absent = [d for d in layers if d not in files]
        raise LoadRefused(f"{path}: the engine refused the image: {exc.message}",
                          hint=("the archive leaves out the base's layers: pull the base on this node first, "
                                "or save without --without-base") if absent else None) from None
    if info.id not in (config_digest, entry.manifest.digest) or (info.layers and tuple(info.layers) != diff_ids):
        if not existed and (previous is None or previous.id != info.id):
            engine.remove_image(info.id)
        raise LoadRefused(f"{path}: the engine made {info.id} of it (layers {len(info.layers)}), not {config_digest}; "
                          "removed, nothing tagged")
    engine.tag(info.id, name)
    if receipt_out is not None:
        from sparkimg.distribution.pull import keep_envelopes

        keep_envelopes(receipt_out, envelope, sbom)
    report(Event(Phase.LOAD, f"loaded {name}: {entry.manifest.digest}, config {config_digest}, "
                 f"{len(needed)} of {len(layers)} layer(s) sent", kind=Kind.DONE))
    checks = ("signature", "statement", *(("recipe",) if recipe else ()), "subject", *(("sbom",) if sbom else ()),
              "image id", "diff_ids")
    return Loaded(name, entry.manifest.digest, config_digest, diff_ids, entry.receipt, len(needed), checks,
                  entry.sbom if sbom else None)


def _verified_sbom(files: dict[str, Path], entry: oci.LayoutEntry, receipt: bytes, key: PublicKey, path: Path,
                   report: Reporter) -> bytes | None:
    """The archive's SBOM envelope, checked against the verified ``receipt`` (``LoadRefused`` when
    it does not verify); None when the archive carries none (said when the receipt names one)."""
    from sparkimg.sbom.attest import named, receipt_statement, verified

    statement = receipt_statement(receipt, "the receipt in the archive")
    if entry.sbom is None:
        if named(statement) is not None:
            report(Event(Phase.LOAD, f"{path}: the receipt names an SBOM the archive does not carry; nothing to check",
                         kind=Kind.WARNING))
        return None
    try:
        layer = oci.receipt_layer(_blob(files, entry.sbom, "the SBOM artifact"), entry.manifest.digest,
                                  oci.SBOM_ARTIFACT)
        envelope = _blob(files, layer.digest, "the SBOM")
        verified(envelope, "the SBOM in the archive", key, statement)
    except (FetchError, UsageError) as exc:
        raise LoadRefused(f"{path}: {exc.message}", hint="nothing was loaded; check the key and where the file "
                          "came from") from None
    report(Event(Phase.LOAD, "SBOM in the archive: signature, the statement the receipt names and its subjects "
                 "verified"))
    return envelope


def _verified(envelope: bytes, key: PublicKey, recipe: Path | None, work: Path, manifest_digest: str,
              config_digest: str, path: Path, report: Reporter) -> dict[str, Any]:
    """The verified receipt's facts; ``LoadRefused`` unless it verifies and names this manifest and config."""
    from sparkimg.receipts.verify import Request, receipt_facts, verify

    receipt = work / "receipt.json"
    receipt.write_bytes(envelope)
    try:
        checked = verify(Request(receipt, key, recipe))
    except UsageError as exc:
        raise LoadRefused(f"{path}: the receipt in the archive: {exc.message}") from None
    if not checked.ok:
        raise LoadRefused(f"{path}: the receipt in the archive does not verify: {'; '.join(checked.reasons())}",
                          hint="nothing was loaded; check the key and where the file came from")
    found = receipt_facts(receipt)
    if found.get("image.manifest_digest") != manifest_digest or found.get("image.id") != config_digest:
        raise LoadRefused(f"{path}: the receipt names manifest {found.get('image.manifest_digest')} and config "
                          f"{found.get('image.id')}; the archive holds {manifest_digest}, {config_digest}",
                          hint="nothing was loaded: the archive is not the image its receipt speaks of")
    report(Event(Phase.LOAD, "receipt in the archive: signature, statement" + (", recipe" if recipe else "")
                 + " and subject verified"))
    return found


def _unpack(path: Path, work: Path) -> dict[str, Path]:
    """The archive's files into ``work``, by name (the three documents) and by digest (blobs, each
    checked against its name as it is written). Only regular files and folders at the layout's
    names are taken; a link, a device, another name, or a name twice refuses the archive."""
    found: dict[str, Path] = {}
    if not path.is_file():
        raise UsageError(f"{path}: no such archive", hint="pass the file `sparkimg save` wrote")
    budget = path.stat().st_size  # what the members may add up to: a tar holds its bytes, nothing more
    try:
        with open_archive(path, "r:") as archive:
            for count, member in enumerate(archive):
                if count >= MAX_MEMBERS:
                    raise LoadRefused(f"{path}: more than {MAX_MEMBERS} members; not an archive `sparkimg save` wrote")
                if member.sparse is not None or member.type == tarfile.GNUTYPE_SPARSE or any(
                        k.startswith("GNU.sparse") for k in member.pax_headers):
                    # A sparse member is stored as holes and extracts as zeros: a tiny file could fill the disk.
                    raise LoadRefused(f"{path}: {member.name!r} is a sparse member; `sparkimg save` writes none")
                budget -= member.size
                if budget < 0:
                    raise LoadRefused(f"{path}: its members add up to more than the file's size")
                name = member.name.removeprefix("./").rstrip("/")
                if member.isdir() and name in ("", "blobs", "blobs/sha256"):
                    continue
                match = _BLOB.match(name)
                if not member.isreg() or not (match or name in _FILES):
                    raise LoadRefused(f"{path}: unexpected member {member.name!r} in the archive",
                                      hint="load an archive `sparkimg save` wrote")
                key = f"sha256:{match.group(1)}" if match else name
                if key in found:
                    raise LoadRefused(f"{path}: {member.name} is in the archive twice")
                if not match and member.size > MAX_DOCUMENT:
                    raise LoadRefused(f"{path}: {name} is {member.size} bytes; too large")
                target = work / (match.group(1) if match else name)
                source = archive.extractfile(member)
                assert source is not None  # a regular file
                hashed = hashlib.sha256()
                with target.open("wb") as out:
                    while chunk := source.read(1 << 20):
                        hashed.update(chunk)
                        out.write(chunk)
                if match and hashed.hexdigest() != match.group(1):
                    raise LoadRefused(f"{path}: {name} does not hash to its name",
                                      hint="the file is damaged or was changed; nothing was loaded")
                found[key] = target
    except (OSError, tarfile.TarError, ValueError, RecursionError) as exc:
        raise LoadRefused(f"{path}: cannot read the archive: {exc}",
                          hint="load an archive `sparkimg save` wrote; nothing was loaded") from None
    missing = [f for f in _FILES if f not in found]
    if missing:
        raise LoadRefused(f"{path}: not an archive `sparkimg save` wrote (no {', '.join(missing)})")
    return found


def _blob(files: dict[str, Path], digest: str, what: str) -> bytes:
    found = files.get(digest)
    if found is None:
        raise FetchError(f"{what} ({digest}) is not in the archive")
    if found.stat().st_size > MAX_DOCUMENT:
        raise FetchError(f"{what} is {found.stat().st_size} bytes; too large")
    return found.read_bytes()


def _sha256(path: Path) -> str:
    from sparkimg.store.content import sha256_file

    return sha256_file(path)
