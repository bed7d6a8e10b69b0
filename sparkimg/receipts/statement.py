"""The receipt's payload: an in-toto Statement v1 whose predicate is SLSA provenance v1.

``statement`` builds it from a finished build; ``dependencies`` lists every pinned input
as a SLSA ResourceDescriptor from the spec and lock alone (so a recipe that names a spec
can be compared with a receipt in the same terms); ``facts`` flattens a statement into
the dotted fields that recipes, ``verify-receipt`` and ``show-receipt`` speak of.
docs/receipt.md is the reference for every field.
"""

from __future__ import annotations

import json
import socket
import uuid
from datetime import UTC, datetime
from typing import Any

from .. import __version__
from ..lock import Lock
from ..spec import Spec

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://sparkimg.dev/buildtypes/image/v1"
BUILDER_ID = "https://sparkimg.dev/builders/local/v1"


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hex(digest: str) -> str:
    return digest.split(":", 1)[1] if ":" in digest else digest


def dependencies(spec: Spec, lock: Lock, blobs: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every resolved input of the build, each with its digests (ResourceDescriptors).

    ``blobs`` maps source names to their store entries, recorded so ``--rehash`` can re-read them."""
    blobs = blobs or {}
    base = lock.base
    reference = base["repository"] + (f":{base['tag']}" if base.get("tag") else "")
    deps: list[dict[str, Any]] = [{
        "name": "base",
        "uri": f"oci://{base['repository']}@{base['manifest_digest']}",
        "digest": {"sha256": _hex(base["manifest_digest"])},
        "mediaType": base.get("media_type"),
        "annotations": {"reference": reference, "config_digest": base["config_digest"],
                        "index_digest": base.get("index_digest"), "platform": base.get("platform")},
    }]
    for name, entry in sorted(lock.sources.items()):
        dep: dict[str, Any] = {"name": f"source:{name}"}
        annotations: dict[str, Any] = {"kind": entry["kind"]}
        if entry["kind"] == "git":
            dep["uri"] = f"git+{entry['url']}@{entry['commit']}"
            dep["digest"] = {"gitCommit": entry["commit"], "gitTree": entry["tree"]}
            annotations["ref"] = entry["ref"]
        elif entry["kind"] == "pypi":
            dep["uri"] = f"pkg:pypi/{entry['package']}@{entry['version']}"
            dep["downloadLocation"] = entry["url"]
            dep["digest"] = {"sha256": entry["sha256"]}
            annotations.update({"filename": entry["filename"], "version": entry["version"]})
        else:
            dep["uri"] = f"file:{entry['path']}"
            dep["digest"] = {"sha256": entry["sha256"]}
            annotations["files"] = len(entry.get("files", []))
        if name in blobs:
            annotations["store_blob"] = blobs[name]
        dep["annotations"] = annotations
        deps.append(dep)
    for set_name, patch_set in sorted(lock.patches.items()):
        for item in patch_set["files"]:
            deps.append({
                "name": f"patch:{set_name}/{item['file']}",
                "uri": f"file:{patch_set['dir']}/{item['file']}",
                "digest": {"sha256": item["sha256"], "md5": item["md5"]},
                "annotations": {"set": set_name, "mode": patch_set["mode"], "mount": item["mount"],
                                "size": item["size"], "store_blob": item["sha256"]},
            })
    toolchain = dict(lock.toolchain)
    tool: dict[str, Any] = {"name": "toolchain", "annotations": toolchain}
    if toolchain.get("nvcc_sha256"):
        tool["uri"] = f"file:{toolchain['path']}/bin/nvcc"
        tool["digest"] = {"sha256": toolchain["nvcc_sha256"]}
    else:
        # nvcc comes from the base image: its identity is the base image's config digest.
        tool["digest"] = {"sha256": _hex(base["config_digest"])}
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
    records: dict[str, dict[str, Any]],
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
        "bounds": {name: record["budget"] for name, record in records.items()},
        "engine": engine,
        "sparkimg": __version__,
    }
    if record_host:
        internal["host"] = socket.gethostname()
    byproducts: list[dict[str, Any]] = []
    for name, record in records.items():
        for output in record["outputs"]:
            byproducts.append({
                "name": f"wheel:{name}/{output['filename']}",
                "digest": {"sha256": output["sha256"]},
                "annotations": {"layer": name, "key": record["key"], "size": output["size"],
                                "store_blob": output["sha256"]},
            })
        byproducts.append({
            "name": f"layer:{name}",
            "annotations": {"key": record["key"], "metrics": record["metrics"], "audit": record["audit"],
                            "finished": record.get("finished")},
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


def schema_problems(data: Any) -> list[str]:
    """Every way ``data`` is not a sparkimg receipt statement; empty when it is one."""
    if not isinstance(data, dict):
        return ["the payload is not a JSON object"]
    problems = []
    if data.get("_type") != STATEMENT_TYPE:
        problems.append(f"_type is {data.get('_type')!r}, not {STATEMENT_TYPE!r}")
    if data.get("predicateType") != PREDICATE_TYPE:
        problems.append(f"predicateType is {data.get('predicateType')!r}, not {PREDICATE_TYPE!r}")
    subject = data.get("subject")
    if not (isinstance(subject, list) and subject and all(
            isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("digest"), dict)
            and s["digest"] for s in subject)):
        problems.append("subject must be a non-empty list of {name, digest}")
    predicate = data.get("predicate")
    if not isinstance(predicate, dict):
        return [*problems, "predicate is missing"]
    definition, run = predicate.get("buildDefinition"), predicate.get("runDetails")
    if not isinstance(definition, dict):
        return [*problems, "predicate.buildDefinition is missing"]
    if definition.get("buildType") != BUILD_TYPE:
        problems.append(f"buildDefinition.buildType is {definition.get('buildType')!r}, not {BUILD_TYPE!r}")
    for field in ("externalParameters", "internalParameters"):
        if not isinstance(definition.get(field), dict):
            problems.append(f"buildDefinition.{field} must be an object")
    deps = definition.get("resolvedDependencies")
    if not (isinstance(deps, list) and all(isinstance(d, dict) and isinstance(d.get("name"), str) for d in deps)):
        problems.append("buildDefinition.resolvedDependencies must be a list of named resource descriptors")
    builder = run.get("builder") if isinstance(run, dict) else None
    if not (isinstance(builder, dict) and isinstance(builder.get("id"), str)):
        problems.append("predicate.runDetails.builder.id is missing")
    return problems


def parse_payload(payload: bytes, where: str) -> Any:
    """An envelope's payload as JSON; bad input names ``where``."""
    from .dsse import EnvelopeError

    try:
        return json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise EnvelopeError(f"{where}: the payload is not JSON") from None


def load(payload: bytes, where: str) -> dict[str, Any]:
    """A receipt statement from an envelope's payload; bad input names ``where``. Call it
    only after the signature is checked (or when the caller says it was not)."""
    from .dsse import EnvelopeError

    data = parse_payload(payload, where)
    if problems := schema_problems(data):
        raise EnvelopeError(f"{where}: not a sparkimg receipt: {'; '.join(problems)}")
    result: dict[str, Any] = data
    return result


def dependency_facts(deps: list[dict[str, Any]]) -> dict[str, Any]:
    """Dotted fields from resolved dependencies: base.*, sources.NAME.*, patches.SET/FILE.*, lock.*."""
    facts: dict[str, Any] = {}
    for dep in deps:
        name, digest, notes = dep["name"], dep.get("digest") or {}, dep.get("annotations") or {}
        if name == "base":
            facts["base.manifest_digest"] = "sha256:" + digest.get("sha256", "")
            facts["base.config_digest"] = notes.get("config_digest")
            facts["base.reference"] = notes.get("reference")
        elif name == "lock":
            facts["lock.digest"] = "sha256:" + digest.get("sha256", "")
        elif name == "toolchain":
            for key in ("cuda", "nvcc_version", "nvcc_sha256"):
                if key in notes:
                    facts[f"toolchain.{key}"] = notes[key]
        elif name.startswith("source:"):
            prefix = f"sources.{name.removeprefix('source:')}"
            for key, field in (("gitCommit", "commit"), ("gitTree", "tree"), ("sha256", "sha256")):
                if key in digest:
                    facts[f"{prefix}.{field}"] = digest[key]
            for key in ("ref", "version", "filename"):
                if key in notes:
                    facts[f"{prefix}.{key}"] = notes[key]
        elif name.startswith("patch:"):
            prefix = f"patches.{name.removeprefix('patch:')}"
            facts.update({f"{prefix}.sha256": digest.get("sha256"), f"{prefix}.md5": digest.get("md5"),
                          f"{prefix}.mount": notes.get("mount"), f"{prefix}.mode": notes.get("mode")})
    return facts


def facts(data: dict[str, Any]) -> dict[str, Any]:
    """A checked statement as dotted fields (see docs/receipt.md, "Fields verify-receipt compares")."""
    definition = data["predicate"]["buildDefinition"]
    internal = definition["internalParameters"]
    spec = definition["externalParameters"].get("spec", {})
    found: dict[str, Any] = {
        "spec.name": spec.get("name"),
        "spec.digest": "sha256:" + (spec.get("digest") or {}).get("sha256", ""),
        "platform": internal.get("platform"),
        "cuda_architectures": internal.get("cuda_architectures"),
        "image.key": internal.get("image_key"),
    }
    for subject in data["subject"]:
        kind = (subject.get("annotations") or {}).get("kind", "image-config")
        value = "sha256:" + subject["digest"].get("sha256", "")
        if kind == "image-config":
            found["image.id"], found["image.reference"] = value, subject["name"]
        elif kind == "image-manifest":
            found["image.manifest_digest"] = value
    found.update(dependency_facts(definition["resolvedDependencies"]))
    return found
