"""Source archives a compile layer builds from: a PyPI sdist (``NAME-VERSION.tar.gz``, one top
folder, stripped) or the tar of a git commit or a path source. Unpacked safely: members are
checked before anything is written (one top folder, no absolute or ``..`` names, no link that
leads out, no devices, a bound on count and size), then extracted with tarfile's ``data`` filter,
which refuses the same again. A hostile archive is a ``BuildError`` naming the member.
"""

from __future__ import annotations

import posixpath
import tarfile
from pathlib import Path, PurePosixPath

from .errors import BuildError

MAX_MEMBERS = 500_000
MAX_BYTES = 8 << 30  # unpacked; vLLM 0.34.0's sdist unpacks to about 0.2 GiB


def _stripped(name: str, top: str) -> str | None:
    """``name`` without the top folder ``top``; '' for the top folder itself, None outside it."""
    parts = PurePosixPath(name).parts
    if not parts or parts[0] != top:
        return None
    return "/".join(parts[1:])


def _check_name(name: str, what: str) -> None:
    if name.startswith("/") or "\\" in name or ".." in PurePosixPath(name).parts or "\0" in name:
        raise BuildError(f"{what}: member {name!r} has an absolute or '..' path",
                         hint="this archive would write outside its folder; do not build from it")


def top_folder(archive: tarfile.TarFile, what: str) -> str:
    """The one top folder every member of an sdist sits in."""
    tops = {PurePosixPath(m.name).parts[0] for m in archive.getmembers() if PurePosixPath(m.name).parts}
    if len(tops) != 1:
        raise BuildError(f"{what}: an sdist holds one top folder (NAME-VERSION/); this one has "
                         f"{len(tops)}: {', '.join(sorted(tops)[:5])}", hint="check the pinned file")
    return tops.pop()


def members(archive: tarfile.TarFile, what: str, *, strip: bool) -> list[tarfile.TarInfo]:
    """The members to extract, renamed without the top folder when ``strip``; every check that can
    be made before writing: names, link targets, kinds, count and total size."""
    found = archive.getmembers()
    if len(found) > MAX_MEMBERS:
        raise BuildError(f"{what}: {len(found)} members (more than {MAX_MEMBERS})", hint="check the pinned file")
    top = top_folder(archive, what) if strip else ""
    total = 0
    kept: list[tarfile.TarInfo] = []
    for member in found:
        _check_name(member.name, what)
        name = _stripped(member.name, top) if strip else member.name
        if name is None:
            raise BuildError(f"{what}: member {member.name!r} is outside the top folder {top}/")
        if not name or name == ".":
            continue
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise BuildError(f"{what}: member {member.name!r} is a device or FIFO",
                             hint="a source archive holds files, folders and links only")
        total += max(member.size, 0)
        if total > MAX_BYTES:
            raise BuildError(f"{what}: unpacks to more than {MAX_BYTES >> 30} GiB", hint="check the pinned file")
        if member.issym() or member.islnk():
            target = member.linkname
            if member.islnk() and strip:
                stripped = _stripped(target, top)
                if stripped is None:
                    raise BuildError(f"{what}: hard link {member.name!r} points outside the archive ({target!r})")
                target = stripped
            # A symlink is relative to its own folder, a hard link to the archive's root.
            joined = posixpath.normpath(posixpath.join(posixpath.dirname(name), target)
                                        if member.issym() else target)
            if target.startswith("/") or joined == ".." or joined.startswith("../"):
                raise BuildError(f"{what}: link {member.name!r} -> {member.linkname!r} leads out of the source",
                                 hint="this archive would reach outside its folder; do not build from it")
            if member.islnk():
                member = member.replace(linkname=target, deep=False)
        kept.append(member.replace(name=name, deep=False) if name != member.name else member)
    return kept


def unpack(blob: Path, target: Path, *, strip: bool, what: str) -> None:
    """Unpack the archive ``blob`` (tar, tar.gz) into ``target``; ``strip`` removes an sdist's top folder."""
    try:
        with tarfile.open(blob) as archive:
            archive.extractall(target, members=members(archive, what, strip=strip), filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BuildError(f"{what}: cannot unpack: {exc}", hint="check the pinned file") from None


def read_members(blob: Path, wanted: set[str], *, strip: bool, what: str,
                 limit: int = 16 << 20) -> dict[str, bytes]:
    """Regular files of the archive by their paths inside the source (after the top folder when
    ``strip``), in one pass and without unpacking the rest; an absent one is left out."""
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(blob) as archive:
            for member in archive:
                name = member.name
                if strip:
                    parts = PurePosixPath(name).parts
                    name = "/".join(parts[1:]) if len(parts) > 1 else ""
                name = posixpath.normpath(name)
                if name not in wanted or name in found or not member.isfile() or member.size > limit:
                    continue
                handle = archive.extractfile(member)
                if handle is not None:
                    found[name] = handle.read()
                if len(found) == len(wanted):
                    break
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BuildError(f"{what}: cannot read {', '.join(sorted(wanted))}: {exc}",
                         hint="check the pinned file") from None
    return found
