"""What leaves with an image (``push``, ``save``, the nightly's push): its receipt, bound to that
very image, and the SBOM beside it that the receipt names. One reader for every command that
sends an image out, so that none forgets the SBOM and none sends another image's receipt (a pull
or a load would refuse it far from where the mistake was made)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkimg._internal.fs.files import read_input
from sparkimg.errors import UsageError
from sparkimg.events import Event, Kind, Phase, Reporter
from sparkimg.formats.oci import ImageRecord
from sparkimg.formats.statement import Statement
from sparkimg.sbom.attest import receipt_statement, sbom_beside
from sparkimg.signing.dsse import ENVELOPE_BYTES

RECEIPT_HINT = "pass the receipt `sparkimg build` wrote"


@dataclass(frozen=True)
class Attached:
    """The envelopes that go with an image: its receipt (and the statement in it, its signature
    checked by whoever receives it) and its SBOM; either may be absent."""

    receipt: bytes | None
    sbom: bytes | None
    statement: Statement | None = None


def bound(statement: Statement, record: ImageRecord, where: Path, image: str) -> None:
    """Refuse (exit 2) a receipt whose subjects are not ``record``'s manifest and config."""
    if {record.manifest_digest, record.config_digest} <= {s.sha256 for s in statement.subjects}:
        return
    named = ", ".join(f"{s.kind} {s.sha256}" for s in statement.subjects)
    raise UsageError(f"{where}: a receipt of {statement.image.name} ({named}), not of {image} (manifest "
                     f"{record.manifest_digest}, config {record.config_digest}); every pull and load would "
                     "refuse it",
                     hint=f"pass the receipt the build of {image} wrote (receipts/NAME/KEY16.receipt.json), or "
                     "build the spec again to write it")


def attachments(receipt: Path, record: ImageRecord, image: str, *, required: bool, phase: Phase,
                report: Reporter) -> Attached:
    """The receipt at ``receipt`` (checked to be ``record``'s) and the SBOM beside it. A receipt
    that is not there is refused when ``required`` (the operator named it, or the command carries
    one by design), else said: the image goes without one."""
    if not receipt.is_file():
        if required:
            raise UsageError(f"{receipt}: no receipt there", hint=f"{RECEIPT_HINT} (or build with --key)")
        report(Event(phase, f"no receipt at {receipt}: the image goes without one", kind=Kind.WARNING))
        return Attached(None, None)
    data = read_input(receipt, ENVELOPE_BYTES, hint=RECEIPT_HINT)
    statement = receipt_statement(data, str(receipt))
    bound(statement, record, receipt, image)
    return Attached(data, sbom_beside(receipt, statement, phase, report), statement)
