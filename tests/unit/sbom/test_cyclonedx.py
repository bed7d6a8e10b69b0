"""The CycloneDX document is written from the same inventory as the SPDX one: it validates
against the CycloneDX 1.6 JSON schema (cyclonedx-python-lib's strict validator), names the same
packages with the same versions, purls and digests, mirrors SPDX's relationships as dependencies,
and is the same bytes every time (its serial number and time come from the image and the lock)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from packageurl import PackageURL

from sparkimg import __version__
from sparkimg.errors import EnvelopeError
from sparkimg.formats import sbom as sbom_format
from sparkimg.formats.sbom_formats import CYCLONEDX, FORMATS, SPDX
from sparkimg.formats.statement import Subject
from sparkimg.sbom import cyclonedx, spdx
from sparkimg.sbom.attest import written
from sparkimg.sbom.listing import packages, title

from .fixture import made

KINDS = ("path", "git", "sdist")  # how the compile layer's source is pinned


def _spdx_packages(document: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """SPDX id (without SPDXRef-) -> (name, version, purl, checksums) of every package."""
    found = {}
    for p in document["packages"]:
        purls = [r["referenceLocator"] for r in p.get("externalRefs", [])]
        found[p["SPDXID"].removeprefix("SPDXRef-")] = (
            p["name"], p.get("versionInfo"), PackageURL.from_string(purls[0]) if purls else None,
            {c["algorithm"]: c["checksumValue"] for c in p.get("checksums", [])})
    return found


def _cdx_components(document: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    names = {"SHA-256": "SHA256", "MD5": "MD5"}
    found = {}
    for c in [document["metadata"]["component"], *document["components"]]:
        found[c["bom-ref"]] = (c["name"], c.get("version"), PackageURL.from_string(c["purl"]) if "purl" in c else None,
                               {names[h["alg"]]: h["content"] for h in c.get("hashes", [])})
    return found


@pytest.mark.parametrize("kind", KINDS)
def test_the_cyclonedx_document_validates_against_the_1_6_schema(kind: str) -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    text = cyclonedx.text(made(kind))
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    document = cyclonedx.document(made(kind))
    assert document["specVersion"] == cyclonedx.SPEC_VERSION and document["bomFormat"] == "CycloneDX"


@pytest.mark.parametrize("kind", KINDS)
def test_it_names_the_packages_versions_purls_and_digests_the_spdx_document_names(kind: str) -> None:
    mine, theirs = _cdx_components(cyclonedx.document(made(kind))), _spdx_packages(spdx.document(made(kind)))
    assert mine == theirs
    assert mine["py-six-1.16.0"][3] == {"SHA256": "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254"}
    assert str(mine["Image"][2]).startswith("pkg:oci/demo@sha256:")


@pytest.mark.parametrize("kind", KINDS)
def test_its_dependencies_mirror_the_spdx_relationships(kind: str) -> None:
    document, spdx_document = cyclonedx.document(made(kind)), spdx.document(made(kind))
    edges = {(d["ref"], on) for d in document["dependencies"] for on in d.get("dependsOn", [])}
    expected = set()
    for r in spdx_document["relationships"]:
        element, related = r["spdxElementId"].removeprefix("SPDXRef-"), r["relatedSpdxElement"].removeprefix("SPDXRef-")
        if r["relationshipType"] == "DESCRIBES":
            assert related == document["metadata"]["component"]["bom-ref"]
        elif r["relationshipType"] in ("DESCENDANT_OF", "CONTAINS", "GENERATED_FROM"):
            expected.add((element, related))
        else:  # BUILD_DEPENDENCY_OF, RUNTIME_DEPENDENCY_OF: the related one depends on the element
            expected.add((related, element))
    assert edges == expected
    assert ("Image", "source-demo-kernel") in edges and ("py-sparkimg-demo-kernel-0.1.0", "source-demo-kernel") in edges
    scopes = {c["bom-ref"]: c.get("scope") for c in document["components"]}
    assert scopes["source-demo-kernel"] == "excluded" and scopes["py-six-1.16.0"] is None


def test_sources_patches_and_the_image_carry_what_spdx_says_of_them() -> None:
    git = {c["bom-ref"]: c for c in cyclonedx.document(made("git"))["components"]}
    assert git["source-demo-kernel"]["externalReferences"] == [
        {"type": "vcs", "url": "https://github.com/example/demo-kernel.git@" + "a" * 40}]
    sdist = {c["bom-ref"]: c for c in cyclonedx.document(made("sdist"))["components"]}
    assert sdist["source-demo-kernel"]["externalReferences"] == [
        {"type": "distribution", "url": "https://files.example/demo_kernel-0.3.tar.gz"}]
    assert sdist["source-demo-kernel"]["purl"] == "pkg:pypi/demo-kernel@0.3"
    patch = git["patch-demo-serve.env"]
    assert patch["type"] == "file" and {h["alg"] for h in patch["hashes"]} == {"SHA-256", "MD5"}
    image = cyclonedx.document(made("git"))["metadata"]["component"]
    assert image["type"] == "container" and image["version"] == "sha256:" + "f" * 64
    base = git["Base"]  # the image descends from it: SPDX's DESCENDANT_OF, CycloneDX's dependsOn
    assert base["type"] == "container" and base["name"] == "127.0.0.1:5000/sparkimg/demo-base:bookworm"
    assert PackageURL.from_string(base["purl"]) == PackageURL(
        "oci", None, "demo-base", "sha256:" + "8" * 64,
        {"arch": "amd64", "repository_url": "127.0.0.1:5000/sparkimg/demo-base", "tag": "bookworm"})
    assert base["hashes"] == [{"alg": "SHA-256", "content": "8" * 64}]
    on = next(d["dependsOn"] for d in cyclonedx.document(made("git"))["dependencies"] if d["ref"] == "Image")
    assert "Base" in on and set(on) == set(git)  # its base, what it contains, its build and run-time inputs


def test_the_same_image_gives_the_same_bytes_with_a_serial_number_and_time_of_its_own() -> None:
    first, second = cyclonedx.text(made("git")), cyclonedx.text(made("git"))
    assert first == second
    document, spdx_document = cyclonedx.document(made("git")), spdx.document(made("git"))
    namespace = spdx_document["documentNamespace"]
    assert document["serialNumber"] == f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, namespace)}"
    assert document["metadata"]["timestamp"] == spdx_document["creationInfo"]["created"].replace("Z", "+00:00")
    assert document["metadata"]["tools"]["components"] == [
        {"name": "sparkimg", "type": "application", "version": __version__}]


def test_both_formats_list_the_same_table() -> None:
    tables = {kind: sorted(packages(written(made("git"), kind))) for kind in FORMATS}
    assert tables[SPDX] == tables[CYCLONEDX] and len(tables[SPDX]) == len(made("git").packages) - 1
    assert title(written(made("git"), SPDX)) == title(written(made("git"), CYCLONEDX)) == "sparkimg/demo:abc"


def test_a_cyclonedx_sbom_is_attested_under_its_own_predicate_type() -> None:
    subjects = [Subject("sparkimg/demo:abc", {"sha256": "f" * 64})]
    document = cyclonedx.document(made("git"))
    payload = sbom_format.statement(document, subjects)
    assert b'"predicateType":"https://cyclonedx.org/bom"' in payload
    assert sbom_format.parse(payload, "here") == (tuple(subjects), document)
    lying = payload.replace(b"https://cyclonedx.org/bom", b"https://spdx.dev/Document/v2.3")
    with pytest.raises(EnvelopeError, match=r"not the SPDX 2\.3 document"):
        sbom_format.parse(lying, "here")
