"""Image assembly without a Dockerfile: sparkimg writes the image as OCI data in its store.

The base's manifest, config and layer descriptors are kept verbatim. On top come the layers
of each spec layer (a compile layer's wheels, or one PyPI wheel), in spec order, then one layer
per baked patch set: least- to most-often changing, so a patch change rewrites one small
layer. A compile layer's wheels share one layer, except that each wheel over ``SPLIT_BYTES``
gets its own. The config is the base's with the spec's env and labels, and ``created`` and history
at the lock's SOURCE_DATE_EPOCH. A layer's own bytes are a function of its own inputs only: its
files are dated ``LAYER_EPOCH``, never the lock's epoch (which moves with every git source and,
for a spec without one, with the clock of a fresh lock: a new vLLM wheel, or a lock made again on
another node, would otherwise rewrite every layer and send the engine the whole image again).
Each new layer is cached by its inputs, so an unchanged layer is never written again. ``load``
puts the result into the engine.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from sparkimg._internal.fs.verified import rot_named
from sparkimg.compile import machines
from sparkimg.errors import BuildError, FetchError
from sparkimg.events import Event, Phase, Reporter, Steps
from sparkimg.formats import oci
from sparkimg.formats.canonical import digest_of, hex_of, sha256_prefixed
from sparkimg.formats.lockfile import PypiPin
from sparkimg.formats.record import LayerRecord
from sparkimg.formats.scheme import BaseScheme, canonical_name
from sparkimg.formats.steps import Step
from sparkimg.image import layer as layer_mod
from sparkimg.plan.keys import KEY_LABEL, ZIP_EPOCH, Plan
from sparkimg.spec import CompileLayer, kernel_label
from sparkimg.store.content import Store

LAYER_VERSION = "sparkimg-layer/2"  # 2: files dated LAYER_EPOCH, not the lock's epoch
# The date of every file in a new layer: 1980-01-01, the earliest a zip holds (a compile layer
# dates its wheels' members by its own source; the tar header adds nothing that moves).
LAYER_EPOCH = ZIP_EPOCH
# A wheel over this size gets a layer of its own (docs/reproducibility.md, "Layers sized for
# reuse"): one large wheel changing then rewrites its own layer, not its neighbours'.
SPLIT_BYTES = 64 << 20
LAYERS = "oci-layers"  # store records: a written layer by the key of its inputs
IMAGES = "images"  # store records: an assembled image by its image key
MAX_WRITERS = 4  # layers written at once, at most (bench/realsize.py)


@dataclass(frozen=True)
class _Work:
    """One layer to write: what it is made from, and how."""

    name: str
    created_by: str
    key_inputs: dict[str, object]
    entries: Callable[[Path], list[layer_mod.Entry]]  # given a work folder of its own, empty
    blobs: Mapping[str, Path] = field(default_factory=dict)  # store blobs it reads (hex -> file): named if rotten


def image_record(store: Store, key: str) -> oci.ImageRecord | None:
    """The assembly of an image key, when its manifest, config and new layers are all in the store."""
    data = store.read_record(IMAGES, key)
    if data is None:
        return None
    try:
        record = oci.ImageRecord.from_json(data, f"{store.record_path(IMAGES, key)}")
    except FetchError:
        return None  # a damaged record is no record: the image is assembled again
    blobs = [record.manifest_digest, record.config_digest, *(layer.descriptor.digest for layer in record.layers)]
    audited = all(layer.machines is not None for layer in record.layers)  # else assembled again, audited
    return record if audited and all(store.has(hex_of(d)) for d in blobs) else None


def assemble(plan: Plan, records: dict[str, LayerRecord], store: Store, scheme_of: Callable[[], BaseScheme],
             base: oci.BaseImage, report: Reporter, *, cache: bool = True, steps: Steps | None = None,
             on_layer: Callable[[int, oci.Layer], None] | None = None,
             reuse: Mapping[str, oci.Layer] | None = None) -> oci.ImageRecord:
    """Write the image's new layers, config and manifest into the store; return its record.
    ``scheme_of`` asks the base's interpreter for its install scheme (only when a layer installs
    wheels); ``cache=False`` writes every layer again (``build --check``); ``steps`` times each layer;
    ``on_layer(number, layer)`` is told of each layer as it is done (``image.feed``); with
    ``cache=False``, a layer whose key is in ``reuse`` is taken from it, not written (``image.check``:
    a key an earlier check showed to give those very bytes).

    The layers are independent work (each its own wheels, tar and blob), written ``writers()`` at a
    time: inflating, hashing and writing let go of the GIL, so a second layer's gigabytes go while
    the first's do; the image's layer order is the spec's whatever finishes first."""
    media_type = oci.layer_media_type(base)
    works = _works(plan, records, store, _once(scheme_of))
    work_root = store.temp_dir("assemble.")
    steps = steps or Steps()

    def one(number: int) -> oci.Layer:
        started = time.monotonic()
        found, written = _layer(works[number], work_root / str(number), media_type, plan.lock.platform, store,
                                report, cache=cache, reuse=reuse or {})
        if written:  # a step is a layer written: what --json's ``written`` and the steps line count
            steps.done.append(Step("assemble", round(time.monotonic() - started, 3), works[number].name))
        if on_layer is not None:
            on_layer(number, found)
        return found

    pool = ThreadPoolExecutor(max_workers=writers(len(works)), thread_name_prefix="layer")
    try:
        written = list(pool.map(one, range(len(works))))
    finally:
        pool.shutdown(cancel_futures=True)  # a failed layer: those not started never start
        layer_mod.clear(work_root)
    config = oci.config(base, env=plan.spec.env, labels=labels(plan), epoch=plan.lock.source_date_epoch,
                       layers=written, runtime_fields=plan.spec.run.config())
    manifest = oci.manifest(base, config, written)
    record = oci.ImageRecord(sha256_prefixed(manifest), sha256_prefixed(config), base.media_type,
                             plan.lock.base.manifest_digest, tuple(written), layer_mod.COMPRESSOR,
                             layer_mod.TAR_FORMAT)
    store.put_bytes(config, expected=hex_of(record.config_digest), what="image config")
    store.put_bytes(manifest, expected=hex_of(record.manifest_digest), what="image manifest")
    if cache:
        store.write_record(IMAGES, plan.image.key, record.to_json())
    return record


