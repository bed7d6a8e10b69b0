"""What the image's SBOM says, whatever its format: the packages and their relationships.

The one source both writers render (``spdx`` and ``cyclonedx``), so the two formats always name
the same packages with the same versions, purls and digests. Everything sparkimg knows goes in:

- the image (``CONTAINER``), named by its manifest digest, with the CPU audit's count of the ELF
  files in the layers sparkimg wrote, by machine;
- the base image it was built on (``CONTAINER``, ``pkg:oci/NAME@MANIFEST?repository_url=…``),
  as the lock pins it;
- every Debian package dpkg recorded in it (``pkg:deb/debian/NAME@VERSION?arch=ARCH``);
- every Python distribution in its site-packages (``pkg:pypi/NAME@VERSION``), with the wheel's
  sha256 where sparkimg installed it;
- each compile layer's source (git commit or sdist sha256), and the shared objects the layer
  built, each with its CPU and the CUDA architectures its cubins and PTX carry (the audits' reading);
- each patch file, by sha256 and md5 (a set baked into the image is CONTAINED by it; a set
  mounted at run time is a RUNTIME_DEPENDENCY_OF it).

Relationships use SPDX 2.3's words (the first format sparkimg wrote): the image is a
DESCENDANT_OF its base and CONTAINS each package in it; a compiled library and the wheel that
carried it are GENERATED_FROM their source, which is a BUILD_DEPENDENCY_OF the image.
Deterministic: packages in a fixed order, ids from names, the time the lock's SOURCE_DATE_EPOCH.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from sparkimg.compile import machines
from sparkimg.formats.canonical import hex_of
from sparkimg.formats.lockfile import GitPin, PypiPin
from sparkimg.formats.oci import ImageRecord
from sparkimg.formats.record import LayerRecord
from sparkimg.formats.scheme import canonical_name
from sparkimg.lock.resolve import Lock
from sparkimg.sbom.contents import Contents
from sparkimg.spec import CompileLayer, Spec

Purpose = Literal["CONTAINER", "LIBRARY", "SOURCE", "FILE"]  # SPDX 2.3 primaryPackagePurpose
RelationshipType = Literal["DESCENDANT_OF", "CONTAINS", "GENERATED_FROM", "BUILD_DEPENDENCY_OF",
                           "RUNTIME_DEPENDENCY_OF"]
IMAGE = "Image"  # the image's ref
BASE = "Base"  # its base image's


@dataclass(frozen=True)
class Package:
    """One thing the SBOM names. ``ref`` is unique in the inventory, made of the package's kind
    and name (``deb-python3-amd64``); ``checksums`` is keyed by SPDX algorithm names (SHA256, MD5)."""

    ref: str
    name: str
    version: str | None
    purpose: Purpose
    download: str | None = None  # where its bytes came from (a git+URL@commit, an sdist's URL)
    purl: str | None = None
    checksums: Mapping[str, str] | None = None
    comment: str | None = None


@dataclass(frozen=True)
class Relationship:
    """``element`` RELATIONSHIP ``related``, both package refs, in SPDX 2.3's words."""

    element: str
    type: RelationshipType
    related: str


@dataclass(frozen=True)
class Inventory:
    """An image's packages (the image first) and their relationships, in a fixed order."""

    name: str  # the image reference the document is named for
    spec_name: str
    config_digest: str
    created: int  # the lock's SOURCE_DATE_EPOCH
    unread: tuple[str, ...]  # package databases of kinds not read (apk, rpm)
    packages: tuple[Package, ...]
    relationships: tuple[Relationship, ...]

    @property
    def image(self) -> Package:
        return self.packages[0]

    @property
    def namespace(self) -> str:
        """The URI either document is known by: the spec's name and the image's config digest
        (SPDX's ``documentNamespace``; CycloneDX's serial number is a UUID made of it)."""
        return f"https://sparkimg.dev/spdx/{quote(self.spec_name)}/{hex_of(self.config_digest)}"


def _ref(kind: str, name: str) -> str:
    return f"{kind}-" + re.sub(r"[^A-Za-z0-9.-]+", "-", name).strip("-")


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


