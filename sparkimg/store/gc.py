"""Garbage collection of the store: keep what a root reaches, remove the rest.

Marking is by reference, as Nix finds a store path's references by scanning it for hashes:
every sha256 (64 hex digits) and git commit (40) written in a root is live; so is every record
named by a live one (``images/KEY``, ``layers/KEY``, ``statements/KEY``, ``audits/KEY``,
``sboms/KEY``, ``sbom-layers/DIGEST``, ``git/COMMIT``) and every blob; records and small JSON
blobs (manifests, configs, indexes) that are live are scanned in turn, until nothing new is
found. A receipt's DSSE payload is decoded and scanned. Caches keyed by something no document
names (``oci-layers`` by the key of a layer's inputs, ``compressed-layers`` by diff_id and
compressor, ``checked-layers`` by the key a check rebuilt to the same bytes) are live when they
name a live digest. Scanning needs no knowledge of each format
and errs on the side of keeping: a
digest that merely appears in a live document keeps its blob.

Roots (``store.roots``): each spec built with this store whose file still exists (its last
build's keys, its current lock, every receipt under its receipts folder, every entry of its
nightly state folders), every live lease, and ``--keep-root PATH`` files or folders.

Removal is safe under kill -9 at any point: records go before blobs, each by one unlink,
and everything the store reads checks that the blobs a record names are there (a record
whose blob is gone is no record), so a half-done gc leaves a store that ``build`` trusts.
Small caches that name no blob (base schemes, nvcc answers, parsed specs, memos, stamps,
build state) are kept; git mirrors are kept (``docs/lock.md``). A compiler cache folder
(``store.caches``) is kept while a root's spec uses it (the root record names it) and never
while a build holds it; ``--keep-storage`` counts the caches with the blobs and removes the least
recently used of both, a cache still in use by a spec included (it holds only speed). An unpacked
CUDA toolkit (``toolkits/IDENTITY``) is kept while a live document names its identity (a lock
with ``toolchain: cuda: wheels`` does), and an unpacked input tree (``trees/BLOB``) while its blob
is live; else each is removed by one rename, as a cache is.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sparkimg.formats.canonical import loads
from sparkimg.formats.toolkit import FOLDER as TOOLKITS
from sparkimg.store import caches
from sparkimg.store import trees as input_trees
from sparkimg.store.content import Store
from sparkimg.store.roots import GC_LOCK, ROOTS, live_leases

HEX = re.compile(rb"(?<![0-9a-f])(?:[0-9a-f]{64}|[0-9a-f]{40})(?![0-9a-f])")
# Records named by a key, a layer digest or a commit (``sboms`` by image key, ``sbom-layers`` by layer digest).
NAMED = ("images", "layers", "statements", "audits", "git", "sboms", "sbom-layers")
NAMING = ("oci-layers", "compressed-layers", "checked-layers")  # caches live when they name a live digest
SCANNED_BLOB = 4 << 20  # blobs up to this size that start with "{" are scanned for references
LEASE_SLACK_S = 2.0  # mtimes have coarse clocks on some file systems
CACHE = "compiler-cache"  # a Doomed's kind for a compiler cache folder
TOOLKIT = "toolkit"  # a Doomed's kind for an unpacked toolkit (``toolkits/IDENTITY``, ``compile.toolkit``)
TREE = "tree"  # a Doomed's kind for an unpacked input tree (``trees/BLOB``, ``store.trees``)
UNPACKED = (TOOLKIT, TREE)


@dataclass(frozen=True)
class Doomed:
    """One thing gc removes (or would): a blob or a record."""

    path: Path
    size: int
    kind: str  # "blob", the record's kind, or "compiler-cache" (a folder)
    used: float  # last use (the later of atime and mtime): --keep-storage removes the oldest first
    modified: float


@dataclass
class Collection:
    """What one gc found and did."""

    roots: list[str] = field(default_factory=list)
    live: int = 0  # digests and keys reached
    kept_bytes: int = 0
    removed: list[Doomed] = field(default_factory=list)
    work_folders: int = 0
    dry_run: bool = False
    cache_bytes: int = 0  # compiler caches kept
    caches: list[Doomed] = field(default_factory=list)  # every compiler cache, for --keep-storage

    @property
    def removed_bytes(self) -> int:
        return sum(d.size for d in self.removed)

    def to_json(self) -> dict[str, Any]:
        blobs = [d for d in self.removed if d.kind == "blob"]
        return {"dry_run": self.dry_run, "roots": self.roots, "live": self.live, "kept_bytes": self.kept_bytes,
                "removed_bytes": self.removed_bytes, "removed_blobs": len(blobs),
                "removed_records": sum(1 for d in self.removed if d.kind not in ("blob", CACHE, *UNPACKED)),
                "removed_compiler_caches": sum(1 for d in self.removed if d.kind == CACHE),
                "removed_toolkits": sum(1 for d in self.removed if d.kind == TOOLKIT),
                "removed_trees": sum(1 for d in self.removed if d.kind == TREE),
                "kept_compiler_cache_bytes": self.cache_bytes, "work_folders": self.work_folders,
                "removed": [{"path": str(d.path), "kind": d.kind, "size": d.size} for d in self.removed]}


def references(data: bytes) -> set[str]:
    """Every sha256 and commit written in ``data``, and in a DSSE envelope's payload."""
    found = {m.decode() for m in HEX.findall(data)}
    if b'"payload"' in data:
        try:
            envelope = loads(data)
            found |= references(base64.b64decode(envelope["payload"], validate=True))
        except (ValueError, KeyError, TypeError):
            pass
    return found


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _files(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
    elif path.is_dir():
        for parent, _, names in os.walk(path):
            for name in sorted(names):
                yield Path(parent) / name


def _root_documents(store: Store, keep: Sequence[Path], locked: bool) -> tuple[list[str], set[str], float | None]:
    """(what the roots are, the digests and compiler cache folders they name, the start of the
    oldest live lease)."""
    described: list[str] = []
    named: set[str] = set()
    for record in sorted((store.root / "records" / ROOTS).glob("*.json")):
        try:
            data = loads(record.read_bytes())
            spec = Path(data["spec"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not spec.is_file():
            continue  # the spec is gone: so is its root (its record is removed below)
        described.append(f"spec {spec}")
        named.update(str(k) for k in data.get("keys", []))
        named.update(str(k) for k in data.get("compiler_caches", []))
        places = [Path(data.get("lock", "")), Path(data.get("receipts", "")),
                  *(Path(f) / "entries" for f in data.get("nightly", []))]
        for path in (p for place in places if str(place) not in ("", ".") for p in _files(place)):
            named |= references(_read(path))
    oldest: float | None = None
    for held in live_leases(store, remove_dead=locked):
        described.append(f"running build {held.path.name}")
        named.update(held.keys)
        if held.lock:
            named |= references(_read(Path(held.lock)))
        oldest = held.started if oldest is None else min(oldest, held.started)
    for path in keep:
        described.append(f"--keep-root {path}")
        for file in _files(path):
            named |= references(_read(file))
    return described, named, oldest


def _record_files(store: Store, kinds: Iterable[str]) -> Iterator[tuple[str, Path]]:
    for kind in kinds:
        folder = store.root / "records" / kind
        if folder.is_dir():
            for path in sorted(folder.glob("*.json")):
                yield kind, path


def mark(store: Store, named: set[str]) -> set[str]:
    """Every digest, key and commit reachable from ``named``."""
    live: set[str] = set()
    frontier = set(named)
    naming = {path: references(_read(path)) for _, path in _record_files(store, NAMING)}  # read once
    while frontier:
        while frontier:
            name = frontier.pop()
            if name in live:
                continue
            live.add(name)
            documents = [store.record_path(kind, name) for kind in NAMED]
            blob = store.blob(name)
            try:
                if blob.stat().st_size <= SCANNED_BLOB:
                    with blob.open("rb") as handle:
                        if handle.read(1) == b"{":
                            documents.append(blob)
            except OSError:
                pass
            for path in documents:
                frontier |= references(_read(path)) - live
        for cache, names in list(naming.items()):
            if names & live:
                frontier |= names - live
                del naming[cache]
    return live


def _doomed(path: Path, kind: str) -> Doomed | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return Doomed(path, st.st_size, kind, max(st.st_atime, st.st_mtime), st.st_mtime)


def survey(store: Store, keep: Sequence[Path] = (), *, locked: bool = False) -> tuple[Collection, list[Doomed]]:
    """What gc would keep and remove, records first then blobs (nothing removed; ``locked``: under
    the gc lock, where dead leases are cleared)."""
    roots, named, oldest = _root_documents(store, keep, locked)
    live = mark(store, named)
    protected = None if oldest is None else oldest - LEASE_SLACK_S
    found = Collection(roots=roots, live=len(live))
    doomed: list[Doomed] = []

    def young(d: Doomed) -> bool:
        return protected is not None and d.modified >= protected

    for kind, path in _record_files(store, NAMED):
        if path.stem not in live and (d := _doomed(path, kind)) is not None and not young(d):
            doomed.append(d)
    for kind, path in _record_files(store, NAMING):
        if not references(_read(path)) & live and (d := _doomed(path, kind)) is not None and not young(d):
            doomed.append(d)
    for _, path in _record_files(store, (ROOTS,)):
        try:
            gone = not Path(loads(path.read_bytes())["spec"]).is_file()
        except (OSError, ValueError, KeyError, TypeError):
            gone = True
        if gone and (d := _doomed(path, ROOTS)) is not None:
            doomed.append(d)
    for path in caches.folders(store):
        d = Doomed(path, caches.size(path), CACHE, caches.last_used(path), caches.last_used(path))
        found.caches.append(d)
        if path.name in named:
            found.cache_bytes += d.size
        else:
            doomed.append(d)
    # An unpacked toolkit is live while a live lock names its identity (the toolchain pin does); an
    # unpacked input tree while its blob is.
    for kind, folder in ((TOOLKIT, store.root / TOOLKITS), (TREE, store.root / input_trees.FOLDER)):
        for path in sorted(folder.iterdir()) if folder.is_dir() else ():
            if path.name not in live and (d := _doomed(path, kind)) is not None and not young(d):
                doomed.append(replace(d, size=caches.size(path)))
    blobs = store.root / "blobs" / "sha256"
    for path in sorted(blobs.iterdir()):
        d = _doomed(path, "blob")
        if d is None:
            continue
        if path.name in live or young(d):
            found.kept_bytes += d.size
        else:
            doomed.append(d)
    return found, doomed


def collect(store: Store, *, keep: Sequence[Path] = (), keep_storage: int | None = None,
            dry_run: bool = False) -> Collection:
    """Remove what no root reaches (``--keep-storage``: only the least recently used of it, until
    the blobs left take at most that many bytes). Under the store's gc lock: builds that start
    meanwhile wait; the leases of those already running are roots."""
    with store.lock(GC_LOCK):
        found, doomed = survey(store, keep, locked=True)
        if keep_storage is not None:
            doomed = _over(found, doomed, keep_storage)
        found.removed, found.dry_run = list(doomed), dry_run
        if not dry_run:
            from sparkimg.engine.ownership import sweep_leases

            found.work_folders = store.sweep() + sweep_leases()  # and the container leases of dead runs
            for d in doomed:  # records first: a record never names a blob that is gone while it stays
                if d.kind == CACHE:
                    if not caches.remove(store, d.path):
                        found.removed.remove(d)  # a build uses it now: kept
                elif d.kind in UNPACKED:
                    store.discard(d.path, d.kind)
                else:
                    d.path.unlink(missing_ok=True)
    return found


def _over(found: Collection, doomed: list[Doomed], budget: int) -> list[Doomed]:
    """The least recently used of the unreachable blobs and of every compiler cache (a cache holds
    only speed, so one a spec still uses may go too), until the blobs and caches left fit
    ``budget``; and the unreachable records that name a blob removed (the others stay: a cache
    whose blob stays is useful)."""
    candidates = sorted([d for d in doomed if d.kind == "blob"] + found.caches, key=lambda d: d.used)
    total = found.kept_bytes + sum(d.size for d in candidates if d.kind == "blob") + \
        sum(d.size for d in found.caches)
    chosen: list[Doomed] = []
    for d in candidates:
        if total <= budget:
            break
        chosen.append(d)
        total -= d.size
    gone = {d.path.name for d in chosen if d.kind == "blob"}
    records = [d for d in doomed if d.kind not in ("blob", CACHE, *UNPACKED)
               and (d.kind == ROOTS or references(_read(d.path)) & gone or d.path.stem in gone)]
    found.kept_bytes += sum(d.size for d in doomed if d.kind == "blob" and d not in chosen)
    found.cache_bytes = sum(d.size for d in found.caches if d not in chosen)
    return records + chosen + [d for d in doomed if d.kind in UNPACKED]


def reclaimable(store: Store) -> tuple[int, int]:
    """(the store's blob bytes, what ``gc`` would remove of them now), for ``doctor``."""
    found, doomed = survey(store)
    return found.kept_bytes + sum(d.size for d in doomed if d.kind == "blob"), \
        sum(d.size for d in doomed if d.kind == "blob")

