"""What every in-toto Statement v1 sparkimg writes has in common (receipts and prewarm
manifests): the statement type, the time format, and parsing a DSSE payload as JSON."""

from __future__ import annotations

from typing import Any

from sparkimg.errors import EnvelopeError
from sparkimg.formats.canonical import loads

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"



def parse_payload(payload: bytes, where: str) -> Any:
    """An envelope's payload as JSON; bad input names ``where``."""
    try:
        return loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise EnvelopeError(f"{where}: the payload is not JSON") from None
