"""A file read through its sha256: bytes of the store that leave it (in an archive, an upload, an
engine's load) are hashed as they pass, and a file whose bytes are not its name raises
``DamagedBlobError`` once its last byte is read, before whatever it feeds is finished."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from sparkimg._internal.fs.hashing import hash_many
from sparkimg.errors import DamagedBlobError, SparkimgError

REPAIR = ("run `sparkimg store verify --repair` (it removes damaged blobs; the next build fetches or rebuilds "
          "them), then run this command again")


class VerifiedReader:
    """``read`` of ``path``, hashed; at the end (EOF, or as many bytes as the file had when opened)
    the digest must be ``sha256``. Works under ``tarfile.addfile`` and ``shutil.copyfileobj``,
    which stop at the size they were told."""

    def __init__(self, path: Path, sha256: str, what: str) -> None:
        self.path, self.sha256, self.what = path, sha256, what
        self.handle = open(path, "rb")  # noqa: SIM115 (closed by close() / the with block)
        self.size = os.fstat(self.handle.fileno()).st_size
        self.count, self.hash, self.checked = 0, hashlib.sha256(), False

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.hash.update(data)
        self.count += len(data)
        if not data or self.count >= self.size:
            self.check()
        return data

    def check(self) -> None:
        """Raise unless every byte read so far is the whole file and hashes to its name."""
        if self.checked:
            return
        self.checked = True
        found = self.hash.hexdigest()
        if found != self.sha256:
            raise damaged_error(self.what, [self.sha256], f"its {self.count} bytes hash to sha256:{found}")

    def close(self) -> None:
        self.handle.close()

    def __enter__(self) -> VerifiedReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def damaged(blobs: Mapping[str, Path]) -> list[str]:
    """The digests (``sha256:HEX``) of ``blobs`` whose files do not hash to them, hashed in parallel:
    asked once something downstream (an engine's pull) refused what it was served."""
    hashed = hash_many(blobs.values())
    return [digest for digest, path in blobs.items() if (hashed[path] or {}).get("sha256") != digest.split(":")[-1]]


def damaged_error(what: str, digests: Sequence[str], detail: str = "") -> DamagedBlobError:
    """The error for damaged blobs of the store, naming each and the fix."""
    named = ", ".join(f"sha256:{d.split(':')[-1]}" for d in digests)
    return DamagedBlobError(f"{what}: the store's blob {named} is damaged" + (f": {detail}" if detail else "")
                            + "; nothing was made from it", hint=REPAIR)


@contextlib.contextmanager
def rot_named(blobs: Mapping[str, Path], what: str) -> Iterator[None]:
    """Reading ``blobs`` (hex -> file) in the block: when it fails (a zip or tar that does not
    parse, a member whose hash is wrong), and a blob is damaged, say that instead, with the fix.
    Nothing is hashed while all goes well."""
    try:
        yield
    except SparkimgError as exc:
        if bad := damaged({f"sha256:{name}": path for name, path in blobs.items()}):
            raise damaged_error(what, bad, exc.message) from None
        raise
