"""The one JSON encoding of every signed payload, cache key and written file.

``canonical`` (sorted keys, no spaces, ASCII) is what is hashed and signed, so the same
value always gives the same bytes; ``pretty`` is the same order indented, for files a
person reads (lock, store records), and still a pure function of the value.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical(value: Any) -> bytes:
    """Sorted keys, compact separators, ASCII: stable bytes for hashing and signing."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def pretty(value: Any) -> bytes:
    """Sorted keys, two-space indent and a final newline: files a person reads and diffs."""
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


def loads(raw: bytes | str) -> Any:
    """``json.loads`` for bytes from outside: every way they are not JSON, nesting too deep for
    the parser included (a RecursionError otherwise), is a ``ValueError``."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def digest_of(value: Any) -> str:
    """sha256 (hex) of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical(value)).hexdigest()


def sha256_prefixed(data: bytes) -> str:
    """``sha256:HEX`` of raw bytes, as digests are written in locks and receipts."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def hex_of(digest: str) -> str:
    """The HEX of ``sha256:HEX`` (what the store names a blob by); a bare HEX stays as it is."""
    return digest.split(":", 1)[1] if ":" in digest else digest
