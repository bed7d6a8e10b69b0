"""The SBOM of a build, signed, and named by the build's receipt.

At build (``make``): the SPDX document is made from the store (``document_of``), wrapped in an
in-toto statement about the receipt's subjects (``formats.sbom``), kept in the store by image
key (records ``sboms``) and written beside the receipt (``sbom_path``) as a DSSE envelope
signed with the build's key; the receipt names it as its ``sbom`` byproduct by the statement's
sha256. Wherever an SBOM arrives later (verify-receipt, verify-node, pull, load, ``sparkimg
sbom``), ``checks`` holds it against the receipt that names it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, NamedTuple

from sparkimg.errors import EnvelopeError
from sparkimg.events import Reporter, silent
from sparkimg.formats import sbom as sbom_format
from sparkimg.formats.oci import ImageRecord
from sparkimg.formats.statement import Descriptor, Statement, Subject, image_subjects
from sparkimg.image.image import BuildResult, compile_records
from sparkimg.lock.resolve import Lock
from sparkimg.signing import dsse
from sparkimg.signing.keys import PrivateKey, PublicKey
from sparkimg.signing.signed import Written, write_signed
from sparkimg.spec import Spec
from sparkimg.store.content import Store

RECORDS = "sboms"
SBOM_HINT = "pass the SBOM `sparkimg build` wrote beside the receipt (NAME.sbom.json)"


def sbom_path(receipt: Path) -> Path:
    """Where the SBOM of the receipt at ``receipt`` lives: beside it, ``KEY.receipt.json`` ->
    ``KEY.sbom.json`` (any other ``NAME.json`` -> ``NAME.sbom.json``)."""
    name = receipt.name
    stem = name[:-len(".receipt.json")] if name.endswith(".receipt.json") else name.removesuffix(".json")
    return receipt.with_name(f"{stem}.sbom.json")


def document_of(spec: Spec, lock: Lock, store: Store, record: ImageRecord, image_ref: str,
                report: Reporter = silent) -> dict[str, Any]:
    """The SPDX 2.3 document of the image ``record``, from the store: each layer's reading (kept by
    layer digest; a base layer the store lacks is streamed from its registry once), the lock and
    the compile layers' records. The same lock gives the same document, byte for byte."""
    from sparkimg.fetch.inputs import base_image
    from sparkimg.plan.keys import compute
    from sparkimg.sbom import contents, spdx
    from sparkimg.sbom.layers import readings

    base = base_image(lock, store, report=report)
    digests = [*(d.digest for d in base.layers), *(layer.descriptor.digest for layer in record.layers)]
    found = contents.read(readings(digests, store, base_repository=lock.base.repository,
                                   base_sizes={d.digest: d.size for d in base.layers}, report=report))
    records = compile_records(compute(spec, lock, store), store)
    return spdx.document(spec, lock, record, found, records, image_ref)


def make(result: BuildResult, store: Store, report: Reporter = silent) -> bytes:
    """The SBOM statement of a finished build (its bytes), kept in the store by image key."""
    from sparkimg.formats.canonical import loads

    assert result.oci is not None and result.image_id is not None, "an SBOM is made of a built image"
    plan = result.plan
    document = document_of(plan.spec, plan.lock, store, result.oci, result.image_ref, report)
    payload = sbom_format.statement(document, image_subjects(result.image_ref, result.image_id, result.oci))
    if store.read_record(RECORDS, plan.image.key) != loads(payload):
        store.write_record(RECORDS, plan.image.key, loads(payload))
    return payload


