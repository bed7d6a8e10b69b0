"""What an image holds, read from its layers without running it: the Debian packages dpkg
recorded and the Python distributions installed in it.

The layers are read in order, as an engine stacks them (OCI image-spec ``layer.md``): each
layer's whiteouts (``.wh.NAME``, and ``.wh..wh..opq`` for a folder made opaque) remove what
the layers below it put there, then its own files are added. What is left at the top is the
image's file system, of which only two kinds of file are kept here: ``var/lib/dpkg/status``
and every distribution's metadata in a ``site-packages`` or ``dist-packages`` folder
(``*.dist-info/METADATA``, ``*.egg-info/PKG-INFO``, or an ``*.egg-info`` file). apk and
rpm databases are noticed and reported as not read, never guessed at.
"""

from __future__ import annotations

import posixpath
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from sparkimg._internal.fs.tars import open_archive
from sparkimg.errors import BuildError

DPKG_STATUS = "var/lib/dpkg/status"
OTHER_DATABASES = {"lib/apk/db/installed": "apk", "var/lib/rpm/rpmdb.sqlite": "rpm", "var/lib/rpm/Packages": "rpm"}
METADATA_MAX = 4 << 20  # bytes of one METADATA or of dpkg's status file kept; a larger one is not read


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    architecture: str
    source: str | None


@dataclass(frozen=True)
class PythonDist:
    name: str
    version: str
    path: str  # the dist-info folder in the image, without the leading /


@dataclass
class Contents:
    debs: list[DebPackage] = field(default_factory=list)
    python: list[PythonDist] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # package databases of kinds not read (apk, rpm)


def _wanted(name: str) -> bool:
    if name == DPKG_STATUS or name in OTHER_DATABASES:
        return True
    return _dist_folder(name) is not None


def _dist_folder(name: str) -> str | None:
    """The distribution a metadata file describes (its ``.dist-info`` or ``.egg-info`` path), or None:
    ``NAME.dist-info/METADATA``, ``NAME.egg-info/PKG-INFO``, or an ``NAME.egg-info`` file (what
    setuptools and Debian's python3-* packages leave), in a site-packages or dist-packages folder."""
    if "/site-packages/" not in name and "/dist-packages/" not in name:
        return None
    parent, base = posixpath.split(name)
    if (base == "METADATA" and parent.endswith(".dist-info")) or (base == "PKG-INFO" and parent.endswith(".egg-info")):
        return parent
    return name if base.endswith(".egg-info") else None


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")


@dataclass(frozen=True)
class LayerReading:
    """What one layer says to the SBOM: the paths its whiteouts remove from the layers below, and
    the wanted files it adds, each already parsed (``_fact``). Small, so it is kept in the store
    by the layer's digest (``sbom.image``) and a base layer is read once, whatever is built on it."""

    removed: tuple[str, ...]
    added: Mapping[str, Mapping[str, Any]]  # path -> {"debs": [...]} | {"dist": [name, version]} | {"other": kind} | {}

    def to_json(self) -> dict[str, Any]:
        return {"removed": list(self.removed), "added": {k: dict(v) for k, v in sorted(self.added.items())}}

    @classmethod
    def from_json(cls, data: Any) -> LayerReading | None:
        """The reading a record holds; None when it is not one (then the layer is read again)."""
        if not isinstance(data, dict) or not isinstance(data.get("removed"), list) \
                or not isinstance(data.get("added"), dict):
            return None
        if not all(isinstance(r, str) for r in data["removed"]) or not all(
                isinstance(k, str) and isinstance(v, dict) for k, v in data["added"].items()):
            return None
        return cls(tuple(data["removed"]), data["added"])


def _fact(name: str, data: bytes | None) -> dict[str, Any]:
    """A wanted file, parsed: dpkg's packages, a distribution's name and version, or the kind of a
    database not read; empty for a file too large to read or without a name and version."""
    if name in OTHER_DATABASES:
        return {"other": OTHER_DATABASES[name]}
    if data is None:
        return {}
    if name == DPKG_STATUS:
        return {"debs": [[p.name, p.version, p.architecture, p.source] for p in debs(data)]}
    headers = HeaderParser().parsestr(data.decode("utf-8", "replace"), headersonly=True)
    found, version = headers.get("Name"), headers.get("Version")
    return {"dist": [str(found), str(version)]} if found and version else {}


def read_layer(archive: tarfile.TarFile) -> LayerReading:
    """One layer's whiteouts and wanted files, read from its open tar (a file or a stream)."""
    removed: list[str] = []
    added: dict[str, dict[str, Any]] = {}
    for info in archive:
        name = info.name
        while name.startswith("./"):
            name = name[2:]
        name = posixpath.normpath(name.lstrip("/"))
        folder, base = posixpath.split(name)
        if base == ".wh..wh..opq":
            removed.append(folder)
        elif base.startswith(".wh."):
            removed.append(posixpath.join(folder, base[4:]))
        elif info.isreg() and _wanted(name):
            handle = archive.extractfile(info) if info.size <= METADATA_MAX else None
            added[name] = _fact(name, handle.read() if handle is not None else None)
    return LayerReading(tuple(removed), added)


def read_layer_file(blob: Path) -> LayerReading:
    """``read_layer`` of a layer blob on disk (a tar, compressed or not)."""
    try:
        with open_archive(blob) as archive:
            return read_layer(archive)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BuildError(f"layer {blob.name}: cannot read it: {exc}",
                         hint="the store's copy is damaged; remove it and build again") from None


def stacked(readings: Iterable[LayerReading]) -> dict[str, Mapping[str, Any]]:
    """The wanted files the stacked layers leave at the top, base first: path -> parsed file."""
    top: dict[str, Mapping[str, Any]] = {}
    for reading in readings:
        for gone in reading.removed:
            for path in [p for p in top if _under(p, gone)]:
                del top[path]
        top.update(reading.added)
    return top


def debs(status: bytes) -> list[DebPackage]:
    """The installed packages of a dpkg status file, by name."""
    found: list[DebPackage] = []
    for paragraph in status.decode("utf-8", "replace").split("\n\n"):
        fields: dict[str, str] = {}
        for line in paragraph.splitlines():
            if line[:1] not in (" ", "\t") and ":" in line:
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
        if fields.get("Package") and fields.get("Status", "").endswith(" installed"):
            source = fields.get("Source", "").split(" ")[0] or None
            found.append(DebPackage(fields["Package"], fields.get("Version", ""), fields.get("Architecture", ""),
                                    source))
    return sorted(found, key=lambda p: (p.name, p.architecture))


def read(readings: Iterable[LayerReading]) -> Contents:
    """What the image made of these layers (base first) holds."""
    contents = Contents()
    for path, fact in sorted(stacked(readings).items()):
        if "debs" in fact:
            contents.debs = [DebPackage(*row) for row in fact["debs"]]
        elif "other" in fact:
            contents.unread.append(f"{fact['other']} ({path})")
        elif "dist" in fact and (folder := _dist_folder(path)) is not None:
            contents.python.append(PythonDist(str(fact["dist"][0]), str(fact["dist"][1]), folder))
    contents.python.sort(key=lambda d: (d.name.lower(), d.version, d.path))
    return contents
