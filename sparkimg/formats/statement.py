"""The receipt statement (an in-toto Statement v1 whose predicate is SLSA provenance v1):
its type ids, its validation, and the dotted fields recipes, ``verify-receipt`` and
``show-receipt`` speak of. Pure: the statement is built in ``receipts.statement`` and
read here. docs/receipt.md is the reference for every field.
"""

from __future__ import annotations

from typing import Any

from ..errors import EnvelopeError
from .intoto import STATEMENT_TYPE, parse_payload

PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://sparkimg.dev/buildtypes/image/v1"
BUILDER_ID = "https://sparkimg.dev/builders/local/v1"


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


def load(payload: bytes, where: str) -> dict[str, Any]:
    """A receipt statement from an envelope's payload; bad input names ``where``. Call it
    only after the signature is checked (or when the caller says it was not)."""
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
