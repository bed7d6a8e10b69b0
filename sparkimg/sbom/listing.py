"""The packages an SBOM document lists, in either format, as ``sparkimg sbom`` shows them in a
table: read from the document itself, so a signed SBOM from a receipt or a registry reads the
same as one made from the store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from sparkimg.formats.sbom import format_of
from sparkimg.formats.sbom_formats import SPDX
from sparkimg.sbom.cyclonedx import PURPOSE


class Listed(NamedTuple):
    """One package of the table: its SPDX purpose (lower case), name, version, sha256 and note."""

    kind: str
    name: str
    version: str
    sha256: str
    note: str


def title(document: Mapping[str, Any]) -> str:
    """The name the document is about: the image reference."""
    if format_of(document) == SPDX:
        return str(document.get("name", ""))
    return str(document.get("metadata", {}).get("component", {}).get("name", ""))


def packages(document: Mapping[str, Any]) -> list[Listed]:
    """Every package but the image, in the document's order."""
    if format_of(document) == SPDX:
        listed = []
        for package in document.get("packages", [])[1:]:
            sums = {c["algorithm"]: c["checksumValue"] for c in package.get("checksums", [])}
            listed.append(Listed(str(package.get("primaryPackagePurpose", "")).lower(), package["name"],
                                 package.get("versionInfo", ""), sums.get("SHA256", ""), package.get("comment", "")))
        return listed
    found = []
    for component in document.get("components", []):
        sums = {h["alg"]: h["content"] for h in component.get("hashes", [])}
        purpose = next((p["value"] for p in component.get("properties", []) if p.get("name") == PURPOSE),
                       component.get("type", ""))
        found.append(Listed(str(purpose).lower(), component["name"], component.get("version", ""),
                            sums.get("SHA-256", ""), component.get("description", "")))
    return found
