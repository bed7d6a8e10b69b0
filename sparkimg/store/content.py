"""The content-addressed store: every input and output held by its sha256.

Safe under two concurrent builds and under kill -9 at any point: content is written to a
private temporary file (held under an exclusive ``flock`` while written), verified, fsynced
and then renamed into place. A reader only ever sees complete, verified entries; a temp
file whose writer died is found by its free lock and removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from sparkimg._internal import signals
from sparkimg._internal.fs.atomic import flock, fsync_dir, naming, write_json_atomic
from sparkimg._internal.fs.hashing import digest_file
from sparkimg._internal.fs.identity import identity
from sparkimg._internal.fs.verified import VerifiedReader
from sparkimg._internal.locations import default_store
from sparkimg.errors import HashMismatchError, SparkimgError
from sparkimg.formats.canonical import loads

CHUNK = 1 << 20
SWEEP_AGE_S = 30
LEASE = ".sparkimg-lease"  # in each work folder: flocked by the process that works there


_OWN_WORK: list[Path] = []  # every work folder this process leased, in any store


def remove_own_work() -> int:
    """Remove the work folders this process leased that are still there: what a run stopped by a
    signal leaves when a cleanup of its own was cut short (the sweep would take them only once
    this process is gone). Returns how many."""
    left = [folder for folder in _OWN_WORK if folder.exists()]
    for folder in left:
        shutil.rmtree(folder, ignore_errors=True)
    _OWN_WORK.clear()
    return len(left)


def default_root() -> Path:
    return default_store()


def sha256_file(path: Path) -> str:
    return digest_file(path)["sha256"]




def _remove_if_abandoned(thing: Path, lease: Path) -> bool:
    """Remove ``thing`` (a temp file or a work folder) when its ``lease`` is old enough and its
    flock is free: the writer that held it died. A writer takes its flock right after creating
    the lease, so young files are skipped."""
    try:
        if time.time() - lease.stat().st_mtime < SWEEP_AGE_S:
            return False
        with open(lease, "rb") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            if thing.is_dir():
                shutil.rmtree(thing, ignore_errors=True)
            else:
                thing.unlink()
            return True
    except (BlockingIOError, FileNotFoundError, NotADirectoryError):
        return False




class BlobWriter:
    """The write side of ``Store.writer``: what passes through is hashed and counted."""

    def __init__(self, sink: IO[bytes]) -> None:
        self.sink, self.hash, self.size, self.sha256 = sink, hashlib.sha256(), 0, ""

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self.hash.update(data)
        self.sink.write(data)
        self.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    @property
    def digest(self) -> str:
        return "sha256:" + self.hash.hexdigest()


class Store:
    """Blobs under ``blobs/sha256/``, JSON records beside them, temp files under ``tmp/``."""

    def __init__(self, root: Path | None = None) -> None:
        # Absolute: folders under it are bind-mounted into containers, which take no relative path.
        self.root = (root or default_root()).expanduser().absolute()
        self._leases: list[IO[str]] = []
        try:
            for sub in ("blobs/sha256", "tmp", "records", "git"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SparkimgError(f"cannot create the store at {self.root}: {exc.strerror}",
                             hint="pass --store DIR or set SPARKIMG_STORE to a writable folder") from None
        self.swept = self.sweep()

    # -- blobs -----------------------------------------------------------------

    def blob(self, sha256: str) -> Path:
        return self.root / "blobs" / "sha256" / sha256

    def has(self, sha256: str) -> bool:
        return self.blob(sha256).is_file()

    def put_stream(self, chunks: Iterable[bytes], *, expected: str | None = None, what: str = "input") -> str:
        """Admit content; if ``expected`` is given and differs, admit nothing and raise."""
        with self.writer(expected=expected, what=what) as sink:
            for chunk in chunks:
                sink.write(chunk)
        return sink.sha256

    @contextlib.contextmanager
    def writer(self, *, expected: str | None = None, what: str = "input") -> Iterator[BlobWriter]:
        """A file to write one blob into, hashed as it is written: when the block ends the blob is
        fsynced and renamed to its digest (``sink.sha256``), with no second read; an exception in
        the block, or a digest other than ``expected``, admits nothing."""
        with self._temp() as (handle, tmp):
            sink = BlobWriter(handle)
            yield sink
            handle.flush()
            os.fsync(handle.fileno())
            found = sink.sha256 = sink.hash.hexdigest()
            if expected is not None and found != expected:
                raise HashMismatchError(
                    f"{what}: sha256 mismatch: expected {expected}, got {found}; nothing was admitted",
                    hint="the source changed or the download is corrupt; if the change is intended, "
                    "re-lock with `sparkimg lock --update NAME`",
                )
            target = self.blob(found)
            if not target.exists():
                os.chmod(tmp, 0o444)
                os.replace(tmp, target)
                fsync_dir(target.parent)

    def link_in(self, path: Path, sha256: str) -> bool:
        """Admit ``path`` as the blob ``sha256`` by a hard link (no second copy on disk: the shared
        download cache), once the linked bytes are checked to be its name; False when the file
        cannot be linked here (another filesystem). ``HashMismatchError`` when its bytes are not
        its name. Either way nothing was admitted."""
        with self._temp() as (_, tmp):
            os.unlink(tmp)
            try:
                os.link(path, tmp)
            except OSError:
                return False
            found = digest_file(Path(tmp))["sha256"]
            if found != sha256:  # what is admitted is what was hashed
                raise HashMismatchError(f"{path}: sha256 {found}, not its name {sha256}")
            os.chmod(tmp, 0o444)
            os.replace(tmp, self.blob(sha256))
            fsync_dir(self.blob(sha256).parent)
        return True

    def put_file(self, path: Path, *, expected: str | None = None, what: str | None = None) -> str:
        with open(path, "rb") as handle:
            return self.put_stream(iter(lambda: handle.read(CHUNK), b""), expected=expected, what=what or str(path))

    def put_bytes(self, data: bytes, *, expected: str | None = None, what: str = "input") -> str:
        return self.put_stream([data], expected=expected, what=what)

    def verify(self, sha256: str) -> bool:
        return self.has(sha256) and sha256_file(self.blob(sha256)) == sha256

    def read_checked(self, sha256: str, what: str) -> bytes:
        """A small blob's bytes (a manifest, a config), refused (``DamagedBlobError``) unless they
        are its name: for documents that leave the store whole."""
        with self.reader(sha256, what) as reader:
            data = reader.read()
            reader.check()
        return data

    def reader(self, sha256: str, what: str) -> VerifiedReader:
        """The blob, hashed as it is read: for bytes that leave the store (an archive, an upload, an
        engine's load), which raise ``DamagedBlobError`` at its end when they are not its name."""
        return VerifiedReader(self.blob(sha256), sha256, what)

    def export(self, sha256: str, target: Path) -> None:
        """Copy a blob out (a hard link would let a build step write through to the store)."""
        shutil.copyfile(self.blob(sha256), target)

    # -- records ---------------------------------------------------------------

    def record_path(self, kind: str, name: str) -> Path:
        return self.root / "records" / kind / f"{name}.json"

    def read_record(self, kind: str, name: str) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = loads(self.record_path(kind, name).read_text())
        except (FileNotFoundError, ValueError):
            return None
        return data

    def write_record(self, kind: str, name: str, data: dict[str, Any]) -> None:
        write_json_atomic(self.record_path(kind, name), data)

    def memo(self, kind: str, path: Path, compute: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
        """``compute(path)``, remembered while the file is the same file: same inode, size, mtime
        and ctime (ctime moves on any change to the file, and cannot be set back by its owner).
        What git's index does for the working tree; a changed file is computed again."""
        real = path.resolve()
        stamp = identity(real)
        name = hashlib.sha256(f"{kind}\0{real}".encode()).hexdigest()
        known = self.read_record("memo", name)
        if known is not None and known.get("stamp") == stamp and isinstance(known.get("value"), dict):
            value: dict[str, Any] = known["value"]
            return value
        value = compute(real)
        self.write_record("memo", name, {"path": str(real), "kind": kind, "stamp": stamp, "value": value})
        return value

    # -- temp files and locks ----------------------------------------------------

    @contextlib.contextmanager
    def _temp(self) -> Iterator[tuple[IO[bytes], str]]:
        """A temp file in ``tmp/``, flocked while written; removed however the block ends (its
        close may fail on a full disk: the unlink runs all the same)."""
        fd, tmp = tempfile.mkstemp(dir=self.root / "tmp", prefix="put.")
        handle = os.fdopen(fd, "wb")
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            with naming(tmp):
                try:
                    yield handle, tmp
                finally:
                    handle.close()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def temp_dir(self, prefix: str) -> Path:
        """A work folder in ``tmp/``, leased (flocked) by this process until it exits, so that a
        later sweep removes it only once its owner is gone (a kill -9 leaves no stray folder)."""
        with signals.held():  # a stop between the two would leave a folder remove_own_work does not know
            folder = Path(tempfile.mkdtemp(dir=self.root / "tmp", prefix=prefix))
            _OWN_WORK.append(folder)
        handle = open(folder / LEASE, "a")  # noqa: SIM115 (held open: the flock is the lease)
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        self._leases.append(handle)
        return folder

    def discard(self, path: Path, what: str) -> None:
        """Remove a folder or file of the store by one rename into a leased work folder, then
        delete it there: a kill -9 leaves the whole of it in place, or a work folder the sweep
        removes, never half of it where a reader looks. One already gone is left gone."""
        gone = self.temp_dir(f"{what}-gone.") / path.name
        try:
            path.rename(gone)
        except FileNotFoundError:  # another process removed it first
            return
        if gone.is_dir():
            shutil.rmtree(gone, ignore_errors=True)
        else:
            gone.unlink(missing_ok=True)

    def lock(self, name: str) -> contextlib.AbstractContextManager[None]:
        """An exclusive lock shared by all sparkimg processes on this store."""
        return flock(self.root / "tmp" / f"{name}.lock")

    def sweep(self) -> int:
        """Remove temp files and work folders left by writers that died (their flock is free)."""
        tmp = self.root / "tmp"
        dead = [(folder, folder / LEASE) for folder in tmp.iterdir() if (folder / LEASE).is_file()]
        dead += [(entry, entry) for entry in tmp.glob("put.*")]
        return sum(_remove_if_abandoned(thing, lease) for thing, lease in dead)
