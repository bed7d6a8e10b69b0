"""``sparkimg doctor``: what this machine can do, checked, not assumed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from sparkimg._internal import emulation
from sparkimg._internal.units import format_size
from sparkimg.compile.bounds import mem_available
from sparkimg.errors import SparkimgError
from sparkimg.formats.lockfile import PLATFORMS


def _check(name: str, ok: bool, detail: str, *, required: bool = True) -> dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail, "required": required}


def diagnose(store_root: Path | None = None) -> list[dict[str, Any]]:
    from sparkimg.engine.connect import connect as connect_engine

    checks = [_check("python", sys.version_info >= (3, 11), sys.version.split()[0])]
    try:
        engine = connect_engine()
        checks.append(_check("engine", True, f"client {engine.client} {engine.version}, "
                             f"engine {engine.server_version()}; images are written by sparkimg and "
                             "loaded, so no BuildKit or buildx is needed"))
    except SparkimgError as exc:
        checks.append(_check("engine", False, exc.message))
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    v1 = Path("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists()
    checks.append(_check("cgroups", v1 or v2, "v2 (unified)" if v2 else ("v1" if v1 else "not found")))
    try:
        checks.append(_check("memory", True, f"MemAvailable {format_size(mem_available())}"))
    except (OSError, SparkimgError) as exc:
        checks.append(_check("memory", False, str(exc), required=False))
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if nvcc:
        archs = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True, check=False).stdout
        checks.append(_check("nvcc", "compute_121" in archs, f"{nvcc}: "
                             + ("compiles for 12.1 (GB10)" if "compute_121" in archs else "no compute_121"),
                             required=False))
    else:
        checks.append(_check("nvcc", False, "not found (needed for toolchain: cuda: host)", required=False))
    for platform in PLATFORMS:
        if platform != emulation.native():
            said = emulation.verdict(platform)
            checks.append(_check(f"emulation {platform}", said.ok, said.detail + (f"; fix: {said.fix}" if said.fix
                                 else ""), required=False))
    gpu = shutil.which("nvidia-smi") is not None
    checks.append(_check("gpu", gpu, "nvidia-smi present" if gpu else "no GPU: compiles work, prewarm runs without "
                         "--gpus", required=False))
    try:
        from sparkimg.store.content import Store
        from sparkimg.store.gc import reclaimable

        store = Store(store_root)
        size, spare = reclaimable(store)
        checks.append(_check("store", True, f"{store.root}: {format_size(size)} of blobs; `sparkimg gc` would "
                             f"reclaim {format_size(spare)}"))
    except SparkimgError as exc:
        checks.append(_check("store", False, exc.message))
        return checks
    checks.append(_downloads())
    from sparkimg.store.fsck import verify_store

    found = verify_store(store)  # every blob against its name: rot ships nowhere unnoticed
    bad = ", ".join(f"sha256:{d.sha256}" for d in found.damaged[:3]) + (" ..." if len(found.damaged) > 3 else "")
    checks.append(_check("store blobs", found.ok, f"{found.blobs} blob(s) hashed in {found.seconds:.1f} s, each its "
                         "name" if found.ok else f"{len(found.damaged)} damaged: {bad}; fix: `sparkimg store verify "
                         "--repair` (the next build fetches or rebuilds them)"))
    return checks


def _downloads() -> dict[str, Any]:
    """Where the downloads every store shares are (``store.downloads``), and how much they hold."""
    from sparkimg._internal.locations import DOWNLOAD_CACHE_ENV, download_cache

    folder = download_cache()
    if folder is None:
        return _check("downloads", True, f"each store downloads for itself (set {DOWNLOAD_CACHE_ENV}=DIR to share "
                      "downloads between stores)", required=False)
    if folder.exists() and not (folder.is_dir() and os.access(folder, os.W_OK)):
        return _check("downloads", False, f"{DOWNLOAD_CACHE_ENV}={folder}: not a writable folder; downloads are "
                      "not shared", required=False)
    entries = [entry for entry in folder.iterdir() if not entry.name.startswith(".")] if folder.is_dir() else []
    size = sum(entry.stat().st_size for entry in entries)
    return _check("downloads", True, f"{folder}: {len(entries)} file(s), {format_size(size)}, shared by every store "
                  "on this machine", required=False)
