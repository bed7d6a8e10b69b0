"""The SBOM of a build, signed, and named by the build's receipt.

At build (``make``): the SPDX document (or the CycloneDX one, when asked) is made from the
store (``document_of``), wrapped in an in-toto statement about the receipt's subjects
(``formats.sbom``), kept in the store by image key (records ``sboms``) and written beside the
receipt (``sbom_path``) as a DSSE envelope signed with the build's key; the receipt names it as
its ``sbom`` byproduct by the statement's sha256. Wherever an SBOM arrives later (verify-receipt,
verify-node, pull, load, ``sparkimg sbom``), ``checks`` holds it against the receipt that names
it, whichever format it is in.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, NamedTuple

from sparkimg._internal.fs.files import read_input
from sparkimg.errors import EnvelopeError, UsageError, VerificationError
from sparkimg.events import Phase, Reporter, silent
from sparkimg.formats import sbom as sbom_format
from sparkimg.formats.oci import ImageRecord
from sparkimg.formats.sbom_formats import CYCLONEDX, SPDX
from sparkimg.formats.statement import Descriptor, Statement, Subject, image_subjects
from sparkimg.image.build import BuildResult, compile_records
from sparkimg.lock.resolve import Lock
from sparkimg.sbom.inventory import Inventory
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


def inventory_of(spec: Spec, lock: Lock, store: Store, record: ImageRecord, image_ref: str,
                 report: Reporter = silent) -> Inventory:
    """The packages of the image ``record``, from the store: each layer's reading (kept by layer
    digest; a base layer the store lacks is streamed from its registry once), the lock and the
    compile layers' records. What every SBOM format is written from (``sbom.inventory``)."""
    from sparkimg.fetch.inputs import base_image
    from sparkimg.plan.keys import compute
    from sparkimg.sbom import contents
    from sparkimg.sbom.inventory import inventory
    from sparkimg.sbom.layers import readings

    base = base_image(lock, store, report=report)
    digests = [*(d.digest for d in base.layers), *(layer.descriptor.digest for layer in record.layers)]
    found = contents.read(readings(digests, store, base=lock.base,
                                   base_sizes={d.digest: d.size for d in base.layers}, report=report))
    records = compile_records(compute(spec, lock, store), store)
    return inventory(spec, lock, record, found, records, image_ref)


def document_of(spec: Spec, lock: Lock, store: Store, record: ImageRecord, image_ref: str,
                report: Reporter = silent, kind: str = SPDX) -> dict[str, Any]:
    """The SBOM of the image ``record`` in the format ``kind`` (SPDX 2.3 or CycloneDX 1.6), from
    the store (``inventory_of``). The same lock gives the same document, byte for byte."""
    return written(inventory_of(spec, lock, store, record, image_ref, report), kind)


def written(inventory: Inventory, kind: str) -> dict[str, Any]:
    """``inventory`` as a document in the format ``kind`` (``formats.sbom_formats.FORMATS``)."""
    if kind == CYCLONEDX:
        from sparkimg.sbom import cyclonedx  # the CycloneDX library loads only for a CycloneDX SBOM

        return cyclonedx.document(inventory)
    from sparkimg.sbom import spdx

    return spdx.document(inventory)


def make(result: BuildResult, store: Store, report: Reporter = silent, kind: str = SPDX) -> bytes:
    """The SBOM statement of a finished build (its bytes), its document in the format ``kind``,
    kept in the store by image key."""
    from sparkimg.formats.canonical import loads

    assert result.oci is not None and result.image_id is not None, "an SBOM is made of a built image"
    plan = result.plan
    document = document_of(plan.spec, plan.lock, store, result.oci, result.image_ref, report, kind)
    payload = sbom_format.statement(document, image_subjects(result.image_ref, result.image_id, result.oci))
    if store.read_record(RECORDS, plan.image.key) != loads(payload):
        store.write_record(RECORDS, plan.image.key, loads(payload))
    return payload


def made(result: BuildResult, store: Store, key: PrivateKey | None, receipt: Path,
         report: Reporter = silent, kind: str = SPDX) -> Descriptor:
    """Make the SBOM of a finished build in the format ``kind``, write it beside ``receipt`` (signed
    with ``key``, by the receipt writer's rules: an unchanged one keeps its bytes, a signed one is
    never replaced by an unsigned one) and return the receipt byproduct that names it."""
    from sparkimg.events import Event, Phase

    payload = make(result, store, report, kind)
    path = sbom_path(receipt)
    written: Written = write_signed(path, payload, key)
    if written.written:
        report(Event(Phase.RECEIPT, f"SBOM {path}" + (" signed" if written.signed else " (NOT signed)")))
    return byproduct(payload, kind)


