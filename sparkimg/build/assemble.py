"""Image assembly without a Dockerfile: sparkimg writes the image as OCI data in its store.

The base's manifest, config and layer descriptors are kept verbatim. On top come one layer
per spec layer (a compile layer's wheels, or one PyPI wheel), in spec order, then one layer
per baked patch set: least- to most-often changing, so a patch change rewrites one small
layer. The config is the base's with the spec's env and labels, and ``created`` and history
at the lock's SOURCE_DATE_EPOCH. Each new layer is cached by its inputs, so an unchanged
layer is neither rebuilt nor recompressed. ``load`` puts the result into the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildError
from ..events import Event, Phase, Reporter
from ..formats import oci
from ..formats.canonical import digest_of
from ..formats.lock import PypiPin
from ..formats.record import LayerRecord
from ..formats.scheme import BaseScheme
from ..plan import Plan
from ..spec import CompileLayer
from ..store import Store
from . import layer as layer_mod
from .dockerfile import labels

LAYER_VERSION = "sparkimg-layer/1"
LAYERS = "oci-layers"  # store records: a written layer by the key of its inputs
IMAGES = "images"  # store records: an assembled image by its image key


@dataclass(frozen=True)
class _Work:
    """One layer to write: what it is made from, and how."""

    name: str
    created_by: str
    key_inputs: dict[str, object]
    entries: Callable[[Path], list[layer_mod.Entry]]


def image_record(store: Store, key: str) -> oci.ImageRecord | None:
    """The assembly of an image key, when its manifest, config and new layers are all in the store."""
    data = store.read_record(IMAGES, key)
    if data is None:
        return None
    record = oci.ImageRecord.from_json(data, f"{store.record_path(IMAGES, key)}")
    blobs = [record.manifest_digest, record.config_digest, *(layer.descriptor.digest for layer in record.layers)]
    return record if all(store.has(_hex(d)) for d in blobs) else None


def assemble(plan: Plan, records: dict[str, LayerRecord], store: Store, scheme_of: Callable[[], BaseScheme],
             base: oci.BaseImage, report: Reporter, *, cache: bool = True) -> oci.ImageRecord:
    """Write the image's new layers, config and manifest into the store; return its record.
    ``scheme_of`` asks the base's interpreter for its install scheme (only when a layer installs
    wheels); ``cache=False`` writes every layer again (``build --check``)."""
    epoch = plan.lock.source_date_epoch
    media_type = oci.layer_media_type(base)
    written: list[oci.Layer] = []
    work_root = store.temp_dir("assemble.")
    try:
        for number, work in enumerate(_works(plan, records, store, scheme_of)):
            key = digest_of({"v": LAYER_VERSION, "tar": layer_mod.TAR_FORMAT, "compressor": layer_mod.COMPRESSOR,
                             "epoch": epoch, "mediaType": media_type, **work.key_inputs})
            found = _cached_layer(store, key) if cache else None
            if found is None:
                folder = work_root / str(number)
                folder.mkdir()
                found = layer_mod.write_layer(work.entries(folder / "root"), epoch=epoch, media_type=media_type,
                                              created_by=work.created_by, store=store, work=folder)
                store.write_record(LAYERS, key, found.to_json())
                report(Event(Phase.ASSEMBLE, f"layer {work.name}: {found.descriptor.digest[:19]} "
                             f"({found.descriptor.size} bytes)", work.name,
                             figures={"size": found.descriptor.size}))
            else:
                report(Event(Phase.ASSEMBLE, f"layer {work.name}: cached ({found.descriptor.digest[:19]})", work.name))
            written.append(found)
    finally:
        layer_mod.clear(work_root)
    config = oci.config(base, env=plan.spec.env, labels=labels(plan), epoch=epoch, layers=written)
    manifest = oci.manifest(base, config, written)
    record = oci.ImageRecord(oci.sha256_of(manifest), oci.sha256_of(config), base.media_type,
                             plan.lock.base.manifest_digest, tuple(written), layer_mod.COMPRESSOR,
                             layer_mod.TAR_FORMAT)
    store.put_bytes(config, expected=_hex(record.config_digest), what="image config")
    store.put_bytes(manifest, expected=_hex(record.manifest_digest), what="image manifest")
    if cache:
        store.write_record(IMAGES, plan.image.key, record.to_json())
    return record


def _cached_layer(store: Store, key: str) -> oci.Layer | None:
    data = store.read_record(LAYERS, key)
    if data is None:
        return None
    found = oci.Layer.from_json(data, str(store.record_path(LAYERS, key)))
    return found if store.has(_hex(found.descriptor.digest)) else None


def _works(plan: Plan, records: dict[str, LayerRecord], store: Store,
           scheme_of: Callable[[], BaseScheme]) -> list[_Work]:
    """The new layers, in order: one per spec layer, then one per baked patch set."""
    works: list[_Work] = []
    installed: dict[str, str] = {}
    for spec_layer in plan.spec.layers:
        if isinstance(spec_layer, CompileLayer):
            wheels = [(o.filename, o.sha256) for o in records[spec_layer.name].outputs]
        else:
            source = plan.lock.sources[spec_layer.source]
            assert isinstance(source, PypiPin), "the spec checks that a wheel layer takes a pypi source"
            wheels = [(source.filename, source.sha256)]
        works.append(_wheel_work(spec_layer.name, wheels, plan.lock.base.config_digest, store, scheme_of,
                                 installed))
    for set_name, entry in sorted(plan.lock.patches.items()):
        if entry.mode != "bake":
            continue
        files = [(item.mount, item.sha256) for item in entry.files]

        def patch_entries(root: Path, files: list[tuple[str, str]] = files) -> list[layer_mod.Entry]:
            return [layer_mod.Entry(mount.lstrip("/"), "file", 0o644, source=store.blob(sha256))
                    for mount, sha256 in files]

        works.append(_Work(f"patches.{set_name}", f"sparkimg: patch set {set_name}",
                           {"patches": sorted(files)}, patch_entries))
    return works


def _wheel_work(name: str, wheels: list[tuple[str, str]], base_config: str, store: Store,
                scheme_of: Callable[[], BaseScheme], installed: dict[str, str]) -> _Work:
    from .pyscheme import QUERY, record_name
    from .wheels import installer_version, stage_wheels

    def entries(root: Path) -> list[layer_mod.Entry]:
        scheme = scheme_of()
        folder = root.parent / "wheels"
        folder.mkdir(parents=True)
        paths = []
        for filename, sha256 in wheels:
            store.export(sha256, folder / filename)
            paths.append(folder / filename)
        root.mkdir()
        staged = stage_wheels(paths, scheme, root)
        for dist, _version in staged.installed:
            if dist in installed:
                raise BuildError(f"layer {name}: installs {dist}, which layer {installed[dist]} installs already",
                                 hint="install each distribution in one layer only")
            installed[dist] = name
        roots = ["/" + r.strip("/") for r in staged.roots]

        def directory(rel: str) -> bool:
            path = "/" + rel
            return not any(r == path or r.startswith(path + "/") for r in roots)

        return layer_mod.tree_entries(staged.root, directory=directory) + layer_mod.whiteouts(staged.removed)

    return _Work(name, f"sparkimg: wheels {' '.join(f for f, _ in wheels)}",
                 {"wheels": sorted(wheels), "scheme": record_name(base_config, QUERY.read_bytes()),
                  "installer": installer_version()}, entries)


def _hex(digest: str) -> str:
    return digest.split(":", 1)[1]
