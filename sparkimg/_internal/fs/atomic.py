"""Writes that are whole or absent: a temp file in the same folder, fsynced, renamed, the folder
fsynced; and the one exclusive lock (``flock``) every writer and lease of sparkimg takes."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparkimg.formats.canonical import pretty

_DISK = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS}  # the disk said no


@contextlib.contextmanager
def naming(path: Path | str) -> Iterator[None]:
    """A write that fails on the disk (full, over quota, read-only, an I/O error) raises an
    ``OSError`` without a file name; give it ``path``'s, so the message names what was written."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno in _DISK:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with naming(path), os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def write_json_atomic(path: Path, data: Any) -> None:
    write_atomic(path, pretty(data))


@contextlib.contextmanager
def flock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if absent); the kernel drops it if we die."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file in ``folder`` durable (the folder's own entry)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
