"""Run by sparkimg inside a base image, never imported: ``python3 THIS OUT.json``.

Writes what the base's ``python3`` says about where pip, run as root, installs (the scheme),
the shebang pip writes into scripts, and every distribution installed in purelib/platlib
with its files and the folders it owns. ``build.pyscheme`` reads the answer into
``formats.scheme.BaseScheme`` (``sparkimg-scheme/v3``), which checks every field.

Standard library only, and Python 3.7 or later: it runs under whatever the base has.
"""

from __future__ import annotations

import csv
import email.parser
import json
import os
import posixpath
import re
import sys
import sysconfig


def _norm(path: str) -> str:
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/") if path.startswith("//") else path


def _pip_scheme() -> dict[str, str]:
    """The folders pip's ``get_scheme`` gives a root install with no options.

    pip reads sysconfig from Python 3.10 on (``get_preferred_scheme("prefix")``: ``posix_local``
    on Debian, ``venv`` in a virtual environment) and distutils before. Headers: the include
    folder (pip adds the distribution's name), ``PREFIX/include/site/pythonX.Y`` in a venv.
    """
    in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
    paths: dict[str, str] = {}
    if sys.version_info >= (3, 10):  # noqa: UP036 (runs under the base's python, maybe older)
        name = sysconfig.get_preferred_scheme("prefix")
        found = sysconfig.get_paths(scheme=name)
        paths = {key: found[key] for key in ("purelib", "platlib", "scripts", "data")}
        paths["headers"] = found["include"]
    else:  # pragma: no cover (pythons older than sparkimg's own)
        from distutils.dist import Distribution

        command = Distribution({"name": "UNKNOWN"}).get_command_obj("install", create=True)
        command.finalize_options()  # type: ignore[union-attr]
        for key in ("purelib", "platlib", "scripts", "data", "headers"):
            paths[key] = str(getattr(command, "install_" + key))
        paths["headers"] = posixpath.dirname(paths["headers"])
    if in_venv:
        short = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        paths["headers"] = posixpath.join(sys.prefix, "include", "site", short)
    return {key: _norm(value) for key, value in paths.items()}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _metadata(path: str) -> tuple[str, str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            headers = email.parser.HeaderParser().parse(handle)
    except OSError:
        return "", ""
    return (headers.get("Name") or "").strip(), (headers.get("Version") or "").strip()


def _listed(folder: str, entries: list[str]) -> list[str]:
    """Existing files (and links) of a RECORD or installed-files.txt, relative to ``folder``."""
    files = set()
    for entry in entries:
        if not entry:
            continue
        path = _norm(entry if entry.startswith("/") else posixpath.join(folder, entry))
        if any(ord(c) < 32 or ord(c) == 127 for c in path) or path == "/":
            continue
        if posixpath.lexists(path) and (posixpath.islink(path) or not posixpath.isdir(path)):
            files.add(path)
            if path.endswith(".py"):
                files.update(_compiled(path))
    return sorted(files)


def _compiled(source: str) -> list[str]:
    """The bytecode files of a listed module that exist: pip removes them with the module
    (``cache_from_source``), though RECORD does not list pycs compiled at import time."""
    import importlib.util

    found = []
    for level in ("", 1, 2):
        try:
            pyc = importlib.util.cache_from_source(source, optimization=level)
        except (NotImplementedError, ValueError):
            continue
        if posixpath.isfile(pyc):
            found.append(_norm(pyc))
    return found


def _links(top: str = "/", depth: int = 3) -> dict[str, str]:
    """Symbolic links to folders within ``depth`` levels of the root (not under /proc, /sys, /dev)."""
    found: dict[str, str] = {}
    level = [top]
    for _ in range(depth):
        following: list[str] = []
        for folder in level:
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            for name in names:
                path = posixpath.join(folder, name)
                if path in ("/proc", "/sys", "/dev"):
                    continue
                if posixpath.islink(path):
                    if posixpath.isdir(path):
                        found[path] = os.readlink(path)
                elif posixpath.isdir(path):
                    following.append(path)
        level = following
    return found


def _on_disk(folder: str) -> set[str]:
    """Every file under ``folder``; a link to a folder counts as a file (it is not walked)."""
    found: set[str] = set()
    for parent, dirs, files in os.walk(folder):
        found.update(posixpath.join(parent, f) for f in files)
        found.update(posixpath.join(parent, d) for d in dirs if posixpath.islink(posixpath.join(parent, d)))
    return found


def _owned(files: list[str], roots: list[str]) -> list[str]:
    """pip's ``compress_for_rename``: the parent folders of ``files`` whose every file is one of
    them, shortest first, each strictly below a scheme folder and never at or above one."""
    listed = set(files)
    found: list[str] = []
    for folder in sorted({posixpath.dirname(f) for f in files}, key=lambda f: (len(f), f)):
        if any(folder == o or folder.startswith(o + "/") for o in found):
            continue
        if not any(folder.startswith(r + "/") for r in roots):
            continue
        if any(r == folder or r.startswith(folder + "/") for r in roots):
            continue
        if _on_disk(folder) <= listed:
            found.append(folder)
    return sorted(found)


def _installed(sites: list[str], roots: list[str]) -> list[dict[str, object]]:
    found: dict[str, dict[str, object]] = {}
    for site in sites:
        if not posixpath.isdir(site):
            continue
        for entry in sorted(os.listdir(site)):
            path = posixpath.join(site, entry)
            if path in found:
                continue
            stem = entry.rsplit(".", 1)[0]
            if entry.endswith(".dist-info") and posixpath.isdir(path):
                name, version = _metadata(posixpath.join(path, "METADATA"))
                try:
                    with open(posixpath.join(path, "RECORD"), encoding="utf-8", errors="replace", newline="") as h:
                        entries = [row[0] for row in csv.reader(h) if row]
                except OSError:
                    entries = []
                files = _listed(site, entries)
            elif entry.endswith(".egg-info"):
                if posixpath.isdir(path):
                    name, version = _metadata(posixpath.join(path, "PKG-INFO"))
                    try:
                        with open(posixpath.join(path, "installed-files.txt"), encoding="utf-8",
                                  errors="replace") as h:
                            files = _listed(path, h.read().splitlines())
                    except OSError:
                        files = []
                else:  # a distutils egg-info file: no file list (pip will not uninstall these)
                    name, version = _metadata(path)
                    files = []
            else:
                continue
            guess = stem.split("-")
            name = _canonical(name or guess[0])
            version = version if version and not any(c.isspace() for c in version) else \
                (guess[1] if len(guess) > 1 else "unknown")
            if not re.match(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", name):
                continue
            found[path] = {"name": name, "version": version, "dist_info": path, "files": files,
                           "owned_dirs": _owned(files, roots) if files else []}
    return sorted(found.values(), key=lambda d: (str(d["name"]), str(d["dist_info"])))


def _glibc() -> str | None:
    """The C library's version as the dynamic loader reports it (``2.36``), which decides the
    manylinux wheels the base can load (PEP 600); None on a libc that is not glibc (musl). The
    same reading as ``_internal.wheeltags.host_glibc``, here for the base (this script imports
    nothing of sparkimg)."""
    try:
        found = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    name, _, version = found.partition(" ")
    match = re.match(r"^([0-9]+)\.([0-9]+)", version)
    return f"{match.group(1)}.{match.group(2)}" if name == "glibc" and match else None


def main() -> int:
    interpreter = os.path.normcase(sys.executable or "")  # what pip (distlib's ScriptMaker) writes
    if not interpreter.startswith("/"):
        sys.stderr.write(f"sys.executable is {interpreter!r}, not an absolute path\n")
        return 3
    paths = _pip_scheme()
    roots = sorted(set(paths.values()))
    sites = sorted({paths["purelib"], paths["platlib"]})
    answer = {
        "schema": "sparkimg-scheme/v3",
        "interpreter": interpreter,
        "python_version": ".".join(str(n) for n in sys.version_info[:3])
        + {"alpha": "a", "beta": "b", "candidate": "rc"}.get(sys.version_info.releaselevel, "")
        + ("" if sys.version_info.releaselevel == "final" else str(sys.version_info.serial)),
        "paths": paths,
        "installed": _installed(sites, roots),
        "links": _links(),
        "glibc": _glibc(),
    }
    with open(sys.argv[1], "w", encoding="utf-8") as handle:
        json.dump(answer, handle, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
