"""Install wheels as pip would, straight into the entries of one image layer: nothing is staged on disk.

Each wheel is installed by pypa/installer (the library pip itself installs with) into the
base's scheme (``formats/scheme.py``, asked of the base once by ``base.pyscheme``), with a
destination that writes no file: a member of the wheel becomes a layer entry that names the
member (``layer.ZipMember``), so the layer writer inflates it once, straight into the layer's
tar; only what installer makes (RECORD, INSTALLER, REQUESTED, entry point scripts, scripts whose
``#!python`` it rewrites) is kept as bytes. A gigabyte wheel is thus read once and written once,
not inflated to a staging folder and read back (issue 22).

What lands in the image names only image paths: RECORD paths are relative, scripts start
``#!`` plus the base's interpreter, and no ``direct_url.json`` is written (it would name the
folder the wheel came from). RECORD's hash of a member is the wheel's own RECORD's, where it
gives one: the layer writer hashes every member as it copies it and fails the build when the
bytes are not those (a wheel that lies in its RECORD). Where the wheel's RECORD gives none, the
member is read once more here to hash it. The layer is byte for byte the one that installing
into a folder and tarring that folder gave (tests/unit/image/test_wheels.py checks both ways).

Bytecode: none. No ``.pyc`` is written, checked-hash or otherwise; Python compiles a module
when first imported, into ``__pycache__`` if that folder is writable, else in memory. A
``.pyc`` is only a cache, and leaving it out keeps the layer a pure function of the wheels.

An installed distribution of the same name in the base (any version) is replaced as pip
would uninstall it first: ``Staged.removed`` lists its files the new install does not
write, its dist-info folder and the folders it owns (each as one path; the layer writer makes
whiteouts of them), never a path the new install writes at or below.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import posixpath
import zipfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from sparkimg._internal.fs.bounds import MAX_BYTES, MAX_MEMBERS
from sparkimg._internal.units import format_size
from sparkimg.errors import BuildError
from sparkimg.formats.scheme import SCHEME_KEYS, BaseScheme, InstalledDist, canonical_name, image_path
from sparkimg.image.layer import Entry, ZipMember, whiteouts
from sparkimg.store.content import CHUNK

INSTALLER = b"sparkimg\n"


@dataclass(frozen=True)
class Staged:
    """What ``install_wheels`` made.

    ``files``: absolute image path -> its layer entry (a member of a wheel, or bytes).
    ``removed``: absolute image paths to delete in the layer (whiteouts), files or whole folders.
    ``roots``: the scheme folders; the layer has no directory entry at or above any of them.
    ``installed``: (canonical name, version) of each wheel, in the order given.
    """

    files: Mapping[str, Entry]
    removed: tuple[str, ...]
    roots: tuple[str, ...]
    installed: tuple[tuple[str, str], ...]

    def entries(self) -> list[Entry]:
        """The layer: every file; every folder that holds one, below the scheme folders (an entry at
        or above one would override the base's own metadata of that folder), 0755; the whiteouts."""
        folders: set[str] = set()
        for path in self.files:
            for folder in _ancestors(path):
                if folder in folders or any(_inside(r, folder) for r in self.roots):
                    break  # its own folders are in; or it and all above it are at or above a scheme folder
                folders.add(folder)
        if clash := sorted(folders & self.files.keys()):
            raise BuildError(f"wheels write {clash[0]} both as a file and as a folder",
                             hint="keep one of the wheels that install it")
        return [*self.files.values(), *(Entry(f.lstrip("/"), "dir", 0o755) for f in sorted(folders)),
                *whiteouts(self.removed)]


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _clean_member(name: str) -> bool:
    """A wheel member name that stays where it is put: relative, no ``..``, ``.`` or empty part
    (a folder's trailing ``/`` aside), no backslash, no control character."""
    parts = name.removesuffix("/").split("/")
    return bool(name) and not name.startswith("/") and "\\" not in name \
        and not any(p in ("", ".", "..") for p in parts) and not any(ord(c) < 32 or ord(c) == 127 for c in name)


def _recorded(wheel: Path, archive: zipfile.ZipFile, record: str) -> dict[str, ZipMember]:
    """Each member the wheel's RECORD gives a sha256 and the member's size for, as the layer
    writer reads it. A RECORD installer cannot parse gives nothing here: installer says why."""
    from installer.records import parse_record_file

    sizes = {info.filename: info.file_size for info in archive.infolist()}
    found: dict[str, ZipMember] = {}
    try:
        for name, digest, size in parse_record_file(record.splitlines()):
            algorithm, _, value = digest.partition("=")
            raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)) if algorithm == "sha256" else b""
            if len(raw) == 32 and name in sizes and size == str(sizes[name]):
                found[name] = ZipMember(wheel, name, sizes[name], raw.hex())
    except (ValueError, TypeError):
        return {}
    return found


