"""Put an assembled image into the local engine, sending only the layers the engine lacks.

A local Docker daemon, or podman, pulls it from a one-shot loopback registry (``handoff``): it
skips each layer it has by blob digest (podman: the base's, which it pulled) and applies the
others in process. Where that fails (a remote or rootless daemon, a layer the engine lost), the
image goes in by ``docker load``.

A ``docker load`` archive is ``manifest.json``, the config and the layer blobs. Docker's
classic store skips a layer whose chain it already has without opening its file (moby
``image/tarexport/load.go``), so the archive leaves out every layer whose chain is in an image
the engine has: the base (``fetch`` pulled it) and the spec's previous image. A patch change
sends one small layer and the config. Should the engine have lost a layer meanwhile, the load
is tried once more with every new layer.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkimg._internal.fs.verified import VerifiedReader
from sparkimg.engine.protocol import Engine, ImageInfo
from sparkimg.errors import BuildError, EngineError
from sparkimg.events import Event, Kind, Phase, Reporter
from sparkimg.formats import oci
from sparkimg.formats.canonical import hex_of
from sparkimg.store.content import Store


@dataclass(frozen=True)
class Loaded:
    image_id: str  # what the engine calls it: the config digest (classic store) or the manifest digest
    sent: int  # layers sent


def chain_ids(diff_ids: Sequence[str]) -> list[str]:
    """The OCI ChainID of each prefix of ``diff_ids``: how the engine names a stack of layers."""
    chains: list[str] = []
    for diff_id in diff_ids:
        if not chains:
            chains.append(diff_id)
        else:
            chains.append("sha256:" + hashlib.sha256(f"{chains[-1]} {diff_id}".encode()).hexdigest())
    return chains


def load_image(engine: Engine, store: Store, record: oci.ImageRecord, base: oci.BaseImage, tag: str,
         known: Iterable[str], report: Reporter) -> Loaded:
    """Load ``record`` into the engine as ``tag``; ``known`` names images the engine may have whose
    layers need not be sent."""
    if engine.pulls_handoff:
        try:
            return _handoff(engine, store, record, base, tag, report)
        except (EngineError, OSError) as exc:
            why = exc.message if isinstance(exc, EngineError) else str(exc)
            report(Event(Phase.ASSEMBLE, f"load {tag}: the daemon did not pull from loopback ({why}); "
                         "loading an archive instead", "image", Kind.LOG))
    have: set[str] = set()
    for reference in known:
        info = engine.inspect(reference)
        if info is not None:
            have.update(chain_ids(info.layers))
    chains = chain_ids([*base.diff_ids, *(layer.diff_id for layer in record.layers)])
    base_count = len(base.diff_ids)
    if not all(chain in have for chain in chains[:base_count]):
        raise BuildError(f"{tag}: the engine lacks the base's layers", hint="run the build again: fetch pulls the base")
    needed = [i for i, chain in enumerate(chains[base_count:]) if chain not in have]
    try:
        try:
            return _load(engine, store, record, base, tag, needed, report)
        except EngineError:
            if len(needed) == len(record.layers):
                raise
            return _load(engine, store, record, base, tag, list(range(len(record.layers))), report)
    except EngineError as exc:
        raise BuildError(f"{tag}: the engine refused the image: {exc.message}",
                         hint="sparkimg loads into Docker's classic image store (overlay2), which takes the "
                         "base's layers by chain; the containerd image store and podman need the base's layer "
                         "blobs in the archive, which sparkimg does not write yet") from None


def _handoff(engine: Engine, store: Store, record: oci.ImageRecord, base: oci.BaseImage, tag: str,
             report: Reporter) -> Loaded:
    """Have the daemon pull the image from the store through a loopback registry, then give it
    ``tag`` and drop the registry's name for it."""
    from sparkimg.image import handoff

    digests = [record.config_digest, *(d.digest for d in base.layers),
               *(layer.descriptor.digest for layer in record.layers)]
    blobs = {d: store.blob(hex_of(d)) for d in digests if store.has(hex_of(d))}
    manifest = store.blob(hex_of(record.manifest_digest)).read_bytes()
    with handoff.registry(manifest, record.manifest_digest, record.media_type, record.config_digest,
                          blobs) as (reference, served):
        handoff.pull(engine, reference, served)
    try:
        engine.tag(reference, tag)
    finally:
        engine.untag(reference)
    report(Event(Phase.ASSEMBLE, f"load {tag}: {served.layers_sent} of {len(digests) - 1} layer(s) sent",
                 "image", figures={"sent": served.layers_sent, "bytes": served.bytes_sent}))
    return _checked(engine.inspect(tag), record, tag, served.layers_sent)


