"""The receipt statement: an in-toto Statement v1 whose predicate is SLSA provenance v1.

``Statement`` is its frozen model (``from_json`` validates, ``to_json`` gives back the exact
JSON); ``facts`` flattens it into the dotted fields recipes, ``verify-receipt`` and
``show-receipt`` speak of. Pure: ``receipts.statement`` builds one from a finished build.
docs/receipt.md is the reference for every field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sparkimg.errors import EnvelopeError
from sparkimg.formats.canonical import hex_of
from sparkimg.formats.intoto import STATEMENT_TYPE, parse_payload
from sparkimg.formats.oci import ImageRecord

PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://sparkimg.dev/buildtypes/image/v1"
BUILDER_ID = "https://sparkimg.dev/builders/local/v1"
_DESCRIPTOR_KEYS = ("name", "uri", "digest", "downloadLocation", "mediaType", "annotations")


@dataclass(frozen=True)
class Descriptor:
    """A SLSA ResourceDescriptor: a resolved dependency or a byproduct. Keys the statement did
    not carry stay absent (``None``), so a statement reads back byte for byte."""

    name: str
    uri: str | None = None
    digest: Mapping[str, str] | None = None
    download_location: str | None = None
    media_type: str | None = None
    annotations: Mapping[str, Any] | None = None
    # Keys written as JSON null (e.g. a base without a media type) are kept, to round-trip.
    nulls: tuple[str, ...] = ()

    @property
    def notes(self) -> Mapping[str, Any]:
        return self.annotations or {}

    @property
    def digests(self) -> Mapping[str, str]:
        return self.digest or {}

    def to_json(self) -> dict[str, Any]:
        values = {"name": self.name, "uri": self.uri, "digest": None if self.digest is None else dict(self.digest),
                  "downloadLocation": self.download_location, "mediaType": self.media_type,
                  "annotations": None if self.annotations is None else dict(self.annotations)}
        return {k: v for k, v in values.items() if v is not None or k in self.nulls}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Descriptor:
        """A descriptor; a field of the wrong type is bad input naming ``where`` and the field."""
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            raise EnvelopeError(f"{where}: must be an object with a string 'name'")
        for key in ("uri", "downloadLocation", "mediaType"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise EnvelopeError(f"{where}.{key}: must be a string, not {type(data[key]).__name__}")
        digest, annotations = data.get("digest"), data.get("annotations")
        if digest is not None and not _digest_set(digest):
            raise EnvelopeError(f"{where}.digest: must map algorithm names to hex strings")
        if annotations is not None and not isinstance(annotations, dict):
            raise EnvelopeError(f"{where}.annotations: must be an object")
        return cls(data["name"], data.get("uri"), digest, data.get("downloadLocation"), data.get("mediaType"),
                   annotations, tuple(k for k in _DESCRIPTOR_KEYS if k in data and data[k] is None))


@dataclass(frozen=True)
class Subject:
    """What the statement is about: the image, by config digest (and by manifest digest once pushed)."""

    name: str
    digest: Mapping[str, str]
    annotations: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return str(self.annotations.get("kind", "image-config"))

    @property
    def sha256(self) -> str:
        return "sha256:" + self.digest.get("sha256", "")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "digest": dict(self.digest)}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


@dataclass(frozen=True)
class RunMetadata:
    invocation_id: str | None = None
    started_on: str | None = None
    finished_on: str | None = None

    def to_json(self) -> dict[str, Any]:
        values = {"invocationId": self.invocation_id, "startedOn": self.started_on, "finishedOn": self.finished_on}
        return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class Statement:
    """A receipt's statement. Optional parts of SLSA (run metadata, byproducts) may be absent."""

    subjects: tuple[Subject, ...]
    external: Mapping[str, Any]
    internal: Mapping[str, Any]
    dependencies: tuple[Descriptor, ...]
    builder_version: Mapping[str, str] | None = None
    metadata: RunMetadata | None = None
    byproducts: tuple[Descriptor, ...] = ()
    build_type: str = BUILD_TYPE
    builder_id: str = BUILDER_ID

    @property
    def image(self) -> Subject:
        """The image subject (its config digest is the image ID on docker's classic store)."""
        return next((s for s in self.subjects if s.kind == "image-config"), self.subjects[0])

    def attests_same(self, other: Statement) -> bool:
        """Whether ``other`` vouches for the same thing: the same subjects (image config and
        manifest) built from the same lock. Run details (times, a ``--check`` verdict, byproducts)
        may differ between two builds of it."""
        def lock(statement: Statement) -> Mapping[str, str] | None:
            return next((d.digests for d in statement.dependencies if d.name == "lock"), None)
        return self.subjects == other.subjects and lock(self) is not None and lock(self) == lock(other)

    def with_byproduct(self, item: Descriptor) -> Statement:
        """This statement with ``item`` in place of any byproduct of the same name."""
        return replace(self, byproducts=(*(b for b in self.byproducts if b.name != item.name), item))

    def to_json(self) -> dict[str, Any]:
        builder: dict[str, Any] = {"id": self.builder_id}
        if self.builder_version is not None:
            builder["version"] = dict(self.builder_version)
        run: dict[str, Any] = {"builder": builder}
        if self.metadata is not None:
            run["metadata"] = self.metadata.to_json()
        run["byproducts"] = [b.to_json() for b in self.byproducts]
        return {
            "_type": STATEMENT_TYPE,
            "subject": [s.to_json() for s in self.subjects],
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "buildDefinition": {"buildType": self.build_type, "externalParameters": dict(self.external),
                                    "internalParameters": dict(self.internal),
                                    "resolvedDependencies": [d.to_json() for d in self.dependencies]},
                "runDetails": run,
            },
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> Statement:
        """Validate ``data``; a statement that is not a sparkimg receipt is bad input naming ``where``."""
        if problems := schema_problems(data):
            raise EnvelopeError(f"{where}: not a sparkimg receipt: {'; '.join(problems)}")
        definition = data["predicate"]["buildDefinition"]
        run = data["predicate"]["runDetails"]
        metadata, version, byproducts = run.get("metadata"), run["builder"].get("version"), run.get("byproducts")
        if metadata is not None and not (isinstance(metadata, dict) and all(
                isinstance(metadata.get(k), (str, type(None))) for k in ("invocationId", "startedOn", "finishedOn"))):
            raise EnvelopeError(f"{where}: runDetails.metadata must be an object of strings")
        if version is not None and not isinstance(version, dict):
            raise EnvelopeError(f"{where}: runDetails.builder.version must be an object")
        if byproducts is not None and not isinstance(byproducts, list):
            raise EnvelopeError(f"{where}: runDetails.byproducts must be a list")
        subjects = []
        for index, s in enumerate(data["subject"]):
            if not _digest_set(s["digest"]) or not isinstance(s.get("annotations") or {}, dict):
                raise EnvelopeError(f"{where}: subject[{index}] must have a digest of hex strings and "
                                    "object annotations")
            subjects.append(Subject(s["name"], s["digest"], s.get("annotations") or {}))
        return cls(
            subjects=tuple(subjects),
            external=definition["externalParameters"], internal=definition["internalParameters"],
            dependencies=tuple(Descriptor.from_json(d, f"{where}: resolvedDependencies[{i}]")
                               for i, d in enumerate(definition["resolvedDependencies"])),
            builder_version=version,
            metadata=None if metadata is None else RunMetadata(
                metadata.get("invocationId"), metadata.get("startedOn"), metadata.get("finishedOn")),
            byproducts=tuple(Descriptor.from_json(b, f"{where}: byproducts[{i}]")
                             for i, b in enumerate(byproducts or [])),
            build_type=definition["buildType"], builder_id=run["builder"]["id"],
        )


