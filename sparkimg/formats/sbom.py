"""The SBOM attestation: an in-toto Statement v1 whose predicate is the image's SPDX 2.3 document
(or, when the build was asked for it, its CycloneDX 1.6 document) and whose subjects are the
receipt's (the image config and manifest).

Pure: the statement's bytes, reading one back, and the receipt byproduct that names it. The
receipt names the statement by the sha256 of these bytes (the DSSE payload), never of the
envelope, whose ECDSA signature differs on every signing; so the receipt pins the SBOM's
content while any number of keys may sign it. docs/sbom.md is the reference.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sparkimg.errors import EnvelopeError, UsageError
from sparkimg.formats.canonical import canonical
from sparkimg.formats.intoto import STATEMENT_TYPE, parse_payload
from sparkimg.formats.sbom_formats import CYCLONEDX, FORMATS, SPDX
from sparkimg.formats.statement import Subject

# The in-toto attestation framework's predicate types (as `docker buildx --sbom` and cosign write them).
PREDICATE_TYPES = {SPDX: "https://spdx.dev/Document/v2.3", CYCLONEDX: "https://cyclonedx.org/bom"}
MEDIA_TYPE = "application/vnd.in-toto+json"  # what the receipt's byproduct digest is the digest of
BYPRODUCT = "sbom"  # the receipt byproduct's name
SPDX_VERSION = "SPDX-2.3"
NAMES = {SPDX: "SPDX 2.3", CYCLONEDX: "CycloneDX"}


def known(kind: str) -> str:
    """``kind`` when it is a format sparkimg writes; else a ``UsageError`` naming them (a caller of
    the API, which the CLI's choices do not guard)."""
    if kind not in FORMATS:
        raise UsageError(f"unknown SBOM format {kind!r}", hint=f"use one of: {', '.join(FORMATS)}")
    return kind


def format_of(document: Mapping[str, Any]) -> str | None:
    """The format of an SBOM document (``formats.sbom_formats.FORMATS``), or None when it is neither."""
    if document.get("spdxVersion") == SPDX_VERSION:
        return SPDX
    if document.get("bomFormat") == "CycloneDX":
        return CYCLONEDX
    return None


def statement(document: Mapping[str, Any], subjects: Iterable[Subject]) -> bytes:
    """The attestation's bytes (canonical JSON): ``document`` (SPDX or CycloneDX) about ``subjects``."""
    kind = format_of(document)
    assert kind is not None, "an SBOM attests an SPDX or CycloneDX document"
    return canonical({"_type": STATEMENT_TYPE, "subject": [s.to_json() for s in subjects],
                      "predicateType": PREDICATE_TYPES[kind], "predicate": dict(document)})


def parse(payload: bytes, where: str) -> tuple[tuple[Subject, ...], dict[str, Any]]:
    """(subjects, SPDX or CycloneDX document) of an attestation's bytes; anything else is an
    ``EnvelopeError`` naming ``where``."""
    data = parse_payload(payload, where)
    if not isinstance(data, dict) or data.get("_type") != STATEMENT_TYPE:
        raise EnvelopeError(f"{where}: not an in-toto Statement v1")
    kind = next((k for k, v in PREDICATE_TYPES.items() if v == data.get("predicateType")), None)
    if kind is None:
        raise EnvelopeError(f"{where}: predicateType is {data.get('predicateType')!r}, an SBOM's is one of "
                            f"{', '.join(repr(t) for t in PREDICATE_TYPES.values())}")
    document, subjects = data.get("predicate"), data.get("subject")
    if not isinstance(document, dict) or format_of(document) != kind:
        raise EnvelopeError(f"{where}: the predicate is not the {NAMES[kind]} document its predicateType says")
    if not isinstance(subjects, list) or not subjects:
        raise EnvelopeError(f"{where}: the statement has no subject")
    found = []
    for index, subject in enumerate(subjects):
        digest = subject.get("digest") if isinstance(subject, dict) else None
        if not isinstance(subject, dict) or not isinstance(subject.get("name"), str) or not isinstance(digest, dict) \
                or not all(isinstance(k, str) and isinstance(v, str) for k, v in digest.items()):
            raise EnvelopeError(f"{where}: subject[{index}] must have a name and a digest of strings")
        notes = subject.get("annotations") or {}
        found.append(Subject(subject["name"], digest, notes if isinstance(notes, dict) else {}))
    return tuple(found), document
