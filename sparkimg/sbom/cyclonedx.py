"""The image's SBOM as a CycloneDX 1.6 JSON document, written from its ``inventory`` (the same
packages, versions, purls and digests as the SPDX document) with cyclonedx-python-lib, the
CycloneDX project's own library: the form grype and trivy read as well as SPDX.

The mapping (docs/sbom.md has the table): the image is ``metadata.component`` (a ``container``);
every other package a component whose ``bom-ref`` is its inventory ref (its SPDX id without
``SPDXRef-``), of type ``library`` (``file`` for a patch file), with its purl, hashes
(SHA-256, MD5), the SPDX comment as ``description`` and where it was fetched from as an
external reference (``vcs`` for git, ``distribution`` for an sdist). CycloneDX has one
relationship, ``dependsOn``: SPDX's DESCENDANT_OF (the image of its base), CONTAINS and
GENERATED_FROM read as the element depending on the related one, BUILD_DEPENDENCY_OF and
RUNTIME_DEPENDENCY_OF the other way round; a build dependency's scope is ``excluded`` (not in
the image). Every component keeps its SPDX purpose in
the property ``sparkimg:purpose``.

Deterministic: the serial number is a UUID5 of the document's namespace (spec name and config
digest), the timestamp the lock's SOURCE_DATE_EPOCH, and the library orders components and
dependencies itself; so the same lock gives the same bytes. The library is imported here only,
so that other commands do not load it.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sparkimg import __version__
from sparkimg.sbom.inventory import Inventory, Package, Relationship

if TYPE_CHECKING:
    from cyclonedx.model.component import Component

SPEC_VERSION = "1.6"  # the library also writes 1.7; scanners have read 1.6 longer
PURPOSE = "sparkimg:purpose"
UNREAD = "sparkimg:unread-package-databases"


def serial_number(inventory: Inventory) -> uuid.UUID:
    """The BOM's serial number: made of the namespace, so the same image gives the same one."""
    return uuid.uuid5(uuid.NAMESPACE_URL, inventory.namespace)


def _depends(relationship: Relationship) -> tuple[str, str]:
    """(dependent, dependency) of an SPDX relationship: DESCENDANT_OF, CONTAINS and GENERATED_FROM
    read from the element to the related one; X_DEPENDENCY_OF the other way round."""
    if relationship.type in ("DESCENDANT_OF", "CONTAINS", "GENERATED_FROM"):
        return relationship.element, relationship.related
    return relationship.related, relationship.element


def _component(package: Package, excluded: bool) -> Component:
    from cyclonedx.model import ExternalReference, ExternalReferenceType, HashAlgorithm, HashType, Property, XsUri
    from cyclonedx.model.component import Component, ComponentScope, ComponentType
    from packageurl import PackageURL

    algorithms = {"SHA256": HashAlgorithm.SHA_256, "MD5": HashAlgorithm.MD5}
    kinds = {"CONTAINER": ComponentType.CONTAINER, "FILE": ComponentType.FILE}
    references = []
    if package.download:
        git = package.download.startswith("git+")
        references.append(ExternalReference(
            type=ExternalReferenceType.VCS if git else ExternalReferenceType.DISTRIBUTION,
            url=XsUri(package.download.removeprefix("git+") if git else package.download)))
    return Component(
        name=package.name, version=package.version, bom_ref=package.ref,
        type=kinds.get(package.purpose, ComponentType.LIBRARY),
        scope=ComponentScope.EXCLUDED if excluded else None,
        purl=PackageURL.from_string(package.purl) if package.purl else None,
        hashes=[HashType(alg=algorithms[a], content=v) for a, v in sorted((package.checksums or {}).items())],
        description=package.comment, external_references=references,
        properties=[Property(name=PURPOSE, value=package.purpose)])


def text(inventory: Inventory) -> str:
    """The CycloneDX 1.6 JSON document of ``inventory``, as the library writes it."""
    from cyclonedx.model import Property
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.model.tool import ToolRepository
    from cyclonedx.output.json import JsonV1Dot6

    excluded = {r.element for r in inventory.relationships if r.type == "BUILD_DEPENDENCY_OF"}
    components = {p.ref: _component(p, p.ref in excluded) for p in inventory.packages}
    image = components.pop(inventory.image.ref)
    tool = Component(type=ComponentType.APPLICATION, name="sparkimg", version=__version__)
    metadata = BomMetaData(
        component=image, tools=ToolRepository(components=[tool]),
        timestamp=datetime.fromtimestamp(inventory.created, UTC),
        properties=[Property(name=UNREAD, value=", ".join(inventory.unread))] if inventory.unread else None)
    bom = Bom(serial_number=serial_number(inventory), metadata=metadata, components=components.values())
    everything = {**components, inventory.image.ref: image}
    edges: dict[str, list[str]] = {}
    for relationship in inventory.relationships:
        dependent, dependency = _depends(relationship)
        edges.setdefault(dependent, []).append(dependency)
    for dependent, dependencies in edges.items():
        bom.register_dependency(everything[dependent], [everything[d] for d in dependencies])
    return str(JsonV1Dot6(bom).output_as_string(indent=2))


def document(inventory: Inventory) -> dict[str, Any]:
    """The CycloneDX 1.6 document of ``inventory``, as JSON data."""
    data: dict[str, Any] = json.loads(text(inventory))
    return data
