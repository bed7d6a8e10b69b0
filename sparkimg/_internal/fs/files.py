"""Files sparkimg reads from outside: without being held up by them (a FIFO or a device is
refused before any read, a file larger than its kind can be after ``limit`` bytes), without
following a link out of the folder they belong to (known again by ``fs.identity``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sparkimg._internal.units import format_size
from sparkimg.errors import UsageError

MiB = 1 << 20


def inside(path: Path, folder: Path, *, within: str | None = None) -> Path:
    """``path`` with its links resolved; refused, naming it, when a link takes it out of ``folder``
    (described as ``within``, by default the folder itself), or when it cannot be resolved."""
    try:
        real, top = path.resolve(), folder.resolve()
    except (OSError, ValueError, RuntimeError) as exc:  # a loop of links, a name no file can have
        raise UsageError(f"{path}: cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    if not real.is_relative_to(top):
        raise UsageError(f"{path}: a link to {real}, outside {within or folder}",
                         hint="copy the file into the folder instead of linking to it")
    return real


def regular_file(path: Path, folder: Path, *, within: str | None = None) -> Path:
    """As ``inside``, and refused when it is there but not a regular file (a FIFO or a device
    would block a read, or never end one)."""
    real = inside(path, folder, within=within)
    try:
        if real.exists() and not stat.S_ISREG(real.stat().st_mode):
            raise UsageError(f"{path}: not a regular file", hint="keep plain files only in this folder")
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    return real


def read_input(path: Path, limit: int, *, hint: str | None = None) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit``; anything else is bad input naming it.
    A missing file raises ``FileNotFoundError`` for the caller to word."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}", hint=hint) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"{path}: not a regular file (a FIFO, device or folder)", hint=hint)
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}", hint=hint) from None
    finally:
        os.close(fd)
    if size > limit:
        raise UsageError(f"{path}: larger than {format_size(limit)}; not the file sparkimg expects here", hint=hint)
    return b"".join(chunks)