def byproduct(payload: bytes, kind: str = SPDX) -> Descriptor:
    """The receipt's ``sbom`` byproduct: the statement's sha256 (its content; the envelope's
    signatures may differ). No file name: the file lies beside the receipt (``sbom_path``), and
    a receipt's bytes must not depend on the name it was written under."""
    return Descriptor(sbom_format.BYPRODUCT, None, {"sha256": hashlib.sha256(payload).hexdigest()},
                      media_type=sbom_format.MEDIA_TYPE,
                      annotations={"predicateType": sbom_format.PREDICATE_TYPES[kind], "envelope": "dsse"})


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
        return [*found, Finding("statement", "in-toto statement of an SPDX 2.3 or CycloneDX document", "invalid", False,
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


UNCHECKED = "not checked (pass --key)"


def signed_file(path: Path, trusted: PublicKey | None) -> tuple[dict[str, Any], str, str]:
    """(document, where it was read, the signature's state) of the SBOM in ``path``, or beside the
    receipt in ``path``; with ``trusted``, checked against the key (and the receipt that names it:
    ``verified``), else shown as not checked. A failed check is a ``VerificationError``."""
    from sparkimg.formats.intoto import parse_payload

    if not path.is_file():
        raise UsageError(f"{path}: no such receipt or SBOM file", hint=SBOM_HINT)
    raw = read_input(path, dsse.ENVELOPE_BYTES, hint=SBOM_HINT)
    envelope = dsse.parse(raw, str(path), hint=SBOM_HINT)
    payload = parse_payload(envelope.payload, str(path))
    if isinstance(payload, dict) and payload.get("predicateType") in sbom_format.PREDICATE_TYPES.values():
        why = envelope.check_signature(trusted) if trusted else None
        if why is not None:
            raise VerificationError(f"{path}: the SBOM's signature does not verify: {why}",
                                    hint="pass the key that signed the build")
        return (sbom_format.parse(envelope.payload, str(path))[1], str(path),
                "valid (the receipt not checked: pass the receipt to check the SBOM against it)"
                if trusted else UNCHECKED)
    beside = sbom_path(path)
    if not beside.is_file():
        raise UsageError(f"{path}: no SBOM beside the receipt ({beside.name})", hint=SBOM_HINT)
    sbom_raw = read_input(beside, dsse.ENVELOPE_BYTES, hint=SBOM_HINT)
    if trusted is None:
        return sbom_format.parse(dsse.parse(sbom_raw, str(beside)).payload, str(beside))[1], str(beside), UNCHECKED
    why = envelope.check_signature(trusted)
    if why is not None:
        raise VerificationError(f"{path}: the receipt's signature does not verify: {why}",
                                hint="pass the key that signed the build")
    try:
        document = verified(sbom_raw, str(beside), trusted, receipt_statement(raw, str(path)))
    except UsageError as exc:
        raise VerificationError(exc.message, hint=exc.hint) from None
    return document, str(beside), "valid, and the statement the receipt names"


def sbom_beside(receipt: Path, statement: Statement, phase: Phase, report: Reporter) -> bytes | None:
    """The SBOM envelope beside ``receipt`` (whose ``statement`` the caller has read) when it is
    the one the receipt names (a push or save never sends an SBOM every pull or load would
    refuse); None, said, when there is none."""
    from sparkimg.events import Event, Kind

    pinned = named(statement)
    path = sbom_path(receipt)
    if pinned is None or not path.exists():
        report(Event(phase, f"no SBOM {'named by the receipt' if pinned is None else f'at {path}'}: the image "
                     "goes without one", kind=Kind.WARNING))
        return None
    sbom = read_input(path, dsse.ENVELOPE_BYTES, hint=SBOM_HINT)
    if hashlib.sha256(dsse.parse(sbom, str(path), hint=SBOM_HINT).payload).hexdigest() != pinned.digests.get("sha256"):
        raise UsageError(f"{path}: not the SBOM the receipt {receipt} names (its statement's sha256 differs)",
                         hint=f"build the spec again to write both anew; {SBOM_HINT}")
    return sbom
