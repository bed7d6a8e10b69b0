"""A file known again by its identity. ``os`` alone, so the no-op answer (``image.stamp``) can
stat the files it holds by without loading the rest of ``_internal.fs``."""

from __future__ import annotations

import os


def identity(path: str | os.PathLike[str]) -> list[int] | None:
    """Inode, size, mtime and ctime: the same file while all four stay (ctime moves on any
    change, and a file's owner cannot set it back; what git's index trusts). None if absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
