"""The image's SBOM as an SPDX 2.3 JSON document.

SPDX rather than CycloneDX: SPDX 2.3 is an ISO standard (ISO/IEC 5962), its JSON has an
independent validator on PyPI (``spdx-tools``, the SPDX project's own), and it is what
``docker buildx --sbom`` and apko attach. Everything sparkimg knows goes in, each as an SPDX
package with a purl where one exists:

- the image (``CONTAINER``), named by its manifest digest, with the CPU audit's count of the ELF
  files in the layers sparkimg wrote, by machine;
- every Debian package dpkg recorded in it (``pkg:deb/debian/NAME@VERSION?arch=ARCH``);
- every Python distribution in its site-packages (``pkg:pypi/NAME@VERSION``), with the wheel's
  sha256 where sparkimg installed it;
- each compile layer's source (git commit or sdist sha256), and the shared objects the layer
  built, each with its CPU and the CUDA architectures its cubins and PTX carry (the audits' reading);
- each patch file, by sha256 and md5 (a set baked into the image is CONTAINED by it; a set
  mounted at run time is a RUNTIME_DEPENDENCY_OF it).

Relationships: the document DESCRIBES the image; the image CONTAINS each package in it; a
compiled library and the wheel that carried it are GENERATED_FROM their source, which is a
BUILD_DEPENDENCY_OF the image. Deterministic: packages in a fixed order, ids from names,
``created`` the lock's SOURCE_DATE_EPOCH, the namespace from the image's config digest, so two
builds of the same lock write the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from sparkimg import __version__
from sparkimg._internal.times import rfc3339
from sparkimg.compile import machines
from sparkimg.formats.canonical import hex_of
from sparkimg.formats.lockfile import GitPin, PypiPin
from sparkimg.formats.oci import ImageRecord
from sparkimg.formats.record import LayerRecord
from sparkimg.formats.scheme import canonical_name
from sparkimg.lock.resolve import Lock
from sparkimg.sbom.contents import Contents
from sparkimg.spec import CompileLayer, Spec

NOASSERTION = "NOASSERTION"


def _id(kind: str, name: str) -> str:
    return f"SPDXRef-{kind}-" + re.sub(r"[^A-Za-z0-9.-]+", "-", name).strip("-")


def _package(spdx_id: str, name: str, version: str | None, *, purpose: str, download: str = NOASSERTION,
             purl: str | None = None, checksums: Mapping[str, str] | None = None,
             comment: str | None = None) -> dict[str, Any]:
    package: dict[str, Any] = {
        "SPDXID": spdx_id, "name": name, "downloadLocation": download, "filesAnalyzed": False,
        "licenseConcluded": NOASSERTION, "licenseDeclared": NOASSERTION, "copyrightText": NOASSERTION,
        "primaryPackagePurpose": purpose,
    }
    if version:
        package["versionInfo"] = version
    if purl:
        package["externalRefs"] = [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                                    "referenceLocator": purl}]
    if checksums:
        package["checksums"] = [{"algorithm": a, "checksumValue": v} for a, v in sorted(checksums.items())]
    if comment:
        package["comment"] = comment
    return package


def _wheel_name(filename: str) -> tuple[str, str]:
    """(canonical name, version) of a wheel file name (PEP 427)."""
    parts = filename.split("-")
    return canonical_name(parts[0]), parts[1] if len(parts) > 1 else ""


def _archs(report: Mapping[str, Any]) -> str:
    cubins = ", ".join(f"sm_{sm}" for sm in report.get("cubin_sm", []))
    ptx = ", ".join(f"compute_{sm}" for sm in report.get("ptx_sm", []))
    cpu = f"CPU {report['machine']}; " if report.get("machine") else ""
    return f"{cpu}CUDA architectures: cubin {cubins or 'none'}; PTX {ptx or 'none'}"


def _census(record: ImageRecord, platform: str) -> str:
    """The CPU audit in words: the ELF files of the layers sparkimg wrote, by machine."""
    counts: dict[str, int] = {}
    for layer in record.layers:
        for name, count in layer.machines or ():
            counts[name] = counts.get(name, 0) + count
    return f"ELF files in the layers sparkimg wrote, audited for {platform}: {machines.summary(counts)}"


def document(spec: Spec, lock: Lock, record: ImageRecord, contents: Contents,
             records: Mapping[str, LayerRecord], image_ref: str) -> dict[str, Any]:
    """The SPDX 2.3 document of the image ``record`` assembled from ``spec`` and ``lock``."""
    image_id = "SPDXRef-Image"
    packages = [_package(image_id, image_ref, record.config_digest, purpose="CONTAINER",
                         purl=f"pkg:oci/{quote(spec.image.rsplit('/', 1)[-1])}@{quote(record.manifest_digest)}"
                         f"?repository_url={quote(spec.image, safe='')}",
                         checksums={"SHA256": hex_of(record.manifest_digest)},
                         comment=f"manifest {record.manifest_digest}, config {record.config_digest}; "
                         f"{_census(record, lock.platform)}")]
    relationships = [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                      "relatedSpdxElement": image_id}]

    def contains(package: dict[str, Any]) -> None:
        packages.append(package)
        relationships.append({"spdxElementId": image_id, "relationshipType": "CONTAINS",
                              "relatedSpdxElement": package["SPDXID"]})

    for deb in contents.debs:
        arch = f"?arch={quote(deb.architecture)}" if deb.architecture else ""
        contains(_package(_id("deb", f"{deb.name}-{deb.architecture}"), deb.name, deb.version, purpose="LIBRARY",
                          purl=f"pkg:deb/debian/{quote(deb.name)}@{quote(deb.version)}{arch}",
                          comment=f"source package {deb.source}" if deb.source else None))

    wheels: dict[tuple[str, str], tuple[str, str | None]] = {}  # (name, version) -> (sha256, compile layer)
    for pinned in lock.sources.values():
        if isinstance(pinned, PypiPin) and pinned.dist == "wheel":
            wheels[(canonical_name(pinned.package), pinned.version)] = (pinned.sha256, None)
    for layer_name, made in records.items():
        for output in made.outputs:
            wheels[_wheel_name(output.filename)] = (output.sha256, layer_name)
    generated: list[tuple[str, str]] = []  # (SPDX id, compile layer)
    for dist in contents.python:
        key = (canonical_name(dist.name), dist.version)
        sha256, built_by = wheels.get(key, ("", None))
        installed = f"installed at /{dist.path}" + (" from the wheel sparkimg installed" if sha256 else "")
        package = _package(_id("py", f"{key[0]}-{dist.version}"), dist.name, dist.version, purpose="LIBRARY",
                           purl=f"pkg:pypi/{quote(key[0])}@{quote(dist.version)}",
                           checksums={"SHA256": sha256} if sha256 else None, comment=installed)
        contains(package)
        if built_by is not None:
            generated.append((package["SPDXID"], built_by))

    for layer in spec.layers:
        if not isinstance(layer, CompileLayer):
            continue
        pin = lock.sources.get(layer.source)
        source_id = _id("source", layer.source)
        if isinstance(pin, GitPin):
            packages.append(_package(source_id, layer.source, pin.commit, purpose="SOURCE",
                                     download=f"git+{pin.url}@{pin.commit}",
                                     comment=f"git {pin.url} commit {pin.commit} (tree {pin.tree})"))
        elif isinstance(pin, PypiPin):
            packages.append(_package(source_id, pin.package, pin.version, purpose="SOURCE", download=pin.url,
                                     purl=f"pkg:pypi/{quote(canonical_name(pin.package))}@{quote(pin.version)}",
                                     checksums={"SHA256": pin.sha256}, comment=f"sdist {pin.filename}"))
        else:
            digest = getattr(pin, "sha256", None)
            packages.append(_package(source_id, layer.source, None, purpose="SOURCE",
                                     checksums={"SHA256": digest} if digest else None,
                                     comment="a folder of the project, pinned by the sha256 of its tree"))
        relationships.append({"spdxElementId": source_id, "relationshipType": "BUILD_DEPENDENCY_OF",
                              "relatedSpdxElement": image_id})
        for spdx_id, by in generated:
            if by == layer.name:
                relationships.append({"spdxElementId": spdx_id, "relationshipType": "GENERATED_FROM",
                                      "relatedSpdxElement": source_id})
        compiled = records.get(layer.name)
        for report in (compiled.audit if compiled else ()):
            wheel, _, member = str(report.get("file", "")).partition("!")
            library = _package(_id("so", f"{layer.name}-{member or wheel}"), member or wheel, None, purpose="LIBRARY",
                               comment=f"{_archs(report)}; built by compile layer {layer.name} into {wheel} "
                               f"for {', '.join(lock.model.cuda_architectures)}")
            contains(library)
            relationships.append({"spdxElementId": library["SPDXID"], "relationshipType": "GENERATED_FROM",
                                  "relatedSpdxElement": source_id})

    for set_name, patch_set in sorted(lock.patches.items()):
        for item in patch_set.files:
            patch = _package(_id("patch", f"{set_name}-{item.file}"), f"{patch_set.dir}/{item.file}", None,
                             purpose="FILE", checksums={"SHA256": item.sha256, "MD5": item.md5},
                             comment=f"patch set {set_name} ({patch_set.mode}), at {item.mount} in the container")
            if patch_set.mode == "bake":
                contains(patch)
            else:  # mounted read-only at run time (`sparkimg run-args`): beside the image, not in it
                packages.append(patch)
                relationships.append({"spdxElementId": patch["SPDXID"], "relationshipType": "RUNTIME_DEPENDENCY_OF",
                                      "relatedSpdxElement": image_id})

    return {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": image_ref,
        "documentNamespace": f"https://sparkimg.dev/spdx/{quote(spec.name)}/{hex_of(record.config_digest)}",
        "creationInfo": {"created": rfc3339(lock.source_date_epoch), "creators": [f"Tool: sparkimg-{__version__}"],
                         "comment": "written by sparkimg from its store: the image's layers, lock and build records"
                         + (f"; package databases not read: {', '.join(contents.unread)}" if contents.unread else "")},
        "packages": packages,
        "relationships": relationships,
    }
