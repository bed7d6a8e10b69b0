"""The one writer of signed files (receipts, prewarm manifests): a DSSE envelope around a
payload, written atomically, and kept as it is when it already says the same under the same
signer, so a rerun that changed nothing changes no byte and no signature."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..store import write_atomic
from . import dsse
from .keys import PrivateKey


@dataclass(frozen=True)
class Written:
    path: Path
    signed: bool
    keyid: str | None
    written: bool


def write_signed(path: Path, payload: bytes, key: PrivateKey | None, *,
                 same: Callable[[bytes], bool] | None = None) -> Written:
    """Write ``payload`` in an envelope (signed when ``key`` is given). An existing file is kept
    when its payload is ``payload`` (or ``same`` says it is equivalent) and it is signed by
    ``key`` (or unsigned when ``key`` is None)."""
    keyid = key.keyid if key else None
    if _keeps(path, payload, key, same):
        return Written(path, key is not None, keyid, written=False)
    envelope = dsse.Envelope(payload)
    if key is not None:
        envelope = envelope.signed(key)
    write_atomic(path, envelope.dumps())
    return Written(path, key is not None, keyid, written=True)


def _keeps(path: Path, payload: bytes, key: PrivateKey | None, same: Callable[[bytes], bool] | None) -> bool:
    if not path.exists():
        return False
    try:
        existing = dsse.read(path)
        equal = existing.payload == payload or (same is not None and same(existing.payload))
    except (UsageError, OSError):
        return False
    return equal and existing.same_signer(key)
