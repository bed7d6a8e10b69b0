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
from collections.abc import Iterable
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

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


def stacked(layers: Iterable[Path]) -> dict[str, bytes | None]:
    """The wanted files the stacked ``layers`` leave at the top: path -> bytes (None: there, but
    too large to keep)."""
    top: dict[str, bytes | None] = {}
    for blob in layers:
        removed: list[str] = []
        added: dict[str, bytes | None] = {}
        try:
            with open_archive(blob) as archive:
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
                        added[name] = handle.read() if handle is not None else None
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise BuildError(f"layer {blob.name}: cannot read it: {exc}",
                             hint="the store's copy is damaged; remove it and build again") from None
        for gone in removed:
            for path in [p for p in top if _under(p, gone)]:
                del top[path]
        top.update(added)
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


def read(layers: Iterable[Path]) -> Contents:
    """What the image made of ``layers`` (blob files, base first) holds."""
    top = stacked(layers)
    contents = Contents()
    for path, data in sorted(top.items()):
        if path == DPKG_STATUS and data is not None:
            contents.debs = debs(data)
        elif path in OTHER_DATABASES:
            contents.unread.append(f"{OTHER_DATABASES[path]} ({path})")
        elif data is not None:
            headers = HeaderParser().parsestr(data.decode("utf-8", "replace"), headersonly=True)
            name, version = headers.get("Name"), headers.get("Version")
            folder = _dist_folder(path)
            if name and version and folder is not None:
                contents.python.append(PythonDist(str(name), str(version), folder))
    contents.python.sort(key=lambda d: (d.name.lower(), d.version, d.path))
    return contents
