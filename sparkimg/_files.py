"""Reading an input file sparkimg was pointed at (a spec, a lock, a receipt, a recipe) without
being held up by it: a FIFO or a device is refused before any read (it would block or never
end), and a file larger than its kind can be is refused after ``limit`` bytes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import UsageError

MiB = 1 << 20


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
        raise UsageError(f"{path}: larger than {limit // MiB} MiB; not the file sparkimg expects here", hint=hint)
    return b"".join(chunks)
