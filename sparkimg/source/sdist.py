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

from sparkimg._internal.fs.bounds import MAX_BYTES, MAX_MEMBERS
from sparkimg._internal.fs.tars import open_archive
from sparkimg.errors import BuildError


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


def top_folder(found: list[tarfile.TarInfo], what: str) -> str:
    """The one top folder every member of an sdist sits in."""
    tops = {PurePosixPath(m.name).parts[0] for m in found if PurePosixPath(m.name).parts}
    if len(tops) != 1:
        raise BuildError(f"{what}: an sdist holds one top folder (NAME-VERSION/); this one has "
                         f"{len(tops)}: {', '.join(sorted(tops)[:5])}", hint="check the pinned file")
    return tops.pop()


def members(archive: tarfile.TarFile, what: str, *, strip: bool) -> list[tarfile.TarInfo]:
    """The members to extract, renamed without the top folder when ``strip``; every check that can
    be made before writing: names (each once), kinds, count and total size, and links.

    Links are checked against the archive itself, not only lexically: no member is written
    through a symbolic link of the archive, and no link's target passes through one, so the
    lexical walk of a path is the walk the kernel makes. A link that leads out, that names an
    absolute path, or that reaches another link is refused (CVE-2025-4517 and its kin use chains
    of links that a lexical check alone lets through)."""
    found: list[tarfile.TarInfo] = []
    for member in archive:  # counted as read: a bomb of empty members stops at the bound
        found.append(member)
        if len(found) > MAX_MEMBERS:
            raise BuildError(f"{what}: more than {MAX_MEMBERS} members", hint="check the pinned file")
    top = top_folder(found, what) if strip else ""
    total = 0
    renamed: list[tuple[str, tarfile.TarInfo]] = []
    seen: set[str] = set()
    for member in found:
        _check_name(member.name, what)
        name = _stripped(member.name, top) if strip else member.name
        if name is None:
            raise BuildError(f"{what}: member {member.name!r} is outside the top folder {top}/")
        name = posixpath.normpath(name) if name else ""
        if not name or name == ".":
            continue
        if name in seen:
            raise BuildError(f"{what}: member {member.name!r} is in the archive twice",
                             hint="an archive that holds a path twice is read one way and unpacked another")
        seen.add(name)
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise BuildError(f"{what}: member {member.name!r} is a device or FIFO",
                             hint="a source archive holds files, folders and links only")
        total += max(member.size, 0)
        if total > MAX_BYTES:
            raise BuildError(f"{what}: unpacks to more than {MAX_BYTES >> 30} GiB", hint="check the pinned file")
        renamed.append((name, member))
    links = {name for name, member in renamed if member.issym()}
    files = {name for name, member in renamed if member.isfile()}
    kept: list[tarfile.TarInfo] = []
    for name, member in renamed:
        parts = name.split("/")
        if any("/".join(parts[:k]) in links for k in range(1, len(parts))):
            raise BuildError(f"{what}: member {member.name!r} would be written through a link of the archive",
                             hint="this archive would reach outside its folder; do not build from it")
        if member.issym() or member.islnk():
            target = member.linkname
            if member.islnk() and strip:
                stripped = _stripped(target, top)
                if stripped is None:
                    raise BuildError(f"{what}: hard link {member.name!r} points outside the archive ({target!r})")
                target = stripped
            # A symlink is relative to its own folder, a hard link to the archive's root.
            start = parts[:-1] if member.issym() else []
            walked = _walk(start, target, links)
            if target.startswith("/") or walked is None or (member.islnk() and walked not in files):
                raise BuildError(f"{what}: link {member.name!r} -> {member.linkname!r} leads out of the source, "
                                 "through another link or to something that is not a file of it",
                                 hint="this archive would reach outside its folder; do not build from it")
            if member.islnk():
                member = member.replace(linkname=walked, deep=False)
        kept.append(member.replace(name=name, deep=False) if name != member.name else member)
    return kept


def _walk(start: list[str], target: str, links: set[str]) -> str | None:
    """``target`` walked from the folder ``start`` one component at a time: the path it names, or
    None when it climbs above the root or passes through (or ends at) a link of the archive."""
    stack = list(start)
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return None
            stack.pop()
            continue
        stack.append(part)
        if "/".join(stack) in links:
            return None
    return "/".join(stack) if stack else None


def unpack(blob: Path, target: Path, *, strip: bool, what: str) -> None:
    """Unpack the archive ``blob`` (tar, tar.gz) into ``target``; ``strip`` removes an sdist's top folder."""
    try:
        with open_archive(blob) as archive:
            archive.extractall(target, members=members(archive, what, strip=strip), filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BuildError(f"{what}: cannot unpack: {exc}", hint="check the pinned file") from None


def read_members(blob: Path, wanted: set[str], *, strip: bool, what: str,
                 limit: int = 16 << 20) -> dict[str, bytes]:
    """Regular files of the archive by their paths inside the source (after the top folder when
    ``strip``), read from the same checked members ``unpack`` writes (a wanted path that is a link
    of the archive is read at its target); an absent one is left out."""
    found: dict[str, bytes] = {}
    try:
        with open_archive(blob) as archive:
            checked = {m.name: m for m in members(archive, what, strip=strip)}
            for name in sorted(wanted):
                member = checked.get(name)
                if member is not None and member.issym():  # members() let it lead only to a non-link inside
                    member = checked.get(_walk(name.split("/")[:-1], member.linkname, set()) or "")
                if member is None or not member.isfile() or member.size > limit:
                    continue
                handle = archive.extractfile(member)
                if handle is not None:
                    found[name] = handle.read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BuildError(f"{what}: cannot read {', '.join(sorted(wanted))}: {exc}",
                         hint="check the pinned file") from None
    return found