def made(result: BuildResult, store: Store, key: PrivateKey | None, receipt: Path,
         report: Reporter = silent) -> Descriptor:
    """Make the SBOM of a finished build, write it beside ``receipt`` (signed with ``key``, by the
    receipt writer's rules: an unchanged one keeps its bytes, a signed one is never replaced by an
    unsigned one) and return the receipt byproduct that names it."""
    from sparkimg.events import Event, Phase

    payload = make(result, store, report)
    path = sbom_path(receipt)
    written: Written = write_signed(path, payload, key)
    if written.written:
        report(Event(Phase.RECEIPT, f"SBOM {path}" + (" signed" if written.signed else " (NOT signed)")))
    return byproduct(payload, path)


def byproduct(payload: bytes, path: Path) -> Descriptor:
    """The receipt's ``sbom`` byproduct: the statement's sha256 (its content; the envelope's
    signatures may differ) and the file's name beside the receipt."""
    return Descriptor(sbom_format.BYPRODUCT, f"file:{path.name}", {"sha256": hashlib.sha256(payload).hexdigest()},
                      media_type=sbom_format.MEDIA_TYPE,
                      annotations={"predicateType": sbom_format.PREDICATE_TYPE, "envelope": "dsse"})


def named(receipt: Statement) -> Descriptor | None:
    """The SBOM a receipt names, or None (built before sparkimg wrote SBOMs)."""
    return next((b for b in receipt.byproducts if b.name == sbom_format.BYPRODUCT), None)


def receipt_statement(envelope: bytes, where: str) -> Statement:
    """The statement in a receipt envelope (its signature checked elsewhere)."""
    from sparkimg.formats.intoto import parse_payload

    return Statement.from_json(parse_payload(dsse.parse(envelope, where).payload, where), where)


class Finding(NamedTuple):
    """One comparison of an SBOM against its receipt (a row of ``verify``)."""

    field: str
    expected: Any
    found: Any
    ok: bool
    note: str = ""


def checks(envelope: bytes, where: str, key: PublicKey, receipt: Statement) -> tuple[list[Finding], dict[str, Any]]:
    """An SBOM envelope against ``key`` and the ``receipt`` that names it: its signature, that it
    is the statement the receipt pins (sha256), and that it speaks of the receipt's image. Also
    the document, when the envelope could be read ({} otherwise)."""
    pinned = named(receipt)
    expected = (pinned.digests.get("sha256") if pinned else None) or "(the receipt names no SBOM)"
    try:
        parsed = dsse.parse(envelope, where, hint=SBOM_HINT)
    except EnvelopeError as exc:
        return [Finding("envelope", "DSSE envelope", "unreadable", False, exc.message)], {}
    why = parsed.check_signature(key)
    found = [Finding("DSSE signature", f"valid, keyid {key.keyid[:16]}", "valid" if why is None else "invalid",
                     why is None, why or "")]
    digest = hashlib.sha256(parsed.payload).hexdigest()
    found.append(Finding("statement sha256", expected, digest, digest == expected,
                         "" if digest == expected else "not the SBOM the receipt names"))
    try:
        subjects, document = sbom_format.parse(parsed.payload, where)
    except EnvelopeError as exc:
        return [*found, Finding("statement", "in-toto statement of an SPDX 2.3 document", "invalid", False,
                                exc.message)], {}
    mine, theirs = _digests(receipt.subjects), _digests(subjects)
    found.append(Finding("subjects", sorted(mine), sorted(theirs), mine == theirs))
    return found, document


def _digests(subjects: tuple[Subject, ...]) -> set[str]:
    return {f"sha256:{s.digest.get('sha256', '')}" for s in subjects}


def verified(envelope: bytes, where: str, key: PublicKey, receipt: Statement) -> dict[str, Any]:
    """The document of an SBOM that passes every check; ``EnvelopeError`` listing what failed."""
    found, document = checks(envelope, where, key, receipt)
    failed = [f"{f.field}: expected {f.expected}, found {f.found}" + (f" ({f.note})" if f.note else "")
              for f in found if not f.ok]
    if failed:
        raise EnvelopeError(f"{where}: the SBOM does not verify: {'; '.join(failed)}", hint=SBOM_HINT)
    return document