def writers(count: int) -> int:
    """How many layers are written at once: one per core up to ``MAX_WRITERS``, no more than there
    are layers. Each writer holds a few MiB (the read-ahead pieces), so memory does not bound it."""
    return max(1, min(count, os.cpu_count() or 1, MAX_WRITERS))


def _once(scheme_of: Callable[[], BaseScheme]) -> Callable[[], BaseScheme]:
    """``scheme_of`` asked at most once, whichever layer's writer asks first (the others wait)."""
    lock = threading.Lock()
    found: list[BaseScheme] = []

    def asked() -> BaseScheme:
        with lock:
            if not found:
                found.append(scheme_of())
            return found[0]
    return asked


def layer_keys(plan: Plan, records: dict[str, LayerRecord], store: Store, base: oci.BaseImage
               ) -> list[tuple[str, str]]:
    """The name and key of each new layer of the image, in its order (nothing is written or asked;
    a spec layer's name, ``NAME/WHEEL`` for a compile layer's large wheel, ``patches.SET``)."""
    def unasked() -> BaseScheme:
        raise AssertionError("a layer key never asks the base")

    media_type = oci.layer_media_type(base)
    return [(work.name, _key(work, media_type)) for work in _works(plan, records, store, unasked)]


def _key(work: _Work, media_type: str) -> str:
    return digest_of({"v": LAYER_VERSION, "tar": layer_mod.TAR_FORMAT, "compressor": layer_mod.COMPRESSOR,
                      "epoch": LAYER_EPOCH, "mediaType": media_type, **work.key_inputs})


