"""Patch files a compile layer applies to its source (``source_patches``), with ``patch -p1``.

Every file a patch names is checked first: after the first component (``a/``, ``b/``) it must be
a clean relative path, so a patch cannot write outside the source. ``sections`` splits a patch
into its files, so the preflight can apply only the parts that touch the files it reads.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path, PurePosixPath

from sparkimg.errors import BuildError

_HEADERS = ("--- ", "+++ ")
_GIT_PATHS = ("rename from ", "rename to ", "copy from ", "copy to ")
# The lines git writes before a file's ``---``/``+++`` header (never the first character of a hunk line).
_PREAMBLE = ("diff ", "index ", "new file", "deleted file", "similarity", "dissimilarity", "old mode", "new mode",
             *_GIT_PATHS)


def _target(raw: str, what: str, *, strip: bool = True) -> str | None:
    """The path a header line names, without its first component (``-p1``); None for /dev/null."""
    name = raw.split("\t", 1)[0].strip()
    if name.startswith('"'):
        raise BuildError(f"{what}: quoted file name {name} (not supported)", hint="regenerate the patch with git diff")
    if name == "/dev/null":
        return None
    parts = PurePosixPath(name).parts[1:] if strip else PurePosixPath(name).parts
    clean = "/".join(parts)
    if not parts or name.startswith("/") or ".." in parts or "\\" in name:
        raise BuildError(f"{what}: names {name!r}, which is not a path inside the source",
                         hint="a source patch is made with `git diff` (a/ and b/ prefixes) in the source's top folder")
    return clean


def sections(text: str, what: str) -> list[tuple[str, str]]:
    """(path inside the source, that file's part of the patch), in order; every path checked."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines)
              if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")]
    if not starts:
        raise BuildError(f"{what}: not a unified diff (no '--- a/FILE' / '+++ b/FILE' header)",
                         hint="make it with `git diff` or `diff -u` in the source's top folder")
    begins: list[int] = []
    for number, start in enumerate(starts):
        begin = start
        floor = starts[number - 1] + 2 if number else 0
        while begin > floor and lines[begin - 1].startswith(_PREAMBLE):
            begin -= 1
        begins.append(begin)
    for number, line in enumerate(lines[:begins[0]]):
        if line.startswith(("*** ", "***************", "Index:", "Prereq:")):
            raise BuildError(f"{what}: line {number + 1} is not part of a unified diff ({line.strip()[:40]!r})",
                             hint="make the patch with `git diff` or `diff -u`; other formats are not read")
    for number, line in enumerate(lines[begins[0]:], start=begins[0] + 1):
        _check_line(line, number, what)
    out: list[tuple[str, str]] = []
    for number, start in enumerate(starts):
        end = begins[number + 1] if number + 1 < len(starts) else len(lines)
        chunk = lines[begins[number]:end]
        old, new = _target(lines[start][4:], what), _target(lines[start + 1][4:], what)
        for line in chunk:
            if line.startswith(_GIT_PATHS):
                _target(line.split(" ", 2)[2], what, strip=False)
        name = new or old
        if name is None:
            raise BuildError(f"{what}: a part of the patch names /dev/null twice")
        out.append((name, "".join(chunk)))
    return out


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise BuildError(f"{what}: not a text patch (not UTF-8)") from None


def touched(data: bytes, what: str) -> list[str]:
    """Every path inside the source a patch may write, remove or rename (each checked as
    ``sections`` checks them): its headers' old and new names and git's rename and copy lines."""
    text = _text(data, what)
    sections(text, what)
    names: list[str] = []
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("--- ") and number + 1 < len(lines) and lines[number + 1].startswith("+++ "):
            names += [n for n in (_target(line[4:], what), _target(lines[number + 1][4:], what)) if n]
        elif line.startswith(_GIT_PATHS):
            names.append(str(_target(line.split(" ", 2)[2], what, strip=False)))
    return sorted(set(names))


def _check_line(line: str, number: int, what: str) -> None:
    """Fail closed: ``patch`` reads other diff formats too, so every line after the first header
    must be a line of a unified diff or of git's preamble, and no part may make a symbolic link
    (a link written into the source could lead a later write out of it)."""
    if line.startswith(_PREAMBLE):
        if line.split()[-1:] == ["120000"] or line.startswith("GIT binary patch"):
            raise BuildError(f"{what}: line {number} makes a symbolic link ({line.strip()!r})",
                             hint="a source patch changes file contents only")
        return
    if line.startswith(("--- ", "+++ ", "@@ ")) or line[:1] in (" ", "+", "-", "\\") or not line.strip():
        return
    raise BuildError(f"{what}: line {number} is not part of a unified diff ({line.strip()[:40]!r})",
                     hint="make the patch with `git diff` or `diff -u`; other formats are not read")


def apply(folder: Path, data: bytes, what: str) -> None:
    """Apply ``data`` (a unified diff) to ``folder`` with ``patch -p1``; fail naming ``what``."""
    sections(_text(data, what), what)
    tool = shutil.which("patch")
    if tool is None:
        raise BuildError("`patch` is not installed; source_patches need it",
                         hint="install it (apt-get install patch)")
    try:
        run = subprocess.run([tool, "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "--reject-file=-",
                              "-d", str(folder)], input=data, capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"{what}: `patch` failed to run: {exc}") from None
    if run.returncode != 0:
        said = (run.stdout + run.stderr).decode(errors="replace").strip().splitlines()[-6:]
        raise BuildError(f"{what}: does not apply to the source:\n" + "\n".join(f"    {line}" for line in said),
                         hint="regenerate the patch against the pinned source, or pin the source it was made for")
