"""Signed image receipts: an in-toto statement with SLSA provenance in a DSSE envelope.

``emit`` writes the receipt of a finished build. The statement of each image is kept in
the store by image key, so a no-op rebuild re-issues the same statement instead of a new
one, and the receipt file is rewritten only when its payload or signer would change.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkimg.errors import UsageError
from sparkimg.formats.canonical import canonical
from sparkimg.formats.statement import Descriptor, Statement, parse_statement
from sparkimg.image.build import BuildResult
from sparkimg.receipts.compose import statement
from sparkimg.signing.keys import PrivateKey
from sparkimg.signing.signed import Written, write_signed
from sparkimg.spec import Spec
from sparkimg.store.content import Store

RECORDS = "statements"


Emitted = Written


def default_path(result: BuildResult) -> Path:
    return receipt_path(result.plan.spec, result.plan.image.key)


def receipt_path(spec: Spec, image_key: str) -> Path:
    """Where ``build`` writes an image's receipt unless told otherwise (and where ``push`` looks)."""
    return spec.root / "receipts" / spec.name / f"{image_key[:16]}.receipt.json"


def has_statement(result: BuildResult, store: Store) -> bool:
    """Whether the store still holds this image's statement (a receipt written again reuses it)."""
    return store.read_record(RECORDS, result.plan.image.key) is not None


def emit(result: BuildResult, store: Store, key: PrivateKey | None, *, path: Path | None = None,
         record_host: bool = False, prewarm: Descriptor | None = None, sbom: Descriptor | None = None,
         check: Mapping[str, Any] | None = None) -> Emitted:
    """Write the receipt of ``result`` (signed when ``key`` is given); return where and how.
    ``prewarm`` is the byproduct of a prewarm run of this build (``prewarm.warm.receipt_entry``),
    ``sbom`` the SBOM written beside the receipt (``sbom.attest.byproduct``), ``check`` what
    ``build --check`` found (``CheckReport.to_receipt``)."""
    if result.image_id is None:
        raise UsageError(f"{result.image_ref}: the image is not in the engine; nothing to write a receipt for")
    image_key = result.plan.image.key
    where = str(store.record_path(RECORDS, image_key))
    data = store.read_record(RECORDS, image_key)
    kept = Statement.from_json(data, where) if data is not None else None
    changed = kept is None or kept.image.sha256 != result.image_id or (
        check is not None and kept.internal.get("check") != check)
    if kept is None or changed:
        kept = statement(
            result.plan.spec, result.plan.lock, image_ref=result.image_ref, image_id=result.image_id,
            image_key=image_key, records=result.records,
            layer_keys={layer.name: layer.key for layer in result.plan.layers},
            blobs=result.blobs, engine=result.engine, started=result.started, finished=result.finished,
            record_host=record_host, oci=result.oci, check=check, base_nvcc=_base_nvcc(result, store))
    if prewarm is not None:
        kept = kept.with_byproduct(prewarm)
        changed = True
    if sbom is not None and sbom not in kept.byproducts:
        kept = kept.with_byproduct(sbom)
        changed = True
    if changed:
        store.write_record(RECORDS, image_key, kept.to_json())
    # An unsigned build keeps a signed receipt of this very image from this very lock (exit 0);
    # only a receipt of something else is refused (``signing.signed``).
    target = path or default_path(result)
    return write_signed(target, canonical(kept.to_json()), key,
                        attests=lambda there: kept.attests_same(parse_statement(there, str(target))))


def _base_nvcc(result: BuildResult, store: Store) -> dict[str, str] | None:
    """nvcc as the base answered (``toolchain: cuda: base``, asked by fetch), for the receipt."""
    from sparkimg.base.cuda import remembered

    lock = result.plan.lock
    if lock.toolchain.cuda != "base":
        return None
    found = remembered(store, lock.base.config_digest)
    return found.to_json() if found else None
