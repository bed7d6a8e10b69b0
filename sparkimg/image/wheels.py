"""Install wheels as pip would into a staging root, from which one image layer is made.

Each wheel is installed by pypa/installer (the library pip itself installs with) into the
base's scheme (``formats/scheme.py``, asked of the base once by ``build.pyscheme``), with the
files written under ``root`` (``root/usr/local/...``). What lands there names only image
paths: RECORD paths are relative, scripts start ``#!`` plus the base's interpreter, and no
``direct_url.json`` is written (it would name the folder the wheel came from).

Bytecode: none. No ``.pyc`` is written, checked-hash or otherwise; Python compiles a module
when first imported, into ``__pycache__`` if that folder is writable, else in memory. A
``.pyc`` is only a cache, and leaving it out keeps the layer a pure function of the wheels.

An installed distribution of the same name in the base (any version) is replaced as pip
would uninstall it first: ``Staged.removed`` lists its files the new install does not
write, its dist-info folder and the folders it owns (each as one path; the layer writer makes
whiteouts of them), never a path the new install writes at or below.
"""

from __future__ import annotations

import functools
import os
import posixpath
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from sparkimg.errors import BuildError
from sparkimg.formats.scheme import SCHEME_KEYS, BaseScheme, InstalledDist, canonical_name, image_path

INSTALLER = b"sparkimg\n"


@dataclass(frozen=True)
class Staged:
    """What ``stage_wheels`` made.

    ``root``: the staging root, each file at ``root/<image path without the leading />``.
    ``removed``: absolute image paths to delete in the layer (whiteouts), files or whole folders.
    ``roots``: the scheme folders; the layer has no directory entry at or above any of them.
    ``installed``: (canonical name, version) of each wheel, in the order given.
    """

    root: Path
    removed: tuple[str, ...]
    roots: tuple[str, ...]
    installed: tuple[tuple[str, str], ...]


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _clean_member(name: str) -> bool:
    """A wheel member name that stays where it is put: relative, no ``..``, ``.`` or empty part
    (a folder's trailing ``/`` aside), no backslash, no control character."""
    parts = name.removesuffix("/").split("/")
    return bool(name) and not name.startswith("/") and "\\" not in name \
        and not any(p in ("", ".", "..") for p in parts) and not any(ord(c) < 32 or ord(c) == 127 for c in name)


@dataclass
class _Written:
    """Image paths one install wrote, filled in by the destination."""

    files: set[str] = field(default_factory=set)


def _destination(scheme: dict[str, str], interpreter: str, root: Path, written: _Written) -> Any:
    """A ``SchemeDictionaryDestination`` writing under ``root`` that checks every path it is given
    and remembers what it wrote (as image paths)."""
    from installer.destinations import SchemeDictionaryDestination
    from installer.records import RecordEntry
    from installer.utils import Scheme

    class Staging(SchemeDictionaryDestination):
        def write_to_fs(self, scheme: Scheme, path: str, stream: BinaryIO, is_executable: bool) -> RecordEntry:
            if not _clean_member(path):
                raise BuildError(f"refuses to write {path!r} in {scheme}: not a clean relative path")
            target = posixpath.normpath(posixpath.join(self.scheme_dict[scheme], path))
            if not image_path(target) or not _inside(target, self.scheme_dict[scheme]):
                raise BuildError(f"refuses to write {path!r}: it leaves the {scheme} folder")
            entry = super().write_to_fs(scheme, path, stream, is_executable)
            written.files.add(target)
            return entry

        def write_script(self, name: str, module: str, attr: str, section: Any) -> RecordEntry:
            if "/" in name or not _clean_member(name):
                raise BuildError(f"refuses the entry point script name {name!r}: not a bare file name")
            return super().write_script(name, module, attr, section)

    return Staging(scheme_dict=scheme, interpreter=interpreter, script_kind="posix", hash_algorithm="sha256",
                   bytecode_optimization_levels=(), destdir=str(root), overwrite_existing=True)


