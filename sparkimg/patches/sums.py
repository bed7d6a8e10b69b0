"""Patch sets on disk: the files, ``mounts.txt`` and their ``MD5SUMS`` / ``SHA256SUMS``.

The sums files are in the coreutils formats (``md5sum -c`` and ``sha256sum -c`` read
them), so an operator can check a set without sparkimg. ``pin`` writes them from the
files; ``check`` verifies them; the lock refuses a set whose sums disagree with its files,
so a patch cannot change without its pin changing too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg._internal.fs.atomic import write_atomic
from sparkimg._internal.fs.files import MiB, read_input, regular_file
from sparkimg.errors import UsageError

MOUNTS = "mounts.txt"
SUMS = {"md5": "MD5SUMS", "sha256": "SHA256SUMS"}
BOOKKEEPING = {MOUNTS, *SUMS.values()}


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Non-blank lines that are not ``#`` comments, with their 1-based numbers. A file that cannot
    be read, is not UTF-8 text, or is a link out of its folder is bad input naming it."""
    try:
        text = read_input(regular_file(path, path.parent), 4 * MiB).decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text", hint="write it as plain text, one entry per line") from None
    except (OSError, ValueError) as exc:  # ValueError: a name no file can have (a NUL, a lone surrogate)
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UsageError(f"{path}: cannot read: {reason}") from None
    for number, line in enumerate(text.splitlines(), start=1):
        text = line.strip()
        if text and not text.startswith("#"):
            yield number, text


def digests(data: bytes) -> dict[str, str]:
    """The two digests a patch file is pinned by."""
    return {"sha256": hashlib.sha256(data).hexdigest(), "md5": hashlib.md5(data, usedforsecurity=False).hexdigest()}


def read_mounts(folder: Path) -> dict[str, str]:
    """File name -> container path from ``mounts.txt``, in its order. Bad lines are the spec
    check's to report."""
    mounts = folder / MOUNTS
    if not mounts.is_file():
        raise UsageError(f"{mounts}: no such file",
                         hint="a patch set lists each file and its container path in mounts.txt")
    pairs = (text.split() for _, text in numbered_lines(mounts))
    return {parts[0]: parts[1] for parts in pairs if len(parts) == 2}


def listed_files(folder: Path) -> list[str]:
    """File names ``mounts.txt`` lists, in its order."""
    return list(read_mounts(folder))


def read_sums(path: Path) -> dict[str, str]:
    """Parse a coreutils sums file (``HEX  NAME`` or ``HEX *NAME``) into name -> hex digest."""
    sums: dict[str, str] = {}
    for number, text in numbered_lines(path):
        digest, sep, name = text.partition(" ")
        name = name.lstrip(" ").removeprefix("*")
        if not sep or not name or not all(ch in "0123456789abcdef" for ch in digest.lower()):
            raise UsageError(f"{path}:{number}: not a coreutils sums line ('HEX  NAME'): {text!r}",
                             hint=f"regenerate it with `sparkimg patches pin {path.parent}`")
        sums[name] = digest.lower()
    return sums


def format_sums(sums: dict[str, str]) -> str:
    return "".join(f"{digest}  {name}\n" for name, digest in sorted(sums.items()))


def _files(folder: Path) -> dict[str, dict[str, str]]:
    names = listed_files(folder)
    for name in names:
        if "/" in name or name.startswith("."):
            raise UsageError(f"{folder}/mounts.txt: '{name}' must be a plain file name inside {folder.name}/")
        regular_file(folder / name, folder)
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise UsageError(f"{folder}: mounts.txt lists files that are not there: {', '.join(missing)}",
                         hint="add the files, or remove their lines from mounts.txt")
    unlisted = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name not in BOOKKEEPING
                      and p.name not in names and not p.name.startswith("."))
    if unlisted:
        raise UsageError(f"{folder}: {', '.join(unlisted)} not listed in mounts.txt",
                         hint="list each patch file with its container path in mounts.txt, or remove it")
    return {name: digests((folder / name).read_bytes()) for name in names}


def pin(folder: Path) -> dict[str, dict[str, str]]:
    """Write ``MD5SUMS`` and ``SHA256SUMS`` for the files ``mounts.txt`` lists; return the digests."""
    files = _files(folder)
    for algorithm, name in SUMS.items():
        write_atomic(folder / name, format_sums({f: d[algorithm] for f, d in files.items()}).encode())
    return files


@dataclass(frozen=True)
class SumProblem:
    file: str
    algorithm: str
    expected: str | None
    found: str | None

    def __str__(self) -> str:
        if self.expected is None:
            return f"{self.file}: not in {SUMS[self.algorithm]}"
        if self.found is None:
            return f"{self.file}: in {SUMS[self.algorithm]} but not in mounts.txt or not on disk"
        return f"{self.file}: {self.algorithm} is {self.found}, {SUMS[self.algorithm]} pins {self.expected}"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "algorithm": self.algorithm, "expected": self.expected, "found": self.found}


def disagreements(folder: Path, files: dict[str, dict[str, str]], *, required: bool) -> list[SumProblem]:
    """Every way ``files`` (name -> digests) disagrees with the folder's sums files. A missing
    sums file is bad input when ``required``, and is skipped otherwise."""
    problems: list[SumProblem] = []
    for algorithm, name in SUMS.items():
        path = folder / name
        if not path.is_file():
            if required:
                raise UsageError(f"{path}: no such file", hint=f"pin the set with `sparkimg patches pin {folder}`")
            continue
        pinned = read_sums(path)
        for file in sorted(set(pinned) | set(files)):
            found = files.get(file, {}).get(algorithm)
            if pinned.get(file) != found:
                problems.append(SumProblem(file, algorithm, pinned.get(file), found))
    return problems


def check(folder: Path) -> tuple[dict[str, dict[str, str]], list[SumProblem]]:
    """The files' digests, and every way they disagree with the sums files.

    Raises ``UsageError`` when a sums file is missing or malformed (exit 2, not a mismatch)."""
    files = _files(folder)
    return files, disagreements(folder, files, required=True)
