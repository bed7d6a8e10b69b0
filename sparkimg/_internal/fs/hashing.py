"""Hash many files at once: sha256 and md5 in one read, files spread over threads.

hashlib releases the GIL while it digests large buffers, so threads hash files in
parallel; bench/rehash.py measures this against ``sha256sum`` over the same files.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO

CHUNK = 1 << 20


def sha256_of(stream: IO[bytes]) -> str:
    """The sha256 of what ``stream`` holds from here on, read in pieces (a member of an archive may
    inflate past what memory holds)."""
    digest = hashlib.sha256()
    while chunk := stream.read(CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def digest_file(path: Path, algorithms: tuple[str, ...] = ("sha256",)) -> dict[str, str]:
    """Hex digests of ``path`` by each algorithm, from one read; raises ``OSError``."""
    digests = [hashlib.new(name, usedforsecurity=name != "md5") for name in algorithms]
    with open(path, "rb", buffering=0) as handle:
        while chunk := handle.read(CHUNK):
            for digest in digests:
                digest.update(chunk)
    return {name: d.hexdigest() for name, d in zip(algorithms, digests, strict=True)}


def hash_file(path: Path, algorithms: tuple[str, ...] = ("sha256",)) -> dict[str, str] | None:
    """``digest_file``, or None when ``path`` cannot be read."""
    try:
        return digest_file(path, algorithms)
    except OSError:
        return None


def hash_many(paths: Iterable[Path], algorithms: tuple[str, ...] = ("sha256",),
              workers: int | None = None) -> dict[Path, dict[str, str] | None]:
    """``hash_file`` over every path, on up to ``workers`` threads (default: one per CPU)."""
    unique = list(dict.fromkeys(paths))
    workers = workers or min(32, os.cpu_count() or 1)
    if workers == 1 or len(unique) < 2:
        return {p: hash_file(p, algorithms) for p in unique}
    from concurrent.futures import ThreadPoolExecutor  # its import costs ~8 ms: only where threads run

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(unique, pool.map(lambda p: hash_file(p, algorithms), unique), strict=True))
