"""``sparkimg sbom``: the SBOM (an SPDX 2.3 or CycloneDX 1.6 document) of a built image, by what
the operator has at hand: a SPEC (made from the store, in the format asked for), a RECEIPT or the
SBOM file (the signed SBOM beside it), or a REF in a registry (the SBOM attached beside the image)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg.distribution.pull import attached_sbom
from sparkimg.errors import UsageError
from sparkimg.events import Reporter, silent
from sparkimg.formats import sbom as sbom_format
from sparkimg.formats.sbom_formats import SPDX
from sparkimg.pipeline.context import stored_image
from sparkimg.plan.keys import image_ref
from sparkimg.sbom.attest import UNCHECKED, document_of, signed_file
from sparkimg.sbom.listing import Listed, packages, title
from sparkimg.signing import dsse
from sparkimg.signing.keys import PublicKey
from sparkimg.store.content import Store


@dataclass(frozen=True)
class ShownSbom:
    """An SBOM as ``sparkimg sbom`` shows it: the document (SPDX or CycloneDX), where it came
    from, and the state of its signature (checked with ``--key``)."""

    document: dict[str, Any]
    source: str  # "store", the SBOM file read, or the artifact digest in the registry
    signature: str

    @property
    def format(self) -> str:
        """``spdx`` or ``cyclonedx`` (``formats.sbom_formats.FORMATS``)."""
        return sbom_format.format_of(self.document) or SPDX

    @property
    def name(self) -> str:
        """The image the document is about."""
        return title(self.document)

    @property
    def packages(self) -> list[Listed]:
        """Its packages but the image, as a table shows them."""
        return packages(self.document)


def shown(source: Path | str, trusted: PublicKey | None, store: Store, report: Reporter = silent,
          kind: str | None = None) -> ShownSbom:
    """- a SPEC: made from the store (the image's layers, read once each; the lock; the build
      records) in the format ``kind`` (default SPDX), the same bytes for the same lock; unsigned,
      as nothing signed it yet;
    - a RECEIPT (or the SBOM file itself): the signed SBOM beside it; with ``trusted``, checked
      against the key and the receipt that names it (``sbom.attest.verified``);
    - a REF (REGISTRY/REPO:TAG or @DIGEST): the SBOM attached beside the image; with ``trusted``,
      the newest one it signed.
    A signed SBOM is shown in the format it was signed in; ``kind`` naming another is a
    ``UsageError`` (it is never converted: its signature covers the document as it is)."""
    if kind is not None:
        sbom_format.known(kind)
    path = Path(source)
    if not path.exists() and "/" in str(source) and not str(source).endswith((".json", ".yaml", ".yml")):
        artifact, attached = attached_sbom(str(source), trusted)
        return _as_asked(ShownSbom(sbom_format.parse(dsse.parse(attached, artifact).payload, artifact)[1], artifact,
                                   "valid" if trusted else UNCHECKED), kind)
    if path.suffix != ".json":
        spec, the_store, lock, image, record = stored_image(path, store, report)
        return ShownSbom(document_of(spec, lock, the_store, record, image_ref(spec, image), report, kind or SPDX),
                         "store", "unsigned (made from the store)")
    return _as_asked(ShownSbom(*signed_file(path, trusted)), kind)


def _as_asked(signed: ShownSbom, kind: str | None) -> ShownSbom:
    if kind is None or signed.format == kind:
        return signed
    raise UsageError(f"{signed.source}: the signed SBOM is {sbom_format.NAMES[signed.format]}, not "
                     f"{sbom_format.NAMES[kind]}; a signed SBOM is shown as it was signed",
                     hint=f"leave out --format, or make it from the store: `sparkimg sbom SPEC --format {kind}`; "
                     f"`sparkimg build SPEC --sbom-format {kind}` signs that format")