def _load(engine: Engine, store: Store, record: oci.ImageRecord, base: oci.BaseImage, tag: str,
          needed: list[int], report: Reporter) -> Loaded:
    layers = [d.digest for d in base.layers] + [layer.descriptor.digest for layer in record.layers]
    sent = {record.layers[i].descriptor.digest for i in needed}
    info = send(engine, store, config=store.blob(hex_of(record.config_digest)), config_digest=record.config_digest,
                layers=layers, blob=lambda digest: store.blob(hex_of(digest)) if digest in sent else None,
                repo_tags=[tag], report=report, what=tag)
    return _checked(info, record, tag, len(needed))


def _checked(info: ImageInfo | None, record: oci.ImageRecord, tag: str, sent: int) -> Loaded:
    """What the engine holds under ``tag`` after a handoff or a load, which must be ``record``: its
    ID is the config digest (classic store) or the manifest digest (containerd store)."""
    if info is None or info.id not in (record.config_digest, record.manifest_digest):
        raise BuildError(f"{tag}: the engine holds {info.id if info else 'nothing'}, not config "
                         f"{record.config_digest} / manifest {record.manifest_digest}")
    return Loaded(info.id, sent)


def send(engine: Engine, store: Store, *, config: Path, config_digest: str, layers: Sequence[str],
         blob: Callable[[str], Path | None], repo_tags: Sequence[str], report: Reporter, what: str) -> ImageInfo:
    """``docker load`` an archive of the config and the layer blobs ``blob`` gives a file for (the
    others left out: the engine must have their chains); ``repo_tags`` may be empty (the image is
    then known by its ID alone). Returns the engine's view of the image, by its ID or first tag."""
    work = store.temp_dir("load.")
    try:
        archive = work / "image.tar"
        count = 0
        with tarfile.open(archive, "w") as out:
            _add(out, "manifest.json", oci.docker_archive_manifest([(config_digest, repo_tags, layers)]))
            _add_blob(out, config, config_digest, what)
            for digest in dict.fromkeys(layers):
                found = blob(digest)
                if found is not None:
                    _add_blob(out, found, digest, what)
                    count += 1
        report(Event(Phase.ASSEMBLE, f"load {what}: {count} of {len(layers)} layer(s) sent",
                     "image", figures={"sent": count, "bytes": archive.stat().st_size}))
        engine.load(archive)
    finally:
        _remove(work)
    info = engine.inspect(repo_tags[0] if repo_tags else config_digest)
    if info is None:
        raise EngineError(f"{what}: the engine has no image after the load")
    return info


def _add(out: tarfile.TarFile, name: str, data: bytes) -> None:
    import io

    info = tarfile.TarInfo(name)
    info.size = len(data)
    out.addfile(info, io.BytesIO(data))


def _add_blob(out: tarfile.TarFile, path: Path, digest: str, what: str) -> None:
    """The file named by ``digest`` (a store blob, or an archive's, checked as it was unpacked),
    hashed again as it is copied: the engine is never handed bytes that are not their name."""
    info = out.gettarinfo(str(path), oci.blob_path(digest))
    with VerifiedReader(path, hex_of(digest), f"load {what}: blob {digest}") as reader:
        out.addfile(info, reader)


def _remove(work: Path) -> None:
    import shutil

    shutil.rmtree(work, ignore_errors=True)