def _layer(work: _Work, folder: Path, media_type: str, platform: str, store: Store, report: Reporter, *,
           cache: bool, reuse: Mapping[str, oci.Layer]) -> tuple[oci.Layer, bool]:
    """One new layer, and whether it was written now: the store's, when a layer of the same inputs
    was written before (and ``cache``), or ``reuse``'s; else written now into the store, its ELF
    files audited for ``platform``'s CPU, and recorded by the key of its inputs."""
    key = _key(work, media_type)
    found = _cached_layer(store, key) if cache else None
    if found is not None:
        report(Event(Phase.ASSEMBLE, f"layer {work.name}: cached ({found.descriptor.digest[:19]})", work.name))
        return found, False
    if not cache and key in reuse:
        report(Event(Phase.CHECK, f"check: layer {work.name}: an earlier check of the same key gave these very "
                     "bytes; not written again", work.name))
        return reuse[key], False
    folder.mkdir()
    census = machines.Census(platform)
    with rot_named(work.blobs, f"layer {work.name}"):  # a failure reading a rotten blob says so
        found = layer_mod.write_layer(work.entries(folder), epoch=LAYER_EPOCH, media_type=media_type,
                                      created_by=work.created_by, store=store, seen=census.see)
    census.check(work.name)  # before the record: a refused layer is never cached
    found = replace(found, machines=tuple(sorted(census.counts.items())))
    store.write_record(LAYERS, key, found.to_json())
    report(Event(Phase.ASSEMBLE, f"layer {work.name}: {found.descriptor.digest[:19]} ({found.descriptor.size} bytes; "
                 f"{machines.summary(census.counts)})", work.name, figures={"size": found.descriptor.size}))
    return found, True


def labels(plan: Plan) -> dict[str, str]:
    """OCI labels plus sparkimg's own: spec and lock digests, each layer's key, the prewarm kernel set."""
    spec, lock = plan.spec, plan.lock
    created = oci.rfc3339(lock.source_date_epoch)
    out = dict(spec.labels)
    out.update({
        "org.opencontainers.image.title": spec.name,
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.base.name": lock.base.reference,
        "org.opencontainers.image.base.digest": lock.base.manifest_digest,
        "dev.sparkimg.spec-digest": spec.digest,
        "dev.sparkimg.lock-digest": lock.digest,
        "dev.sparkimg.platform": lock.platform,
        "dev.sparkimg.cuda-architectures": ";".join(a.text for a in spec.cuda_architectures),
        KEY_LABEL: plan.image.key,
    })
    for layer in plan.layers[:-1]:
        out[f"dev.sparkimg.layer.{layer.name}.key"] = layer.key
    if (kernels := kernel_label.of_spec(spec, lock.toolchain.toolkit)) is not None:
        out[kernel_label.LABEL] = kernels.to_label()
    return out


def _cached_layer(store: Store, key: str) -> oci.Layer | None:
    data = store.read_record(LAYERS, key)
    if data is None:
        return None
    try:
        found = oci.Layer.from_json(data, str(store.record_path(LAYERS, key)))
    except FetchError:
        return None  # a damaged record: the layer is written again
    # A layer recorded before the CPU audit is written again (the same bytes), audited this time.
    return found if found.machines is not None and store.has(hex_of(found.descriptor.digest)) else None


