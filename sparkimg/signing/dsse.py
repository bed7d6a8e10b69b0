"""DSSE envelopes (github.com/secure-systems-lab/dsse, protocol v1).

The signature covers the pre-authentication encoding (PAE) of the payload type and the
exact payload bytes, never a re-serialisation: the envelope keeps the bytes that were
signed, and a verifier checks them before it parses them.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg._internal.fs.files import MiB, read_input
from sparkimg.errors import EnvelopeError, UsageError
from sparkimg.formats.canonical import loads
from sparkimg.signing.keys import PrivateKey, PublicKey

# The most a signed envelope file (a receipt, an SBOM, a prewarm manifest) read whole may hold.
ENVELOPE_BYTES = 64 * MiB

PAYLOAD_TYPE = "application/vnd.in-toto+json"



def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSEv1 pre-authentication encoding: ``DSSEv1 SP LEN(type) SP type SP LEN(body) SP body``."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


@dataclass(frozen=True)
class Signature:
    keyid: str
    sig: bytes


@dataclass(frozen=True)
class Envelope:
    payload: bytes
    payload_type: str = PAYLOAD_TYPE
    signatures: tuple[Signature, ...] = ()

    def signed(self, key: PrivateKey) -> Envelope:
        signature = Signature(key.keyid, key.sign(pae(self.payload_type, self.payload)))
        return Envelope(self.payload, self.payload_type, (*self.signatures, signature))

    def check_signature(self, key: PublicKey) -> str | None:
        """None when a signature by ``key`` verifies; otherwise why not."""
        if not self.signatures:
            return "the envelope carries no signature (an unsigned build)"
        mine = [s for s in self.signatures if s.keyid == key.keyid]
        if not mine:
            found = ", ".join(s.keyid[:16] or "(empty)" for s in self.signatures)
            return f"no signature by the trusted key {key.keyid[:16]} (signed by keyid {found})"
        message = pae(self.payload_type, self.payload)
        if any(key.verify(s.sig, message) for s in mine):
            return None
        return f"the signature by {key.keyid[:16]} does not verify: payload or signature changed after signing"

    def same_signer(self, key: PrivateKey | None) -> bool:
        """Signed by ``key`` (a valid signature), or unsigned when ``key`` is None: a file that
        is kept rather than rewritten must not change who vouches for it."""
        if key is None:
            return not self.signatures
        return self.check_signature(key.public) is None

    def to_json(self) -> dict[str, Any]:
        return {
            "payloadType": self.payload_type,
            "payload": base64.b64encode(self.payload).decode(),
            "signatures": [{"keyid": s.keyid, "sig": base64.b64encode(s.sig).decode()} for s in self.signatures],
        }

    def dumps(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2) + "\n").encode()


RECEIPT_HINT = "pass the .receipt.json file that `sparkimg build` wrote"


def parse(raw: bytes, where: str, hint: str = RECEIPT_HINT) -> Envelope:
    """An envelope from its JSON; every shape problem is an ``EnvelopeError`` naming ``where``."""
    try:
        data = loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise EnvelopeError(f"{where}: not JSON ({exc.__class__.__name__}: {exc}); truncated?", hint=hint) from None
    if not isinstance(data, dict):
        raise EnvelopeError(f"{where}: a DSSE envelope is a JSON object, this is {type(data).__name__}")
    missing = [k for k in ("payloadType", "payload", "signatures") if k not in data]
    if missing:
        raise EnvelopeError(f"{where}: not a DSSE envelope: missing {', '.join(missing)}")
    if data["payloadType"] != PAYLOAD_TYPE:
        raise EnvelopeError(f"{where}: payloadType is {data['payloadType']!r}, sparkimg writes {PAYLOAD_TYPE!r}",
                            hint=hint)
    if not isinstance(data["payload"], str) or not isinstance(data["signatures"], list):
        raise EnvelopeError(f"{where}: payload must be a base64 string and signatures a list")
    signatures = []
    for index, item in enumerate(data["signatures"]):
        if not isinstance(item, dict) or not isinstance(item.get("sig"), str):
            raise EnvelopeError(f"{where}: signatures[{index}] must be an object with a base64 'sig'")
        signatures.append(Signature(str(item.get("keyid", "")), _b64(item["sig"], f"{where}: signatures[{index}].sig")))
    return Envelope(_b64(data["payload"], f"{where}: payload"), data["payloadType"], tuple(signatures))


def read(path: Path, hint: str = RECEIPT_HINT) -> Envelope:
    try:
        raw = read_input(path, ENVELOPE_BYTES, hint=hint)
    except FileNotFoundError:
        raise EnvelopeError(f"{path}: cannot read (No such file or directory)", hint=hint) from None
    except UsageError as exc:
        raise EnvelopeError(exc.message, hint=hint) from None
    return parse(raw, str(path), hint)


def _b64(text: str, where: str) -> bytes:
    try:
        # DSSE allows standard or URL-safe base64, with or without padding.
        padded = text + "=" * (-len(text) % 4)
        alphabet = b"-_" if ("-" in text or "_" in text) else None
        return base64.b64decode(padded, altchars=alphabet, validate=True)
    except (binascii.Error, ValueError):
        raise EnvelopeError(f"{where} is not valid base64") from None
