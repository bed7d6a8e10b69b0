"""``sparkimg doctor``: what this machine can do, checked, not assumed."""

from __future__ import annotations

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
    from sparkimg.store.fsck import verify_store

    found = verify_store(store)  # every blob against its name: rot ships nowhere unnoticed
    bad = ", ".join(f"sha256:{d.sha256}" for d in found.damaged[:3]) + (" ..." if len(found.damaged) > 3 else "")
    checks.append(_check("store blobs", found.ok, f"{found.blobs} blob(s) hashed in {found.seconds:.1f} s, each its "
                         "name" if found.ok else f"{len(found.damaged)} damaged: {bad}; fix: `sparkimg store verify "
                         "--repair` (the next build fetches or rebuilds them)"))
    return checks
