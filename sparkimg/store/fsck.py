"""``sparkimg store verify [--repair]``: every blob of the store hashed against its name, as
``git fsck`` and ``nix store verify`` check theirs.

A blob is named by its sha256, so a bit flipped on disk or a tail cut off is found by reading
it once. Blobs are hashed on several threads (hashlib lets go of the GIL), one 1 MiB piece at a
time per thread: memory does not grow with the store. ``--repair`` removes each damaged blob
(one rename into a leased work folder, then deleted there); every cache that named it then
misses, so the next ``build`` fetches the input again or rebuilds the layer. Nothing else is
touched: a record naming a blob the store lacks is what a fresh store looks like.
"""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg._internal.fs.hashing import hash_file
from sparkimg._internal.units import format_size
from sparkimg.events import Event, Kind, Phase, Reporter, silent
from sparkimg.store.content import Store

_NAME = re.compile(r"^[0-9a-f]{64}$")
_EVERY_S = 5.0  # seconds between progress events


@dataclass(frozen=True)
class Damaged:
    """A blob whose bytes are not its name: ``found`` is what they hash to (None: unreadable)."""

    sha256: str
    size: int
    found: str | None

    def to_json(self) -> dict[str, Any]:
        return {"blob": f"sha256:{self.sha256}", "size": self.size,
                "found": f"sha256:{self.found}" if self.found else None}


@dataclass(frozen=True)
class StoreVerified:
    """What ``verify_store`` read and found."""

    store: Path
    blobs: int
    bytes: int
    seconds: float
    damaged: tuple[Damaged, ...]
    repaired: bool  # the damaged blobs were removed

    @property
    def ok(self) -> bool:
        return not self.damaged

    @property
    def exit_code(self) -> int:
        return 0 if self.ok or self.repaired else 1

    def to_json(self) -> dict[str, Any]:
        return {"store": str(self.store), "ok": self.ok, "blobs": self.blobs, "bytes": self.bytes,
                "seconds": round(self.seconds, 3), "damaged": [d.to_json() for d in self.damaged],
                "repaired": self.repaired}


def verify_store(store: Store, *, repair: bool = False, workers: int | None = None,
                 report: Reporter = silent) -> StoreVerified:
    """Hash every blob of ``store`` against its name; with ``repair``, remove the damaged ones."""
    folder = store.root / "blobs" / "sha256"
    names = sorted(entry.name for entry in os.scandir(folder) if _NAME.match(entry.name) and entry.is_file())
    sizes = {name: _size(folder / name) for name in names}
    total = sum(sizes.values())
    started = last = time.perf_counter()
    done = 0
    damaged: list[Damaged] = []
    report(Event(Phase.VERIFY, f"store {store.root}: hashing {len(names)} blob(s), {format_size(total)}"))
    with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool:
        for name, digests in zip(names, pool.map(lambda n: hash_file(folder / n), names), strict=True):
            done += sizes[name]
            found = digests["sha256"] if digests else None
            if found != name:
                damaged.append(Damaged(name, sizes[name], found))
                report(Event(Phase.VERIFY, f"blob sha256:{name} is damaged: "
                             + (f"its bytes hash to sha256:{found}" if found else "it cannot be read"),
                             kind=Kind.WARNING))
            if (now := time.perf_counter()) - last >= _EVERY_S:
                last = now
                report(Event(Phase.VERIFY, f"store: {format_size(done)} of {format_size(total)} hashed",
                             kind=Kind.PROGRESS, figures={"task": "store verify", "done": done, "total": total,
                                                          "finished": False}))
    if repair:
        for blob in damaged:
            store.discard(folder / blob.sha256, "damaged")
            report(Event(Phase.VERIFY, f"removed damaged blob sha256:{blob.sha256}; the next build fetches or "
                         "rebuilds it"))
    seconds = time.perf_counter() - started
    report(Event(Phase.VERIFY, f"store: {len(names)} blob(s), {format_size(total)} hashed in {seconds:.1f} s; "
                 f"{len(damaged)} damaged" + (", removed" if repair and damaged else ""), kind=Kind.DONE,
                 figures={"blobs": len(names), "bytes": total, "seconds": round(seconds, 3),
                          "damaged": len(damaged)}))
    return StoreVerified(store.root, len(names), total, seconds, tuple(damaged), repair and bool(damaged))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
