"""A base image's Python install scheme (``sparkimg-scheme/v3``): what its interpreter says.

``build.pyscheme`` asks the base once (a small script in a ``--network none`` container) and
keeps the answer as a store record (``records/schemes/``) keyed by the base's config digest;
``build.wheels`` reads it to install wheels where pip would and to remove what an installed
older version leaves behind. The record's text comes from inside an image, so every field is
checked: a damaged record is bad input naming the field. No I/O here.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from sparkimg.errors import UsageError

SCHEMA = "sparkimg-scheme/v3"  # 2: links; 3: glibc
SCHEME_KEYS = ("purelib", "platlib", "scripts", "data", "headers")

# PEP 503: lower case, each run of -, _ and . one -.
_CANONICAL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_PYTHON_VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+[a-z0-9+]*$")
_GLIBC = re.compile(r"^[0-9]{1,3}\.[0-9]{1,3}$")
_FIELDS = {"schema", "interpreter", "python_version", "paths", "installed", "links", "glibc"}
_DIST_FIELDS = {"name", "version", "dist_info", "files", "owned_dirs"}


def canonical_name(name: str) -> str:
    """A distribution name as PEP 503 normalises it: ``Foo_Bar.baz`` is ``foo-bar-baz``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def image_path(path: str) -> bool:
    """An absolute, normalised path in an image (no ``.``, ``..`` or empty part, not ``/``) with
    no control character. Spaces are allowed: installed files may have them."""
    parts = path.split("/")[1:]
    return (path.startswith("/") and bool(parts) and not any(p in ("", ".", "..") for p in parts)
            and not any(ord(c) < 32 or ord(c) == 127 for c in path))


def _plain(text: str) -> bool:
    return bool(text) and not any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text)


@dataclass(frozen=True)
class InstalledDist:
    """One distribution installed in the base's purelib or platlib.

    ``files`` are the files its RECORD (or an egg-info's ``installed-files.txt``) lists that
    exist in the image, as absolute normalised paths (``../../../bin/x`` resolved).
    ``owned_dirs`` are the folders below a scheme folder whose every file on disk is one of
    ``files`` (pip's ``compress_for_rename``): removing the distribution removes the folder.
    Empty ``files`` means the installer recorded no file list (pip refuses to uninstall those).
    """

    name: str
    version: str
    dist_info: str
    files: tuple[str, ...]
    owned_dirs: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "dist_info": self.dist_info,
                "files": list(self.files), "owned_dirs": list(self.owned_dirs)}


