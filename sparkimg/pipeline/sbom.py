"""``sparkimg sbom``: the SBOM (an SPDX 2.3 document) of a built image, by what the operator has
at hand: a SPEC (made from the store), a RECEIPT or the SBOM file (the signed SBOM beside it), or
a REF in a registry (the SBOM attached beside the image)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg.distribution.pull import attached_sbom
from sparkimg.events import Reporter, silent
from sparkimg.formats import sbom as sbom_format
from sparkimg.pipeline.context import stored_image
from sparkimg.plan.keys import image_ref
from sparkimg.sbom.attest import UNCHECKED, document_of, signed_file
from sparkimg.signing import dsse
from sparkimg.signing.keys import PublicKey
from sparkimg.store.content import Store


@dataclass(frozen=True)
class ShownSbom:
    """An SBOM as ``sparkimg sbom`` shows it: the SPDX document, where it came from, and the state
    of its signature (checked with ``--key``)."""

    document: dict[str, Any]
    source: str  # "store", the SBOM file read, or the artifact digest in the registry
    signature: str


def shown(source: Path | str, trusted: PublicKey | None, store: Store, report: Reporter = silent) -> ShownSbom:
    """- a SPEC: made from the store (the image's layers, read once each; the lock; the build
      records), the same bytes for the same lock; unsigned, as nothing signed it yet;
    - a RECEIPT (or the SBOM file itself): the signed SBOM beside it; with ``trusted``, checked
      against the key and the receipt that names it (``sbom.attest.verified``);
    - a REF (REGISTRY/REPO:TAG or @DIGEST): the SBOM attached beside the image; with ``trusted``,
      the newest one it signed."""
    path = Path(source)
    if not path.exists() and "/" in str(source) and not str(source).endswith((".json", ".yaml", ".yml")):
        artifact, attached = attached_sbom(str(source), trusted)
        return ShownSbom(sbom_format.parse(dsse.parse(attached, artifact).payload, artifact)[1], artifact,
                         "valid" if trusted else UNCHECKED)
    if path.suffix != ".json":
        spec, the_store, lock, image, record = stored_image(path, store, report)
        return ShownSbom(document_of(spec, lock, the_store, record, image_ref(spec, image), report), "store",
                         "unsigned (made from the store)")
    return ShownSbom(*signed_file(path, trusted))
