"""The receipt's payload: an in-toto Statement v1 whose predicate is SLSA provenance v1.

``statement`` builds it from a finished build; ``dependencies`` lists every pinned input
as a SLSA ResourceDescriptor from the spec and lock alone (so a recipe that names a spec
can be compared with a receipt in the same terms); ``facts`` flattens a statement into
the dotted fields that recipes, ``verify-receipt`` and ``show-receipt`` speak of.
docs/receipt.md is the reference for every field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkimg import __version__
from sparkimg._internal.times import rfc3339
from sparkimg.formats.canonical import hex_of
from sparkimg.formats.lockfile import GitPin, PypiPin
from sparkimg.formats.oci import ImageRecord
from sparkimg.formats.record import LayerRecord
from sparkimg.formats.statement import Descriptor, RunMetadata, Statement, image_subjects
from sparkimg.lock.resolve import Lock
from sparkimg.spec import CompileLayer, Spec


def dependencies(spec: Spec, lock: Lock, blobs: Mapping[str, str] | None = None,
                 base_nvcc: Mapping[str, str] | None = None) -> tuple[Descriptor, ...]:
    """Every resolved input of the build, each with its digests (ResourceDescriptors).

    ``blobs`` maps source names to their store entries, recorded so ``--rehash`` can re-read them.
    ``base_nvcc`` is nvcc as the base answered for ``toolchain: cuda: base`` (``basecuda``)."""
    blobs = blobs or {}
    base = lock.base
    deps = [Descriptor(
        "base", f"oci://{base.repository}@{base.manifest_digest}", {"sha256": hex_of(base.manifest_digest)},
        media_type=base.media_type,
        annotations={"reference": base.reference, "config_digest": base.config_digest,
                     "index_digest": base.index_digest, "platform": base.platform},
        nulls=() if base.media_type else ("mediaType",))]
    for name, entry in sorted(lock.sources.items()):
        annotations: dict[str, Any] = {"kind": entry.kind}
        download = None
        if isinstance(entry, GitPin):
            uri, digest = f"git+{entry.url}@{entry.commit}", {"gitCommit": entry.commit, "gitTree": entry.tree}
            annotations["ref"] = entry.ref
        elif isinstance(entry, PypiPin):
            uri, digest = f"pkg:pypi/{entry.package}@{entry.version}", {"sha256": entry.sha256}
            download = entry.url
            annotations.update({"filename": entry.filename, "version": entry.version})
            if entry.dist != "wheel":
                annotations["dist"] = entry.dist
        else:
            uri, digest = f"file:{entry.path}", {"sha256": entry.sha256}
            annotations["files"] = len(entry.files)
        if name in blobs:
            annotations["store_blob"] = blobs[name]
        deps.append(Descriptor(f"source:{name}", uri, digest, download, annotations=annotations))
    for set_name, patch_set in sorted(lock.patches.items()):
        for item in patch_set.files:
            deps.append(Descriptor(
                f"patch:{set_name}/{item.file}", f"file:{patch_set.dir}/{item.file}",
                {"sha256": item.sha256, "md5": item.md5},
                annotations={"set": set_name, "mode": patch_set.mode, "mount": item.mount, "size": item.size,
                             "store_blob": item.sha256}))
    for written, sha256 in sorted(lock.source_patches.items()):
        layers = sorted(layer.name for layer in spec.layers
                        if isinstance(layer, CompileLayer) and written in layer.source_patches)
        deps.append(Descriptor(f"source-patch:{written}", f"file:{written}", {"sha256": sha256},
                               annotations={"layers": layers}))
    toolchain = lock.toolchain
    if toolchain.cuda == "wheels":
        # The toolkit tree, named by its identity: a function of every wheel's bytes (each is a source:NAME above).
        deps.append(Descriptor("toolchain", f"sparkimg-toolkit:{toolchain.toolkit}", {"sha256": str(toolchain.toolkit)},
                               annotations=toolchain.to_json()))
    elif toolchain.nvcc_sha256:
        deps.append(Descriptor("toolchain", f"file:{toolchain.path}/bin/nvcc", {"sha256": toolchain.nvcc_sha256},
                               annotations=toolchain.to_json()))
    elif base_nvcc:
        # nvcc comes from the base image and was asked there: the dependency is nvcc itself.
        deps.append(Descriptor("toolchain", f"file:{base_nvcc['resolved']}", {"sha256": base_nvcc["nvcc_sha256"]},
                               annotations={**toolchain.to_json(), **base_nvcc,
                                            "base_config_digest": base.config_digest}))
    else:
        # nvcc comes from the base image: its identity is the base image's config digest.
        deps.append(Descriptor("toolchain", digest={"sha256": hex_of(base.config_digest)},
                               annotations=toolchain.to_json()))
    deps.append(Descriptor("lock", f"file:{lock.path.name}", {"sha256": hex_of(lock.digest)}))
    return tuple(deps)


def statement(
    spec: Spec,
    lock: Lock,
    *,
    image_ref: str,
    image_id: str,
    image_key: str,
    records: Mapping[str, LayerRecord],
    layer_keys: Mapping[str, str],
    blobs: Mapping[str, str],
    engine: Mapping[str, str | None],
    started: float,
    finished: float,
    record_host: bool = False,
    oci: ImageRecord | None = None,
    check: Mapping[str, Any] | None = None,
    base_nvcc: Mapping[str, str] | None = None,
) -> Statement:
    """The in-toto statement for one built image: its subjects are the image config (the image ID
    on docker's classic store) and, where sparkimg wrote the image, its manifest."""
    internal: dict[str, Any] = {
        "platform": lock.platform,
        "cuda_architectures": [a.text for a in spec.cuda_architectures],
        "source_date_epoch": lock.source_date_epoch,
        "image_key": image_key,
        "layer_keys": layer_keys,
        "bounds": {name: dict(record.budget) for name, record in records.items()},
        "engine": engine,
        "sparkimg": __version__,
    }
    subjects = image_subjects(image_ref, image_id, oci)
    if oci is not None:
        internal["assembly"] = {
            "writer": "sparkimg", "tar": oci.tar_format, "compressor": oci.compressor,
            "base_manifest": oci.base_manifest,
            "layers": [{"created_by": layer.created_by, "diff_id": layer.diff_id,
                        "digest": layer.descriptor.digest, "size": layer.descriptor.size} for layer in oci.layers],
        }
    if check is not None:
        internal["check"] = dict(check)
    if record_host:
        import socket

        internal["host"] = socket.gethostname()
    byproducts: list[Descriptor] = []
    for name, record in records.items():
        for output in record.outputs:
            byproducts.append(Descriptor(
                f"wheel:{name}/{output.filename}", digest={"sha256": output.sha256},
                annotations={"layer": name, "key": record.key, "size": output.size, "store_blob": output.sha256}))
        annotations = {"key": record.key, "metrics": record.metrics.to_json(),
                       "audit": [dict(a) for a in record.audit], "finished": record.finished}
        if record.compiler_cache:  # hits, misses and the compile time saved by the layer's object cache
            annotations["compiler_cache"] = dict(record.compiler_cache)
        byproducts.append(Descriptor(f"layer:{name}", annotations=annotations))
    run = spec.run.to_json()
    return Statement(
        subjects=tuple(subjects),
        external={"spec": {"name": spec.name, "path": spec.path.name, "image": spec.image,
                           "digest": {"sha256": hex_of(spec.digest)}},
                  **({"run": run} if run else {})},
        internal=internal,
        dependencies=dependencies(spec, lock, blobs, base_nvcc),
        builder_version={"sparkimg": __version__},
        metadata=RunMetadata(_invocation_id(), rfc3339(started), rfc3339(finished)),
        byproducts=tuple(byproducts),
    )


def _invocation_id() -> str:
    import os

    # A random (version 4) UUID from os.urandom, as uuid.uuid4 makes it; the uuid module costs a
    # patch-only build several milliseconds to import.
    raw = bytearray(os.urandom(16))
    raw[6], raw[8] = (raw[6] & 0x0F) | 0x40, (raw[8] & 0x3F) | 0x80
    text = raw.hex()
    return f"urn:uuid:{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
