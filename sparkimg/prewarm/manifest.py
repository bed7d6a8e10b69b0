"""The prewarm manifest on disk: ``DIR/sparkimg-prewarm.json``, built from the worker's
events, written through the one signed-file writer, and read back as the typed model
(``formats.manifest.PrewarmManifest``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sparkimg import __version__
from sparkimg._internal.times import rfc3339
from sparkimg.engine.protocol import Mount
from sparkimg.formats.canonical import canonical
from sparkimg.formats.prewarm_manifest import (
    PREDICATE_TYPE,
    CachedFile,
    CachedModule,
    PrewarmManifest,
    Workspace,
    parse_manifest,
)
from sparkimg.signing import dsse
from sparkimg.signing.keys import PrivateKey
from sparkimg.signing.signed import write_signed

__all__ = ["HINT", "NAME", "PREDICATE_TYPE", "parse_manifest", "path_of", "read", "statement", "write"]

NAME = "sparkimg-prewarm.json"
HINT = "prewarm the cache (again) with `sparkimg prewarm ... --cache DIR --key KEY` to write its manifest"


def path_of(cache: Path) -> Path:
    return cache / NAME


def read(cache: Path) -> dsse.Envelope:
    """The cache's manifest envelope; a missing or damaged one is bad input (exit 2)."""
    return dsse.read(path_of(cache), hint=HINT)


def statement(*, env: dict[str, Any], modules: list[dict[str, Any]], archs: list[str],
              image: dict[str, Any] | None, runner: str, toolchain: Mount | None = None) -> PrewarmManifest:
    """The manifest from the worker's env event and its journal records."""
    return PrewarmManifest(
        flashinfer=env["flashinfer"],
        cuda_architectures=tuple(archs),
        image=image,
        runner=runner,
        workspace=Workspace(env["base"], env["workspace"], env["arch_dir"]),
        serving_env=env["build_env"],
        toolchain_mount=None if toolchain is None else {"host": str(toolchain.source), "container": toolchain.target},
        environment={k: env.get(k) for k in ("python", "torch", "nvcc", "machine", "cuda_home")},
        modules=tuple(CachedModule(m["name"], m["module"], m["library"],
                                   tuple(CachedFile(f["path"], f["size"], f["sha256"]) for f in m["files"]),
                                   m.get("aot", False), m.get("seconds")) for m in modules),
        created=rfc3339(time.time()),
        sparkimg=__version__,
    )


def write(cache: Path, data: PrewarmManifest, key: PrivateKey | None) -> tuple[Path, bool]:
    """Write the manifest, signed when ``key`` is given; an existing one that says the same
    (apart from its creation time) under the same signer is kept. Returns (path, written)."""
    target = path_of(cache)

    def same(existing: bytes) -> bool:
        return parse_manifest(existing, str(target)).timeless() == data.timeless()

    written = write_signed(target, canonical(data.to_json()), key, same=same)
    return target, written.written
