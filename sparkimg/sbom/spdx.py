"""The image's SBOM as an SPDX 2.3 JSON document, written from its ``inventory``.

SPDX 2.3 is an ISO standard (ISO/IEC 5962), its JSON has an independent validator on PyPI
(``spdx-tools``, the SPDX project's own), and it is what ``docker buildx --sbom`` and apko
attach; so it is the default and what a build signs. Each inventory package is an SPDX package
(its ref prefixed ``SPDXRef-``) with a purl where one exists; the document DESCRIBES the image,
and the inventory's relationships are SPDX's own. Deterministic: ``created`` is the lock's
SOURCE_DATE_EPOCH and the namespace is made of the image's config digest, so two builds of the
same lock write the same bytes.
"""

from __future__ import annotations

from typing import Any

from sparkimg import __version__
from sparkimg._internal.times import rfc3339
from sparkimg.sbom.inventory import Inventory, Package

NOASSERTION = "NOASSERTION"


def spdx_id(ref: str) -> str:
    return f"SPDXRef-{ref}"


def _package(item: Package) -> dict[str, Any]:
    package: dict[str, Any] = {
        "SPDXID": spdx_id(item.ref), "name": item.name, "downloadLocation": item.download or NOASSERTION,
        "filesAnalyzed": False, "licenseConcluded": NOASSERTION, "licenseDeclared": NOASSERTION,
        "copyrightText": NOASSERTION, "primaryPackagePurpose": item.purpose,
    }
    if item.version:
        package["versionInfo"] = item.version
    if item.purl:
        package["externalRefs"] = [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                                    "referenceLocator": item.purl}]
    if item.checksums:
        package["checksums"] = [{"algorithm": a, "checksumValue": v} for a, v in sorted(item.checksums.items())]
    if item.comment:
        package["comment"] = item.comment
    return package


def document(inventory: Inventory) -> dict[str, Any]:
    """The SPDX 2.3 document of ``inventory``."""
    relationships = [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                      "relatedSpdxElement": spdx_id(inventory.image.ref)}]
    relationships += [{"spdxElementId": spdx_id(r.element), "relationshipType": r.type,
                       "relatedSpdxElement": spdx_id(r.related)} for r in inventory.relationships]
    return {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": inventory.name,
        "documentNamespace": inventory.namespace,
        "creationInfo": {"created": rfc3339(inventory.created), "creators": [f"Tool: sparkimg-{__version__}"],
                         "comment": "written by sparkimg from its store: the image's layers, lock and build records"
                         + (f"; package databases not read: {', '.join(inventory.unread)}"
                            if inventory.unread else "")},
        "packages": [_package(p) for p in inventory.packages],
        "relationships": relationships,
    }
