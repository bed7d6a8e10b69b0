"""Signed image receipts: an in-toto statement with SLSA provenance in a DSSE envelope.

``emit`` writes the receipt of a finished build. The statement of each image is kept in
the store by image key, so a no-op rebuild re-issues the same statement instead of a new
one, and the receipt file is rewritten only when its payload or signer would change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..build.image import BuildResult
from ..errors import UsageError
from ..formats.canonical import canonical
from ..signing import dsse
from ..signing.keys import PrivateKey
from ..store import Store, write_atomic
from .statement import statement

RECORDS = "statements"


@dataclass(frozen=True)
class Emitted:
    path: Path
    signed: bool
    keyid: str | None
    written: bool


def default_path(result: BuildResult) -> Path:
    spec = result.plan.spec
    return spec.root / "receipts" / spec.name / f"{result.plan.image.key[:16]}.receipt.json"


def emit(result: BuildResult, store: Store, key: PrivateKey | None, *, path: Path | None = None,
         record_host: bool = False, prewarm: dict[str, Any] | None = None) -> Emitted:
    """Write the receipt of ``result`` (signed when ``key`` is given); return where and how.
    ``prewarm`` is the byproduct of a prewarm run of this build (``prewarm.receipt_entry``)."""
    if result.image_id is None:
        raise UsageError(f"{result.image_ref}: the image is not in the engine; nothing to write a receipt for")
    image_key = result.plan.image.key
    data = store.read_record(RECORDS, image_key)
    changed = data is None or data["subject"][0]["digest"]["sha256"] != result.image_id.split(":", 1)[1]
    if changed:
        data = statement(
            result.plan.spec, result.plan.lock, image_ref=result.image_ref, image_id=result.image_id,
            image_key=image_key, records=result.records,
            layer_keys={layer.name: layer.key for layer in result.plan.layers},
            blobs=result.blobs, engine=result.engine, started=result.started, finished=result.finished,
            record_host=record_host)
    assert data is not None
    if prewarm is not None:
        byproducts = data["predicate"]["runDetails"]["byproducts"]
        byproducts[:] = [*(b for b in byproducts if b["name"] != "prewarm"), prewarm]
        changed = True
    if changed:
        store.write_record(RECORDS, image_key, data)
    envelope = dsse.Envelope(canonical(data))
    target = path or default_path(result)
    if target.exists() and _still_good(target, envelope.payload, key):
        return Emitted(target, key is not None, key.keyid if key else None, written=False)
    if key is not None:
        envelope = envelope.signed(key)
    write_atomic(target, envelope.dumps())
    return Emitted(target, key is not None, key.keyid if key else None, written=True)


def _still_good(path: Path, payload: bytes, key: PrivateKey | None) -> bool:
    """An existing receipt is kept when it carries this payload, signed by this key (or by none)."""
    try:
        existing = dsse.read(path)
    except UsageError:
        return False
    return existing.payload == payload and existing.same_signer(key)