@dataclass
class _Written:
    """What one install wrote, filled in by the destination: image path -> entry."""

    files: dict[str, Entry] = field(default_factory=dict)


def _record_hash(sha256: str) -> str:
    """A sha256 as RECORD writes it (installer's form: urlsafe base64, no padding)."""
    return base64.urlsafe_b64encode(bytes.fromhex(sha256)).decode("ascii").rstrip("=")


def _destination(scheme: dict[str, str], interpreter: str, wheel: Path, members: Mapping[str, ZipMember],
                 written: _Written) -> Any:
    """A ``SchemeDictionaryDestination`` that writes nothing: it checks every path it is given and
    turns each file into a layer entry, a wheel's member by reference and anything installer
    made (or rewrote) as bytes."""
    from installer.destinations import SchemeDictionaryDestination
    from installer.records import Hash, RecordEntry
    from installer.utils import Scheme

    class Collecting(SchemeDictionaryDestination):
        def write_to_fs(self, scheme: Scheme, path: str, stream: BinaryIO, is_executable: bool) -> RecordEntry:
            if not _clean_member(path):
                raise BuildError(f"refuses to write {path!r} in {scheme}: not a clean relative path")
            target = posixpath.normpath(posixpath.join(self.scheme_dict[scheme], path))
            if not image_path(target) or not _inside(target, self.scheme_dict[scheme]):
                raise BuildError(f"refuses to write {path!r}: it leaves the {scheme} folder")
            mode = 0o755 if is_executable else 0o644
            if isinstance(stream, zipfile.ZipExtFile):  # the member itself, unchanged
                member = members.get(stream.name) or _hashed(wheel, stream)
                entry = Entry(target.lstrip("/"), "file", mode, member=member)
                size, sha256 = member.size, member.sha256
            else:
                data = stream.read()
                entry = Entry(target.lstrip("/"), "file", mode, data=data)
                size, sha256 = len(data), hashlib.sha256(data).hexdigest()
            written.files[target] = entry
            return RecordEntry(path, Hash("sha256", _record_hash(sha256)), size)

        def write_script(self, name: str, module: str, attr: str, section: Any) -> RecordEntry:
            """As installer writes one, less its chmod of the file it wrote (there is none)."""
            from installer.scripts import Script

            if "/" in name or not _clean_member(name):
                raise BuildError(f"refuses the entry point script name {name!r}: not a bare file name")
            script_name, data = Script(name, module, attr, section).generate(self.interpreter, self.script_kind)
            return self.write_to_fs(Scheme("scripts"), script_name, io.BytesIO(data), is_executable=True)

    return Collecting(scheme_dict=scheme, interpreter=interpreter, script_kind="posix", hash_algorithm="sha256",
                      bytecode_optimization_levels=(), destdir=None, overwrite_existing=True)


def _hashed(wheel: Path, stream: Any) -> ZipMember:
    """A member the wheel's RECORD gives no usable sha256 for: read once to hash it."""
    digest, size = hashlib.sha256(), 0
    while chunk := stream.read(CHUNK):
        digest.update(chunk)
        size += len(chunk)
    return ZipMember(wheel, stream.name, size, digest.hexdigest())


def _check_members(wheel: Path, infos: Sequence[zipfile.ZipInfo]) -> None:
    """Refuse, before anything is read, a wheel with a member that is not a clean relative path, a
    member named twice (the image would hold whichever copy came last), or more than the bounds
    of ``fs.bounds`` declared by its zip headers (which also bound what each member inflates to:
    ``zipfile`` stops at the declared size and checks the CRC)."""
    names = [info.filename for info in infos]
    bad = [n for n in names if not _clean_member(n)]
    if bad:
        raise BuildError(f"wheel {wheel.name}: member {bad[0]!r} is not a clean relative path "
                         f"({len(bad)} such member(s)); nothing was installed from it",
                         hint="rebuild the wheel; a wheel's paths never start with / or hold ..")
    counted = Counter(names)
    twice = sorted(name for name, count in counted.items() if count > 1)
    if twice:
        raise BuildError(f"wheel {wheel.name}: member {twice[0]!r} is in it {counted[twice[0]]} times "
                         f"({len(twice)} such member(s)); nothing was installed from it",
                         hint="rebuild the wheel: a zip that names a file twice installs whichever copy a tool "
                         "reads last")
    declared = sum(info.file_size for info in infos)
    if len(infos) > MAX_MEMBERS or declared > MAX_BYTES:
        raise BuildError(f"wheel {wheel.name}: {len(infos)} members declaring {format_size(declared)} unpacked, "
                         f"more than {MAX_MEMBERS} members or {format_size(MAX_BYTES)}; nothing was installed from it",
                         hint="check the pinned wheel; the largest real one here unpacks to 1 GiB")