def inventory(spec: Spec, lock: Lock, record: ImageRecord, contents: Contents,
              records: Mapping[str, LayerRecord], image_ref: str) -> Inventory:
    """The packages of the image ``record`` assembled from ``spec`` and ``lock``: what its layers
    hold (``contents``), the compile layers' ``records`` and the lock's sources and patches."""
    packages = [Package(IMAGE, image_ref, record.config_digest, "CONTAINER",
                        purl=f"pkg:oci/{quote(spec.image.rsplit('/', 1)[-1])}@{quote(record.manifest_digest)}"
                        f"?repository_url={quote(spec.image, safe='')}",
                        checksums={"SHA256": hex_of(record.manifest_digest)},
                        comment=f"manifest {record.manifest_digest}, config {record.config_digest}; "
                        f"{_census(record, lock.platform)}")]
    base = lock.base
    name = base.repository.rsplit("/", 1)[-1]
    arch = base.platform.split("/")[1] if "/" in base.platform else ""
    qualifiers = "&".join(f"{k}={quote(v, safe='')}" for k, v in (("arch", arch),
                          ("repository_url", base.repository), ("tag", base.tag or "")) if v)
    packages.append(Package(BASE, base.reference, base.config_digest, "CONTAINER",
                            purl=f"pkg:oci/{quote(name)}@{quote(base.manifest_digest)}?{qualifiers}",
                            checksums={"SHA256": hex_of(base.manifest_digest)},
                            comment=f"the base image, manifest {base.manifest_digest}, config {base.config_digest}"
                            + (f", of the index {base.index_digest}" if base.index_digest else "")
                            + f", for {base.platform}"))
    relationships = [Relationship(IMAGE, "DESCENDANT_OF", BASE)]

    def contains(package: Package) -> None:
        packages.append(package)
        relationships.append(Relationship(IMAGE, "CONTAINS", package.ref))

    for deb in contents.debs:
        arch = f"?arch={quote(deb.architecture)}" if deb.architecture else ""
        contains(Package(_ref("deb", f"{deb.name}-{deb.architecture}"), deb.name, deb.version, "LIBRARY",
                         purl=f"pkg:deb/debian/{quote(deb.name)}@{quote(deb.version)}{arch}",
                         comment=f"source package {deb.source}" if deb.source else None))

    wheels: dict[tuple[str, str], tuple[str, str | None]] = {}  # (name, version) -> (sha256, compile layer)
    for pinned in lock.sources.values():
        if isinstance(pinned, PypiPin) and pinned.dist == "wheel":
            wheels[(canonical_name(pinned.package), pinned.version)] = (pinned.sha256, None)
    for layer_name, made in records.items():
        for output in made.outputs:
            wheels[_wheel_name(output.filename)] = (output.sha256, layer_name)
    generated: list[tuple[str, str]] = []  # (package ref, compile layer)
    for dist in contents.python:
        key = (canonical_name(dist.name), dist.version)
        sha256, built_by = wheels.get(key, ("", None))
        installed = f"installed at /{dist.path}" + (" from the wheel sparkimg installed" if sha256 else "")
        package = Package(_ref("py", f"{key[0]}-{dist.version}"), dist.name, dist.version, "LIBRARY",
                          purl=f"pkg:pypi/{quote(key[0])}@{quote(dist.version)}",
                          checksums={"SHA256": sha256} if sha256 else None, comment=installed)
        contains(package)
        if built_by is not None:
            generated.append((package.ref, built_by))

    for layer in spec.layers:
        if not isinstance(layer, CompileLayer):
            continue
        pin = lock.sources.get(layer.source)
        source_ref = _ref("source", layer.source)
        if isinstance(pin, GitPin):
            packages.append(Package(source_ref, layer.source, pin.commit, "SOURCE",
                                    download=f"git+{pin.url}@{pin.commit}",
                                    comment=f"git {pin.url} commit {pin.commit} (tree {pin.tree})"))
        elif isinstance(pin, PypiPin):
            packages.append(Package(source_ref, pin.package, pin.version, "SOURCE", download=pin.url,
                                    purl=f"pkg:pypi/{quote(canonical_name(pin.package))}@{quote(pin.version)}",
                                    checksums={"SHA256": pin.sha256}, comment=f"sdist {pin.filename}"))
        else:
            digest = getattr(pin, "sha256", None)
            packages.append(Package(source_ref, layer.source, None, "SOURCE",
                                    checksums={"SHA256": digest} if digest else None,
                                    comment="a folder of the project, pinned by the sha256 of its tree"))
        relationships.append(Relationship(source_ref, "BUILD_DEPENDENCY_OF", IMAGE))
        for ref, by in generated:
            if by == layer.name:
                relationships.append(Relationship(ref, "GENERATED_FROM", source_ref))
        compiled = records.get(layer.name)
        for report in (compiled.audit if compiled else ()):
            wheel, _, member = str(report.get("file", "")).partition("!")
            library = Package(_ref("so", f"{layer.name}-{member or wheel}"), member or wheel, None, "LIBRARY",
                              comment=f"{_archs(report)}; built by compile layer {layer.name} into {wheel} "
                              f"for {', '.join(lock.model.cuda_architectures)}")
            contains(library)
            relationships.append(Relationship(library.ref, "GENERATED_FROM", source_ref))

    for set_name, patch_set in sorted(lock.patches.items()):
        for item in patch_set.files:
            patch = Package(_ref("patch", f"{set_name}-{item.file}"), f"{patch_set.dir}/{item.file}", None, "FILE",
                            checksums={"SHA256": item.sha256, "MD5": item.md5},
                            comment=f"patch set {set_name} ({patch_set.mode}), at {item.mount} in the container")
            if patch_set.mode == "bake":
                contains(patch)
            else:  # mounted read-only at run time (`sparkimg run-args`): beside the image, not in it
                packages.append(patch)
                relationships.append(Relationship(patch.ref, "RUNTIME_DEPENDENCY_OF", IMAGE))

    return Inventory(image_ref, spec.name, record.config_digest, lock.source_date_epoch,
                     tuple(contents.unread), tuple(packages), tuple(relationships))