def _works(plan: Plan, records: dict[str, LayerRecord], store: Store,
           scheme_of: Callable[[], BaseScheme]) -> list[_Work]:
    """The new layers, in order: one per spec layer, then one per baked patch set."""
    from sparkimg.base.schemes import QUERY, record_name

    # What the base's scheme and folder links are is a function of the base and the query.
    scheme = record_name(plan.lock.base.config_digest, QUERY.read_bytes())
    works: list[_Work] = []
    installed: dict[str, str] = {}
    for spec_layer in plan.spec.layers:
        if isinstance(spec_layer, CompileLayer):
            sized = [(o.filename, o.sha256, o.size) for o in records[spec_layer.name].outputs]
        else:
            source = plan.lock.sources[spec_layer.source]
            assert isinstance(source, PypiPin), "the spec checks that a wheel layer takes a pypi source"
            sized = [(source.filename, source.sha256, 0)]
        for filename, _, _ in sized:  # from the names, so a cached layer is checked as well
            dist = canonical_name(filename.split("-", 1)[0])
            if dist in installed:
                raise BuildError(f"layer {spec_layer.name}: installs {dist}, which layer {installed[dist]} "
                                 "installs already", hint="install each distribution in one layer only")
            installed[dist] = spec_layer.name
        groups = wheel_groups(sized)
        for wheels in groups:
            name = spec_layer.name if wheels is groups[0] else f"{spec_layer.name}/{wheels[0][0]}"
            works.append(_wheel_work(name, wheels, scheme, plan.lock.platform, store, scheme_of))
    for set_name, entry in sorted(plan.lock.patches.items()):
        if entry.mode != "bake":
            continue
        files = [(item.mount, item.sha256) for item in entry.files]

        def patch_entries(folder: Path, files: list[tuple[str, str]] = files) -> list[layer_mod.Entry]:
            found = [layer_mod.Entry(mount.lstrip("/"), "file", 0o644, source=store.blob(sha256),
                                     sha256=sha256)
                     for mount, sha256 in files]
            return _through_links(found, scheme_of())

        created_by = f"sparkimg: patch set {set_name}"
        works.append(_Work(f"patches.{set_name}", created_by,
                           {"patches": sorted(files), "scheme": scheme, "createdBy": created_by}, patch_entries))
    return works


def wheel_groups(wheels: list[tuple[str, str, int]]) -> list[list[tuple[str, str]]]:
    """One spec layer's wheels (filename, sha256, size) as image layers: the small ones together
    first, then each wheel over ``SPLIT_BYTES`` alone, in the order given."""
    small = [(name, sha256) for name, sha256, size in wheels if size <= SPLIT_BYTES]
    large = [[(name, sha256)] for name, sha256, size in wheels if size > SPLIT_BYTES]
    return ([small] if small or not large else []) + large


def _through_links(entries: list[layer_mod.Entry], scheme: BaseScheme) -> list[layer_mod.Entry]:
    """Each entry under its parent folder as the base resolves it: on a merged-/usr base a file
    for ``/lib/x`` is written at ``usr/lib/x``, since a ``lib/`` folder in a layer would hide the
    base's ``/lib -> usr/lib`` link (``docker build``'s COPY followed it as well)."""
    found = []
    for entry in entries:
        parent, _, name = entry.path.rpartition("/")
        real = scheme.resolve("/" + parent).strip("/") if parent else ""
        found.append(replace(entry, path=f"{real}/{name}" if real else name))
    return found


def _wheel_work(name: str, wheels: list[tuple[str, str]], scheme_id: str, platform: str, store: Store,
                scheme_of: Callable[[], BaseScheme]) -> _Work:
    from sparkimg.image.wheels import check_fits, install_wheels, installer_version

    def entries(folder: Path) -> list[layer_mod.Entry]:
        scheme = scheme_of()
        for filename, _ in wheels:
            check_fits(filename, scheme, platform)
        paths = []
        for filename, sha256 in wheels:
            # A link named for the wheel (installer reads the name) to the read-only blob: no copy of
            # a gigabyte wheel; the layer writer reads its members from it (image.wheels), each
            # checked against the wheel's RECORD, so rot there fails the layer, named as rot.
            (folder / filename).symlink_to(store.blob(sha256))
            paths.append(folder / filename)
        return _through_links(install_wheels(paths, scheme).entries(), scheme)

    created_by = f"sparkimg: wheels {' '.join(f for f, _ in wheels)}"
    return _Work(name, created_by, {"wheels": sorted(wheels), "scheme": scheme_id, "installer": installer_version(),
                                    "createdBy": created_by}, entries,
                 {sha256: store.blob(sha256) for _, sha256 in wheels})

