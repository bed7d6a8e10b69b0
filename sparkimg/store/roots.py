"""What the store's garbage collector keeps: the roots, and the leases of running builds.

A **root record** (``records/roots/SHA.json``, one per spec path) is written by each build of
a spec with its own lock: where the spec, its lock, its receipts folder and its nightly state
folders are, the keys of its last build and the compiler cache folders its layers use. ``gc``
keeps what those reach while the spec file exists (``store.gc``).

A **lease** (``tmp/leases/ID.json``) is held by a running build: a file it keeps an flock on,
naming its lock file and the keys of its plan, and when it started. ``gc`` keeps what a live
lease names and every entry written since the oldest live lease started, so a build's inputs
and outputs are never removed under it. Leases are taken, and ``gc`` runs, under the store's
``gc`` lock: a build that starts while ``gc`` runs waits for it (seconds), and ``gc`` sees every
build that started before it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg.formats.canonical import loads
from sparkimg.store.content import Store

ROOTS = "roots"  # store records: a spec built with this store, by the sha256 of its path
GC_LOCK = "gc"


def root_name(spec: Path) -> str:
    return hashlib.sha256(str(spec.absolute()).encode()).hexdigest()


def remember_root(store: Store, spec: Path, *, lock: Path, receipts: Path, keys: Sequence[str],
                  nightly: Path | None = None, compiler_caches: Sequence[str] = ()) -> None:
    """Record that ``spec`` was built with this store (its last build's ``keys`` and the compiler
    cache folders its layers use), keeping the nightly state folders recorded before."""
    name = root_name(spec)
    known = store.read_record(ROOTS, name) or {}
    folders = [f for f in known.get("nightly", []) if isinstance(f, str)]
    default = str(spec.absolute().with_name(spec.name + ".nightly"))
    for folder in (default, str(nightly.absolute()) if nightly else None):
        if folder and folder not in folders:
            folders.append(folder)
    data = {"spec": str(spec.absolute()), "lock": str(lock.absolute()), "receipts": str(receipts.absolute()),
            "nightly": folders, "keys": list(keys) or known.get("keys", [])}
    caches = list(compiler_caches) or known.get("compiler_caches", [])
    if caches:
        data["compiler_caches"] = caches
    if data != known:  # a no-op build writes nothing
        store.write_record(ROOTS, name, data)


def remember_caches(store: Store, spec: Path, compiler_caches: Sequence[str]) -> None:
    """The compiler cache folders ``spec``'s layers used in a build against another lock (a night's
    candidate), kept by its root, which it has when its nightly state folder is one (the spec's own
    lock and keys stay as they were)."""
    name = root_name(spec)
    known = store.read_record(ROOTS, name)
    if known is not None and compiler_caches and known.get("compiler_caches") != list(compiler_caches):
        store.write_record(ROOTS, name, {**known, "compiler_caches": list(compiler_caches)})


def remember_nightly(store: Store, spec: Path, *, lock: Path, receipts: Path, folder: Path) -> None:
    """A nightly state folder of ``spec`` (``--state``), kept as a root beside the spec's own
    (whose last build's keys stay as they were)."""
    remember_root(store, spec, lock=lock, receipts=receipts, keys=[], nightly=folder)


@dataclass(frozen=True)
class Lease:
    """A running build, as a lease file says: its lock file and plan keys, and when it started."""

    path: Path
    started: float
    lock: str
    keys: tuple[str, ...]


def _leases_dir(store: Store) -> Path:
    return store.root / "tmp" / "leases"


@contextlib.contextmanager
def lease(store: Store, *, lock: Path, keys: Sequence[str]) -> Iterator[None]:
    """Hold a lease for the block: ``gc`` keeps ``keys``, what ``lock`` pins and every entry
    written from now on until the block ends."""
    folder = _leases_dir(store)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{uuid.uuid4().hex}.json"
    with store.lock(GC_LOCK):  # not while a gc runs: it would not see this lease
        handle = open(path, "a+")  # noqa: SIM115 (held open: the flock is the lease)
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        handle.write(json.dumps({"pid": os.getpid(), "started": time.time(), "lock": str(lock.absolute()),
                                 "keys": list(keys)}))
        handle.flush()
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        handle.close()


def live_leases(store: Store, *, remove_dead: bool = False) -> list[Lease]:
    """The leases whose builds still run. ``remove_dead`` (only under the gc lock, when no lease
    is being taken) removes a dead build's lease file: its flock is free."""
    found: list[Lease] = []
    folder = _leases_dir(store)
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            with open(path, "rb") as handle:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    data: Any = loads(handle.read() or b"{}")
                    found.append(Lease(path, float(data.get("started", 0)), str(data.get("lock", "")),
                                       tuple(str(k) for k in data.get("keys", []))))
                    continue
                if remove_dead:
                    path.unlink()  # its build died (kill -9): nothing holds it
        except (OSError, ValueError, TypeError, AttributeError):
            # Unreadable while it is being written: treat it as live from the start of time.
            found.append(Lease(path, 0.0, "", ()))
    return found
