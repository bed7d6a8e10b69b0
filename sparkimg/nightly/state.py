"""The nightly state folder: one entry per night, a pointer to the build in service, a lock.

Layout (docs/nightly.md)::

    STATE/lock                  flocked while a nightly, promote or rollback runs
    STATE/current.json          {"entry": ID}: the night whose lock and image are in service
    STATE/entries/ID/           entry.json, report.json, report.html, and lock.json for a build
    STATE/.tmp-ID-*/            an entry being written (a dead writer's is swept)

Safe under kill -9 at any point: an entry is written whole into a temp folder and renamed
into ``entries/`` (a rename is atomic), so a reader sees a complete entry or none; the pointer
and a known-good mark are replaced with ``write_atomic``. Only the lock holder writes, so any
temp folder found under the lock belongs to a writer that died.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from sparkimg._internal.fs.atomic import fsync_dir, write_atomic
from sparkimg._internal.fs.files import read_input, regular_file
from sparkimg.errors import BusyError, UsageError
from sparkimg.formats.canonical import loads, pretty
from sparkimg.formats.nightly import Entry

STATE_FILE_BYTES = 64 << 20  # an entry's JSON, lock or receipt; a larger one is not sparkimg's
ENTRY_ID = re.compile(r"^\d{8}T\d{6}Z(-\d+)?$")
ENTRY_FILE = "entry.json"
LOCK_FILE = "lock.json"
TEMP_PREFIX = ".tmp-"


def default_folder(spec_path: Path) -> Path:
    """``SPEC.nightly/`` beside the spec (as ``SPEC.lock.json`` is)."""
    return spec_path.with_name(spec_path.name + ".nightly")


def _order(entry_id: str) -> tuple[str, int]:
    stem, _, suffix = entry_id.partition("-")
    return stem, int(suffix or 0)


@contextlib.contextmanager
def alone(path: Path, busy: str, hint: str) -> Iterator[None]:
    """A non-blocking exclusive flock on ``path`` (dropped by the kernel if we die); ``BusyError``
    with ``busy`` and ``hint`` when another process holds it."""
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BusyError(busy, hint=hint) from None
        yield


class State:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.entries_dir = root / "entries"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the state folder alone (a non-blocking flock, dropped by the kernel if we die), and
        sweep what dead writers left; BusyError when another process holds it."""
        self.root.mkdir(parents=True, exist_ok=True)
        with alone(self.root / "lock", f"{self.root}: another sparkimg nightly (or promote, rollback) is using this "
                   "state folder", "wait for it to finish; a timer run will try again next night"):
            self.sweep()
            yield

    def sweep(self) -> int:
        """Remove temp folders of writers that died (call under ``locked``)."""
        found = [p for p in self.root.glob(f"{TEMP_PREFIX}*") if p.is_dir()] if self.root.is_dir() else []
        for folder in found:
            shutil.rmtree(folder, ignore_errors=True)
        return len(found)

    def new_id(self, now: float | None = None) -> str:
        """A new entry's id: the UTC time, with ``-N`` when that second is taken."""
        stem = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
        taken = {p.name for p in self.entries_dir.glob(f"{stem}*")} if self.entries_dir.is_dir() else set()
        entry_id, n = stem, 1
        while entry_id in taken:
            n += 1
            entry_id = f"{stem}-{n}"
        return entry_id

    def folder(self, entry_id: str) -> Path:
        if not ENTRY_ID.match(entry_id):
            raise UsageError(f"{entry_id!r} is not a nightly entry id", hint="list them with `sparkimg history SPEC`")
        return self.entries_dir / entry_id

    def write(self, entry: Entry, files: Mapping[str, bytes]) -> Path:
        """Write ``entry`` and ``files`` (name -> bytes) as one new entry folder, all or nothing."""
        target = self.folder(entry.entry)
        if target.exists():
            raise UsageError(f"{target}: the entry exists already")
        self.root.mkdir(parents=True, exist_ok=True)
        temp = Path(tempfile.mkdtemp(dir=self.root, prefix=f"{TEMP_PREFIX}{entry.entry}-"))
        try:
            for name, data in {**files, ENTRY_FILE: pretty(entry.to_json())}.items():
                with open(temp / name, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
            os.chmod(temp, 0o755)
            fsync_dir(temp)
            self.entries_dir.mkdir(parents=True, exist_ok=True)
            os.rename(temp, target)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        fsync_dir(self.entries_dir)
        return target

    def update(self, entry: Entry) -> None:
        """Replace an existing entry's ``entry.json`` (a known-good mark), atomically."""
        folder = self.folder(entry.entry)
        if not (folder / ENTRY_FILE).is_file():
            raise UsageError(f"{folder}: no such entry", hint="list them with `sparkimg history SPEC`")
        write_atomic(folder / ENTRY_FILE, pretty(entry.to_json()))

    def _read(self, path: Path) -> bytes:
        """A file of the state folder: a regular file that resolves inside it (an entry that links
        elsewhere, or a FIFO, is refused), of a bounded size. FileNotFoundError when absent."""
        if not path.exists() and not path.is_symlink():
            raise FileNotFoundError(path)
        real = regular_file(path, self.root, within=f"the state folder {self.root}")
        return read_input(real, STATE_FILE_BYTES, hint="move it out of the state folder")

    def get(self, entry_id: str) -> Entry:
        path = self.folder(entry_id) / ENTRY_FILE
        try:
            raw = self._read(path)
        except FileNotFoundError:
            known = ", ".join(e.entry for e in self.entries()[-5:]) or "none yet"
            raise UsageError(f"{self.root}: no nightly entry {entry_id} (latest: {known})",
                             hint="list them with `sparkimg history SPEC`") from None
        try:
            data = loads(raw)
        except ValueError as exc:
            raise UsageError(f"{path}: not valid JSON ({exc})", hint="move the entry out of the state folder") from None
        return Entry.from_json(data, str(path))

    def entries(self, *, tolerant: bool = False) -> list[Entry]:
        """Every complete entry, oldest first (a folder without ``entry.json`` is not one). With
        ``tolerant``, an entry that cannot be read (hand-edited, another version) is left out
        instead of failing the whole list: a night's own record never hangs on an older one."""
        if not self.entries_dir.is_dir():
            return []
        ids = sorted((p.name for p in self.entries_dir.iterdir()
                      if ENTRY_ID.fullmatch(p.name) and (p / ENTRY_FILE).is_file()), key=_order)
        found = []
        for entry_id in ids:
            try:
                found.append(self.get(entry_id))
            except UsageError:
                if not tolerant:
                    raise
        return found

    def lock_bytes(self, entry_id: str) -> bytes | None:
        """The lock a built entry was built from, byte for byte; None when it kept none."""
        try:
            return self._read(self.folder(entry_id) / LOCK_FILE)
        except FileNotFoundError:
            return None

    def current(self) -> str | None:
        """The entry in service (its lock is the spec's lock, its image has the moving tag)."""
        path = self.root / "current.json"
        try:
            raw = self._read(path)
        except FileNotFoundError:
            return None
        try:
            found = loads(raw).get("entry")
        except (ValueError, AttributeError):
            raise UsageError(f"{path}: not a current-entry pointer",
                             hint="remove it; the next built night writes it again") from None
        return found if isinstance(found, str) and ENTRY_ID.fullmatch(found) else None

    def set_current(self, entry_id: str) -> None:
        write_atomic(self.root / "current.json", pretty({"entry": entry_id}))

    def prune(self, keep: int) -> tuple[list[Entry], list[Entry]]:
        """Remove all but the ``keep`` newest nights, never the one in service nor a known-good one
        (rollback's targets), nor an entry that cannot be read; call under ``locked``. Each goes
        out of ``entries/`` by one rename, so a reader or a kill -9 sees it whole or gone (what a
        dead pruner left under a temp name is swept). Returns (removed, kept)."""
        if keep < 1:
            raise UsageError(f"--keep {keep}: keep at least the night just run", hint="e.g. --keep 30")
        entries = self.entries(tolerant=True)
        current = self.current()
        newest = {e.entry for e in entries[-keep:]}
        removed = [e for e in entries if e.entry not in newest and e.entry != current and not e.known_good]
        for entry in removed:
            doomed = self.root / f"{TEMP_PREFIX}pruned-{entry.entry}"
            os.rename(self.folder(entry.entry), doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        if removed:
            fsync_dir(self.entries_dir)
        gone = {e.entry for e in removed}
        return removed, [e for e in entries if e.entry not in gone]