def _check_members(wheel: Path, names: Iterable[str]) -> None:
    bad = [n for n in names if not _clean_member(n)]
    if bad:
        raise BuildError(f"wheel {wheel.name}: member {bad[0]!r} is not a clean relative path "
                         f"({len(bad)} such member(s)); nothing was installed from it",
                         hint="rebuild the wheel; a wheel's paths never start with / or hold ..")


def _install(wheel: Path, scheme: BaseScheme, root: Path) -> tuple[str, str, set[str]]:
    """Install one wheel; return its canonical name, version and the image paths it wrote."""
    import configparser
    import zipfile

    from installer import install
    from installer.exceptions import InstallerError
    from installer.records import InvalidRecordEntry
    from installer.sources import WheelFile

    try:
        with zipfile.ZipFile(wheel) as archive:
            _check_members(wheel, archive.namelist())
        with WheelFile.open(wheel) as source:
            # Not ``validate_record``: pip installs a wheel whose RECORD misses files too (the wheel
            # itself is pinned by sha256), and the RECORD written here lists what was written.
            name, version = canonical_name(source.distribution), source.version
            paths = dict(scheme.paths)
            paths["headers"] = posixpath.join(scheme.paths["headers"], source.distribution)
            written = _Written()
            destination = _destination(paths, scheme.interpreter, root, written)
            # REQUESTED as pip writes it for a named requirement; no direct_url.json (it names a staging path).
            install(source, destination, {"INSTALLER": INSTALLER, "REQUESTED": b""})
    except BuildError as exc:
        prefix = f"wheel {wheel.name}: "
        raise BuildError(exc.message if exc.message.startswith(prefix) else prefix + exc.message,
                         hint=exc.hint) from None
    except (InstallerError, InvalidRecordEntry, configparser.Error, ValueError, OSError, zipfile.BadZipFile,
            KeyError) as exc:
        raise BuildError(f"wheel {wheel.name}: cannot install it: {type(exc).__name__}: {exc}",
                         hint="check the wheel (its RECORD, WHEEL and paths); rebuild or re-lock it") from None
    return name, version, written.files


def _ancestors(path: str) -> Iterable[str]:
    """``/a/b/c`` -> ``/a/b``, ``/a``."""
    path = posixpath.dirname(path)
    while path != "/":
        yield path
        path = posixpath.dirname(path)


def _under_any(path: str, folders: set[str]) -> bool:
    return any(a in folders for a in _ancestors(path))


def _removals(old: InstalledDist, written: set[str], roots: Sequence[str]) -> set[str]:
    """What replacing ``old`` removes: its dist-info folder and owned folders that the new install
    writes nothing into, and its other files the new install does not write (nor writes below)."""
    if not old.files:
        raise BuildError(f"the base has {old.name} {old.version} ({old.dist_info}) installed with no list of its "
                         "files, so it cannot be replaced (pip refuses to uninstall it too)",
                         hint="use a base without it, or one where pip installed it")
    holds: set[str] = set()  # every folder at or above a written file
    for path in written:
        for folder in _ancestors(path):
            if folder in holds:
                break
            holds.add(folder)

    def removable(folder: str) -> bool:
        return folder not in holds and folder not in written \
            and any(_inside(folder, r) and folder != r for r in roots) and not any(_inside(r, folder) for r in roots)

    folders = {d for d in (old.dist_info, *old.owned_dirs) if removable(d)}
    files = {f for f in old.files if f not in written and f not in holds and not _under_any(f, folders)}
    return folders | files


