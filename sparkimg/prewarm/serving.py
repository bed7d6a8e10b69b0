"""The ``docker run`` arguments that give a serving container its warmed cache, read-only.

FlashInfer finds a module without rebuilding it only when the cache is at the path it was
compiled under and every variable that went into its build.ninja has the same value
(``serving_env`` in the manifest). Two paths must stay writable: FlashInfer's lock folder
(a tmpfs) and its log (the cache links it to /tmp). A host CUDA toolkit the prewarm
container had is mounted again: FlashInfer runs ``nvcc --version`` even to load a module
it does not compile.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg.errors import CacheMismatchError
from sparkimg.prewarm import manifest
from sparkimg.prewarm.verify import Expect, verify
from sparkimg.signing.keys import PublicKey


@dataclass(frozen=True)
class CacheArgs:
    host: Path
    container: str
    tmpfs: str
    env: dict[str, str]
    toolchain: dict[str, str] | None = None

    def args(self) -> list[str]:
        out = ["-v", f"{self.host}:{self.container}:ro", "--tmpfs", self.tmpfs]
        if self.toolchain:
            out += ["-v", f"{self.toolchain['host']}:{self.toolchain['container']}:ro"]
        for name, value in sorted(self.env.items()):
            out += ["-e", f"{name}={value}"]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"host": str(self.host), "container": self.container, "read_only": True, "tmpfs": self.tmpfs,
                "env": self.env, "toolchain": self.toolchain}


def cache_args(cache: Path, image_id: str, key: PublicKey | None) -> CacheArgs:
    """Mount, tmpfs and env for ``cache``; refused unless it was made in ``image_id`` (and,
    with ``key``, unless its signature and file sizes check out)."""
    where = manifest.path_of(cache)
    envelope = manifest.read(cache)
    if key is not None:
        report = verify(cache, key, Expect(), quick=True)
        if not report.ok:
            raise CacheMismatchError(f"{cache}: quick verification failed: " +
                                     "; ".join(p["message"] for p in report.problems),
                                     hint="run `sparkimg prewarm --verify` for every check, or prewarm again")
    data = manifest.parse_manifest(envelope.payload, str(where))
    if data.runner != "image":
        raise CacheMismatchError(f"{cache}: made by the host runner (for a bare-metal Python at "
                                 f"{data.workspace.base}), not inside an image",
                                 hint="prewarm with --runner image for a container")
    made_for = data.image_id
    if made_for != image_id:
        raise CacheMismatchError(f"{cache}: the cache was made for image {made_for}, the receipt's image is "
                                 f"{image_id}", hint="prewarm again for this image")
    base = data.workspace.base
    toolchain = dict(data.toolchain_mount) if data.toolchain_mount else None
    return CacheArgs(cache.resolve(), base, f"{base}/{data.workspace.dir}/cached_ops/tmp", dict(data.serving_env),
                     toolchain)
