"""The receipt's payload: an in-toto Statement v1 whose predicate is SLSA provenance v1.

``statement`` builds it from a finished build; ``dependencies`` lists every pinned input
as a SLSA ResourceDescriptor from the spec and lock alone (so a recipe that names a spec
can be compared with a receipt in the same terms); ``facts`` flattens a statement into
the dotted fields that recipes, ``verify-receipt`` and ``show-receipt`` speak of.
docs/receipt.md is the reference for every field.
"""

from __future__ import annotations

import socket
import uuid
from typing import Any

from .. import __version__
from ..formats.intoto import STATEMENT_TYPE, rfc3339
from ..formats.lock import GitPin, PypiPin
from ..formats.record import LayerRecord
from ..formats.statement import BUILD_TYPE, BUILDER_ID, PREDICATE_TYPE
from ..lock import Lock
from ..spec import Spec


def _hex(digest: str) -> str:
    return digest.split(":", 1)[1] if ":" in digest else digest


def dependencies(spec: Spec, lock: Lock, blobs: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every resolved input of the build, each with its digests (ResourceDescriptors).

    ``blobs`` maps source names to their store entries, recorded so ``--rehash`` can re-read them."""
    blobs = blobs or {}
    base = lock.base
    deps: list[dict[str, Any]] = [{
        "name": "base",
        "uri": f"oci://{base.repository}@{base.manifest_digest}",
        "digest": {"sha256": _hex(base.manifest_digest)},
        "mediaType": base.media_type,
        "annotations": {"reference": base.reference, "config_digest": base.config_digest,
                        "index_digest": base.index_digest, "platform": base.platform},
    }]
    for name, entry in sorted(lock.sources.items()):
        dep: dict[str, Any] = {"name": f"source:{name}"}
        annotations: dict[str, Any] = {"kind": entry.kind}
        if isinstance(entry, GitPin):
            dep["uri"] = f"git+{entry.url}@{entry.commit}"
            dep["digest"] = {"gitCommit": entry.commit, "gitTree": entry.tree}
            annotations["ref"] = entry.ref
        elif isinstance(entry, PypiPin):
            dep["uri"] = f"pkg:pypi/{entry.package}@{entry.version}"
            dep["downloadLocation"] = entry.url
            dep["digest"] = {"sha256": entry.sha256}
            annotations.update({"filename": entry.filename, "version": entry.version})
        else:
            dep["uri"] = f"file:{entry.path}"
            dep["digest"] = {"sha256": entry.sha256}
            annotations["files"] = len(entry.files)
        if name in blobs:
            annotations["store_blob"] = blobs[name]
        dep["annotations"] = annotations
        deps.append(dep)
    for set_name, patch_set in sorted(lock.patches.items()):
        for item in patch_set.files:
            deps.append({
                "name": f"patch:{set_name}/{item.file}",
                "uri": f"file:{patch_set.dir}/{item.file}",
                "digest": {"sha256": item.sha256, "md5": item.md5},
                "annotations": {"set": set_name, "mode": patch_set.mode, "mount": item.mount,
                                "size": item.size, "store_blob": item.sha256},
            })
    toolchain = lock.toolchain
    tool: dict[str, Any] = {"name": "toolchain", "annotations": toolchain.to_json()}
    if toolchain.nvcc_sha256:
        tool["uri"] = f"file:{toolchain.path}/bin/nvcc"
        tool["digest"] = {"sha256": toolchain.nvcc_sha256}
    else:
        # nvcc comes from the base image: its identity is the base image's config digest.
        tool["digest"] = {"sha256": _hex(base.config_digest)}
    deps.append(tool)
    deps.append({"name": "lock", "uri": f"file:{lock.path.name}", "digest": {"sha256": _hex(lock.digest)}})
    return deps


def statement(
    spec: Spec,
    lock: Lock,
    *,
    image_ref: str,
    image_id: str,
    image_key: str,
    records: dict[str, LayerRecord],
    layer_keys: dict[str, str],
    blobs: dict[str, str],
    engine: dict[str, str | None],
    started: float,
    finished: float,
    record_host: bool = False,
) -> dict[str, Any]:
    """The in-toto statement for one built image."""
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
    if record_host:
        internal["host"] = socket.gethostname()
    byproducts: list[dict[str, Any]] = []
    for name, record in records.items():
        for output in record.outputs:
            byproducts.append({
                "name": f"wheel:{name}/{output.filename}",
                "digest": {"sha256": output.sha256},
                "annotations": {"layer": name, "key": record.key, "size": output.size,
                                "store_blob": output.sha256},
            })
        byproducts.append({
            "name": f"layer:{name}",
            "annotations": {"key": record.key, "metrics": record.metrics.to_json(),
                            "audit": [dict(a) for a in record.audit], "finished": record.finished},
        })
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": image_ref, "digest": {"sha256": _hex(image_id)},
                     "annotations": {"kind": "image-config"}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"spec": {"name": spec.name, "path": spec.path.name, "image": spec.image,
                                                "digest": {"sha256": _hex(spec.digest)}}},
                "internalParameters": internal,
                "resolvedDependencies": dependencies(spec, lock, blobs),
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"sparkimg": __version__}},
                "metadata": {"invocationId": f"urn:uuid:{uuid.uuid4()}", "startedOn": rfc3339(started),
                             "finishedOn": rfc3339(finished)},
                "byproducts": byproducts,
            },
        },
    }