def _object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (a free-form field read for display)."""
    return value if isinstance(value, dict) else {}


def _digest_set(value: Any) -> bool:
    """A DigestSet: algorithm name -> hex string."""
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def parse_statement(payload: bytes, where: str) -> Statement:
    """A receipt statement from an envelope's payload; bad input names ``where``. Call it
    only after the signature is checked (or when the caller says it was not)."""
    return Statement.from_json(parse_payload(payload, where), where)


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
    for key in ("externalParameters", "internalParameters"):
        if not isinstance(definition.get(key), dict):
            problems.append(f"buildDefinition.{key} must be an object")
    deps = definition.get("resolvedDependencies")
    if not (isinstance(deps, list) and all(isinstance(d, dict) and isinstance(d.get("name"), str) for d in deps)):
        problems.append("buildDefinition.resolvedDependencies must be a list of named resource descriptors")
    builder = run.get("builder") if isinstance(run, dict) else None
    if not (isinstance(builder, dict) and isinstance(builder.get("id"), str)):
        problems.append("predicate.runDetails.builder.id is missing")
    return problems


def dependency_facts(deps: Iterable[Descriptor]) -> dict[str, Any]:
    """Dotted fields from resolved dependencies: base.*, sources.NAME.*, patches.SET/FILE.*, lock.*."""
    facts: dict[str, Any] = {}
    for dep in deps:
        name, digest, notes = dep.name, dep.digests, dep.notes
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
            for key, field_name in (("gitCommit", "commit"), ("gitTree", "tree"), ("sha256", "sha256")):
                if key in digest:
                    facts[f"{prefix}.{field_name}"] = digest[key]
            for key in ("ref", "version", "filename"):
                if key in notes:
                    facts[f"{prefix}.{key}"] = notes[key]
        elif name.startswith("patch:"):
            prefix = f"patches.{name.removeprefix('patch:')}"
            facts.update({f"{prefix}.sha256": digest.get("sha256"), f"{prefix}.md5": digest.get("md5"),
                          f"{prefix}.mount": notes.get("mount"), f"{prefix}.mode": notes.get("mode")})
    return facts


def facts(statement: Statement) -> dict[str, Any]:
    """A checked statement as dotted fields (see docs/receipt.md, "Fields verify-receipt compares")."""
    internal = statement.internal
    spec = _object(statement.external.get("spec"))
    found: dict[str, Any] = {
        "spec.name": spec.get("name"),
        "spec.digest": "sha256:" + str(_object(spec.get("digest")).get("sha256", "")),
        "platform": internal.get("platform"),
        "cuda_architectures": internal.get("cuda_architectures"),
        "image.key": internal.get("image_key"),
    }
    for subject in statement.subjects:
        if subject.kind == "image-config":
            found["image.id"], found["image.reference"] = subject.sha256, subject.name
        elif subject.kind == "image-manifest":
            found["image.manifest_digest"] = subject.sha256
    found.update(dependency_facts(statement.dependencies))
    return found


def image_subjects(image_ref: str, image_id: str, oci: ImageRecord | None) -> list[Subject]:
    """What a receipt (and the SBOM beside it) is about: the image config (the image ID on
    docker's classic store) and, where sparkimg wrote the image, its manifest."""
    subjects = [Subject(image_ref, {"sha256": hex_of(oci.config_digest if oci else image_id)},
                        {"kind": "image-config"})]
    if oci is not None:
        subjects.append(Subject(image_ref, {"sha256": hex_of(oci.manifest_digest)},
                                {"kind": "image-manifest", "mediaType": oci.media_type}))
    return subjects
