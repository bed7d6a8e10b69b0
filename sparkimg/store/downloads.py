"""Downloads every store on a machine shares: pinned PyPI files by sha256, outside any one store.

A store is its own cache, but one machine often has several: a store per project, CI's store per
test, a second node's store on the same disk. Each would download the same 100 MB of CUDA toolkit
wheels and the same gigabytes of torch. With ``$SPARKIMG_DOWNLOAD_CACHE`` set, a pinned file is
admitted into a store from that folder when it is there, and put there after a download.

An entry reaches a store only once its bytes are checked to be the lock's sha256 (then hard-linked
in, or copied through the store's writer on another filesystem), so a damaged or foreign entry is
a miss (removed, then downloaded again), never an input. An entry is written under a temp name
and renamed (a kill -9 leaves no half file under a digest's name). Where the stores and the cache
share a filesystem, every store's blob and the entry are one file: no second copy on disk. Nothing
removes entries but their owner (``rm -rf`` the folder at any time); ``gc`` manages stores only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from sparkimg._internal.locations import DOWNLOAD_CACHE_ENV, download_cache
from sparkimg.errors import HashMismatchError
from sparkimg.store.content import CHUNK, Store


def admit(store: Store, sha256: str, what: str) -> bool:
    """Admit the cached file ``sha256`` into ``store``, its bytes checked against the name; False
    when there is no cache, no such entry, or an entry whose bytes are not its name (then removed)."""
    folder = download_cache()
    if folder is None:
        return False
    entry = folder / sha256
    if not entry.is_file():
        return False
    try:
        if store.link_in(entry, sha256):
            return True
        with entry.open("rb") as handle:  # another filesystem: copied and checked
            store.put_stream(iter(lambda: handle.read(CHUNK), b""), expected=sha256, what=what)
    except HashMismatchError:
        with contextlib.suppress(OSError):
            entry.unlink()
        return False
    except OSError:
        return False
    return True


def keep(store: Store, sha256: str) -> str | None:
    """Put the store's blob ``sha256`` into the cache, if there is one; a warning to say when it
    cannot be (the download itself succeeded: the cache is only speed)."""
    folder = download_cache()
    if folder is None or (folder / sha256).is_file():
        return None
    tmp: str | None = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{sha256[:16]}.", suffix=".tmp")
        os.close(fd)
        os.unlink(tmp)
        try:
            os.link(store.blob(sha256), tmp)
        except OSError:  # another filesystem, or links refused: a copy
            shutil.copyfile(store.blob(sha256), tmp)
        os.replace(tmp, folder / sha256)
        tmp = None
    except OSError as exc:
        return f"{DOWNLOAD_CACHE_ENV}={folder}: cannot keep {sha256[:16]}: {exc.strerror or exc}"
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return None