def _normalise_modes(root: Path) -> None:
    """Folders 0755; files 0755 when any execute bit is set, else 0644 (the umask is not an input)."""
    for parent, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(parent, name), 0o755)
        for name in files:
            path = os.path.join(parent, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                os.chmod(path, 0o755 if mode & 0o111 else 0o644)


def check_fits(wheel: str, scheme: BaseScheme, platform: str) -> None:
    """Refuse a wheel the base's interpreter cannot use: built for another Python or ABI (a cp311
    wheel in a 3.12 image imports nowhere) or another platform. pip checks this when it installs;
    pypa/installer does not. The base is taken to be CPython, with the manylinux glibc range the
    lock resolves wheels for (``_pypi.PLATFORM_TAGS``)."""
    from packaging.tags import compatible_tags, cpython_tags
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import InvalidVersion

    from sparkimg._internal.net.pypi import PLATFORM_TAGS

    try:
        tags = parse_wheel_filename(wheel)[3]
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise BuildError(f"wheel {wheel}: not a wheel file name ({exc})",
                         hint="pin the wheel under its own file name") from None
    major, minor = scheme.python_version.split(".")[:2]
    version = (int(major), int(minor))
    platforms = PLATFORM_TAGS.get(platform, [])
    supported = {*cpython_tags(version, platforms=platforms), *compatible_tags(version, platforms=platforms)}
    if not tags & supported:
        shown = ", ".join(sorted(str(t) for t in tags))
        raise BuildError(f"wheel {wheel} ({shown}) does not fit the base's Python {scheme.python_version} "
                         f"on {platform}",
                         hint=f"pin a wheel built for cp{version[0]}{version[1]} on {platform} (`filename:` in "
                         "the source), or re-lock it: `sparkimg lock --update NAME` resolves wheels for the "
                         "base's Python once a build has asked it")


def stage_wheels(wheels: Sequence[Path], scheme: BaseScheme, root: Path) -> Staged:
    """Install ``wheels`` (no dependencies, no bytecode) into the staging ``root`` (absent or empty).

    Two wheels of one distribution is an error; a file two distributions both write ends up as
    the later wheel wrote it, as with pip.
    """
    root = root.absolute()
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise BuildError(f"staging root {root} is not an empty folder")
    root.mkdir(parents=True, exist_ok=True)
    roots = tuple(sorted({scheme.paths[key] for key in SCHEME_KEYS}))
    installed: list[tuple[str, str]] = []
    sources: dict[str, Path] = {}
    written: dict[str, set[str]] = {}
    for wheel in wheels:
        name, version, files = _install(wheel, scheme, root)
        if name in sources:
            raise BuildError(f"wheels {sources[name].name} and {wheel.name} both install {name}; an image "
                             "installs one version of each distribution",
                             hint="keep one of them in the spec")
        sources[name] = wheel
        written[name] = files
        installed.append((name, version))
    every = set().union(*written.values()) if written else set()
    removed: set[str] = set()
    for name in sources:
        for old in scheme.named(name):
            removed |= _removals(old, every, roots)
    removed = {p for p in removed if not _under_any(p, removed)}  # a folder removed covers what is below it
    _normalise_modes(root)
    return Staged(root, tuple(sorted(removed)), roots, tuple(installed))


@functools.cache
def installer_version() -> str:
    """The pypa/installer release that stages wheels: part of a wheel layer's cache key, since
    another release may lay files out (or write RECORD) differently. Read from the name of its
    dist-info folder: importing it, or ``importlib.metadata``, costs a build whose layers are
    all cached tens of milliseconds for nothing."""
    import importlib.util

    spec = importlib.util.find_spec("installer")
    if spec is None or spec.origin is None:
        raise BuildError("the Python package `installer` is missing", hint="reinstall sparkimg (pip install -e .)")
    site = Path(spec.origin).parent.parent
    found = sorted(p.name[len("installer-"):-len(".dist-info")] for p in site.glob("installer-*.dist-info"))
    if len(found) != 1:
        from importlib.metadata import version  # an unusual layout: ask the slow way

        return f"installer-{version('installer')}"
    return f"installer-{found[0]}"