def _install(wheel: Path, scheme: BaseScheme) -> tuple[str, str, dict[str, Entry]]:
    """Install one wheel; return its canonical name, version and what it wrote (image path -> entry)."""
    import configparser

    from installer import install
    from installer.exceptions import InstallerError
    from installer.records import InvalidRecordEntry
    from installer.sources import WheelFile

    try:
        with zipfile.ZipFile(wheel) as archive:
            _check_members(wheel, archive.infolist())
            source = WheelFile(archive)
            members = _recorded(wheel, archive, source.read_dist_info("RECORD"))
            # Not ``validate_record``: pip installs a wheel whose RECORD misses files too (the wheel
            # itself is pinned by sha256), and the RECORD written here lists what was written.
            name, version = canonical_name(source.distribution), source.version
            paths = dict(scheme.paths)
            paths["headers"] = posixpath.join(scheme.paths["headers"], source.distribution)
            written = _Written()
            destination = _destination(paths, scheme.interpreter, wheel, members, written)
            # REQUESTED as pip writes it for a named requirement; no direct_url.json (it would name a build path).
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


def _removals(old: InstalledDist, written: Set[str], roots: Sequence[str]) -> set[str]:
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


def check_fits(wheel: str, scheme: BaseScheme, platform: str) -> None:
    """Refuse a wheel the base's interpreter cannot use: built for another Python or ABI (a cp311
    wheel in a 3.12 image imports nowhere) or another platform. pip checks this when it installs;
    pypa/installer does not. The base is taken to be CPython; its platform tags are those its
    glibc can load (``wheeltags.platform_tags``, the set the lock resolves wheels for)."""
    from packaging.tags import compatible_tags, cpython_tags
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import InvalidVersion

    from sparkimg._internal.wheeltags import platform_tags

    try:
        tags = parse_wheel_filename(wheel)[3]
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise BuildError(f"wheel {wheel}: not a wheel file name ({exc})",
                         hint="pin the wheel under its own file name") from None
    major, minor = scheme.python_version.split(".")[:2]
    version = (int(major), int(minor))
    platforms = platform_tags(platform, scheme.glibc)
    supported = {*cpython_tags(version, platforms=platforms), *compatible_tags(version, platforms=platforms)}
    if not tags & supported:
        shown = ", ".join(sorted(str(t) for t in tags))
        raise BuildError(f"wheel {wheel} ({shown}) does not fit the base's Python {scheme.python_version} "
                         f"on {platform} with glibc {scheme.glibc or '(none)'}",
                         hint=f"pin a wheel built for cp{version[0]}{version[1]} on {platform}"
                         + (f", manylinux up to glibc {scheme.glibc}" if scheme.glibc else "") + " (`filename:` in "
                         "the source), or re-lock it: `sparkimg lock --update NAME` resolves wheels for the "
                         "base's Python once a build has asked it")


def install_wheels(wheels: Sequence[Path], scheme: BaseScheme) -> Staged:
    """Install ``wheels`` (no dependencies, no bytecode) as layer entries.

    Two wheels of one distribution is an error; a file two distributions both write ends up as
    the later wheel wrote it, as with pip.
    """
    roots = tuple(sorted({scheme.paths[key] for key in SCHEME_KEYS}))
    installed: list[tuple[str, str]] = []
    sources: dict[str, Path] = {}
    files: dict[str, Entry] = {}
    for wheel in wheels:
        name, version, wrote = _install(wheel, scheme)
        if name in sources:
            raise BuildError(f"wheels {sources[name].name} and {wheel.name} both install {name}; an image "
                             "installs one version of each distribution",
                             hint="keep one of them in the spec")
        sources[name] = wheel
        files.update(wrote)
        installed.append((name, version))
    removed: set[str] = set()
    for name in sources:
        for old in scheme.named(name):
            removed |= _removals(old, files.keys(), roots)
    removed = {p for p in removed if not _under_any(p, removed)}  # a folder removed covers what is below it
    return Staged(files, tuple(sorted(removed)), roots, tuple(installed))


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