@dataclass(frozen=True)
class BaseScheme:
    """Where pip, run as root with the base's ``python3``, installs, and what is there already.

    ``interpreter`` is the shebang pip writes into entry-point scripts (``sys.executable`` of
    ``python3``, not resolved through links). ``paths`` holds the five scheme folders;
    ``headers`` is the include folder, under which pip puts each distribution's headers in a
    folder of its name.
    """

    interpreter: str
    python_version: str
    paths: dict[str, str]
    installed: tuple[InstalledDist, ...]
    # Symbolic links to folders near the root of the base (``/lib -> usr/lib`` on a merged-/usr
    # system, ``/var/run -> /run``, a venv's ``lib64 -> lib``): link path -> target as written.
    links: dict[str, str] = field(default_factory=dict)
    # The C library's version (``2.36``), which bounds the manylinux wheels the base can load
    # (``_internal.wheeltags``); None when the base's libc is not glibc.
    glibc: str | None = None

    def resolve(self, path: str) -> str:
        """``path`` (absolute) with every folder link of the base followed, as the kernel would:
        a layer must write through ``/lib`` to ``/usr/lib``, or it replaces the link by a folder."""
        parts = [p for p in path.split("/") if p]
        for _ in range(64):
            for i in range(1, len(parts) + 1):
                prefix = "/" + "/".join(parts[:i])
                target = self.links.get(prefix)
                if target is None:
                    continue
                base = target if target.startswith("/") else posixpath.join(posixpath.dirname(prefix), target)
                parts = [p for p in posixpath.normpath(base).split("/") if p] + parts[i:]
                break
            else:
                return "/" + "/".join(parts)
        raise UsageError(f"{path}: too many symbolic links in the base", hint="check the base's folder links")

    def named(self, name: str) -> tuple[InstalledDist, ...]:
        """The installed distributions of a canonical name (two dist-info folders of one name happen)."""
        return tuple(d for d in self.installed if d.name == name)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "interpreter": self.interpreter, "python_version": self.python_version,
                "paths": dict(self.paths), "installed": [d.to_json() for d in self.installed],
                "links": dict(sorted(self.links.items())), "glibc": self.glibc}

    @classmethod
    def from_json(cls, data: Any, where: str) -> BaseScheme:
        """The scheme a record holds; anything else is a ``UsageError`` naming ``where`` and the field."""

        def fail(field: str, what: str, found: Any) -> UsageError:
            return UsageError(f"{where}: {field} must be {what}, found {found!r}"[:400],
                              hint="remove the record; the next build asks the base again")

        def path(value: Any, field: str) -> str:
            if not isinstance(value, str) or not image_path(value):
                raise fail(field, "an absolute normalised path", value)
            return value

        def paths(value: Any, field: str) -> tuple[str, ...]:
            if not isinstance(value, list):
                raise fail(field, "a list", value)
            found = tuple(path(v, f"{field}[{i}]") for i, v in enumerate(value))
            if list(found) != sorted(set(found)):
                raise fail(field, "sorted and without repeats", value)
            return found

        if not isinstance(data, dict):
            raise fail("(top level)", "an object", type(data).__name__)
        if data.get("schema") != SCHEMA:
            raise fail("schema", repr(SCHEMA), data.get("schema"))
        if set(data) != _FIELDS:
            raise fail("(top level)", f"exactly the fields {sorted(_FIELDS)}", sorted(data))
        interpreter = path(data["interpreter"], "interpreter")  # with a space, scripts start via /bin/sh
        version = data["python_version"]
        if not isinstance(version, str) or not _PYTHON_VERSION.match(version):
            raise fail("python_version", "a Python version (3.11.2)", version)
        raw = data["paths"]
        if not isinstance(raw, dict) or set(raw) != set(SCHEME_KEYS):
            raise fail("paths", f"an object with exactly {', '.join(SCHEME_KEYS)}", raw)
        scheme = {key: path(raw[key], f"paths.{key}") for key in SCHEME_KEYS}
        if not isinstance(data["installed"], list):
            raise fail("installed", "a list", data["installed"])
        installed: list[InstalledDist] = []
        for i, item in enumerate(data["installed"]):
            at = f"installed[{i}]"
            if not isinstance(item, dict) or set(item) != _DIST_FIELDS:
                raise fail(at, f"an object with exactly {sorted(_DIST_FIELDS)}", item)
            name, dist_version = item["name"], item["version"]
            if not isinstance(name, str) or not _CANONICAL.match(name):
                raise fail(f"{at}.name", "a canonical (PEP 503) distribution name", name)
            if not isinstance(dist_version, str) or not _plain(dist_version):
                raise fail(f"{at}.version", "a version with no space", dist_version)
            installed.append(InstalledDist(name, dist_version, path(item["dist_info"], f"{at}.dist_info"),
                                           paths(item["files"], f"{at}.files"),
                                           paths(item["owned_dirs"], f"{at}.owned_dirs")))
        order = [(d.name, d.dist_info) for d in installed]
        if order != sorted(set(order)):
            raise fail("installed", "sorted by name and dist_info, without repeats", order)
        raw_links = data["links"]
        if not isinstance(raw_links, dict):
            raise fail("links", "an object", raw_links)
        links = {path(k, "links"): v for k, v in raw_links.items()}
        for key, target in links.items():
            if not isinstance(target, str) or not target or "\0" in target or len(target) > 4096:
                raise fail(f"links[{key!r}]", "a link target", target)
        glibc = data["glibc"]
        if glibc is not None and (not isinstance(glibc, str) or not _GLIBC.match(glibc)):
            raise fail("glibc", "a glibc version (2.36) or null", glibc)
        return cls(interpreter, version, scheme, tuple(installed), links, glibc)
