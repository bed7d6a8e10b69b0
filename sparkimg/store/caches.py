"""Folders of the store that hold only speed: the compiler caches (``compiler-cache/NAME/``).

Nothing a record or a receipt names is in them, so removing one never loses a build: the next
compile misses and fills it again. A build holds its cache with a shared ``flock`` on
``.sparkimg-in-use`` (``in_use``); ``gc`` removes a folder only when it can take that lock
exclusively, and by one rename into a leased work folder first, so a kill -9 leaves either the
whole cache or a folder the next sweep removes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from sparkimg.store.content import Store

COMPILER_CACHES = "compiler-cache"  # under the store root
IN_USE = ".sparkimg-in-use"


def folder(store: Store, name: str) -> Path:
    """The cache folder ``name``, made if absent (writable by the container's user, whoever it is)."""
    path = store.root / COMPILER_CACHES / name
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)
    return path


def folders(store: Store) -> list[Path]:
    root = store.root / COMPILER_CACHES
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


@contextlib.contextmanager
def in_use(path: Path) -> Iterator[None]:
    """Hold ``path`` against gc for the block; its last use is now (``--keep-storage`` goes by it)."""
    with open(path / IN_USE, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_SH)
        os.utime(path / IN_USE)
        yield


def last_used(path: Path) -> float:
    try:
        return (path / IN_USE).stat().st_mtime
    except OSError:
        return path.stat().st_mtime if path.exists() else 0.0


def size(path: Path) -> int:
    total = 0
    for parent, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(parent, name)).st_size
    return total


def remove(store: Store, path: Path) -> bool:
    """Remove one cache folder unless a build holds it now; True when it is gone."""
    try:
        handle = open(path / IN_USE, "a")  # noqa: SIM115 (closed by the with below)
    except OSError:
        return not path.exists()
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        store.discard(path, "compiler-cache")
    return True
