"""``sparkimg show-receipt``: a receipt's statement and dotted fields for a person, and the state
of its signature when a key is given."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg.formats.statement import Statement, facts, parse_statement
from sparkimg.signing import dsse
from sparkimg.signing.keys import PublicKey


@dataclass(frozen=True)
class Shown:
    envelope: dsse.Envelope
    signature: str
    statement: Statement
    facts: dict[str, Any]


def shown(receipt: Path, key: PublicKey | None) -> Shown:
    envelope = dsse.read(receipt)
    signature = "not checked (pass --key)"
    if key is not None:
        why = envelope.check_signature(key)
        signature = "valid" if why is None else f"INVALID: {why}"
    data = parse_statement(envelope.payload, str(receipt))
    return Shown(envelope, signature, data, facts(data))
