"""Resolve a pinned PyPI wheel to its URL and sha256 with pip itself (``--dry-run --report``).

Using pip keeps the machine's own index configuration (mirrors, find-links, certificates).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

from .errors import ResolveError

# pip takes --platform tags literally (no older glibc versions implied), so every manylinux_2_N a
# wheel may carry is listed, newest first (NVIDIA's CUDA wheels are manylinux_2_27, for one).
_GLIBC_MINORS = range(39, 16, -1)
_PLATFORM_TAGS = {
    platform: [*(f"manylinux_2_{minor}_{arch}" for minor in _GLIBC_MINORS), f"manylinux2014_{arch}",
               f"linux_{arch}"]
    for platform, arch in (("linux/arm64", "aarch64"), ("linux/amd64", "x86_64"))
}


@dataclass(frozen=True)
class WheelPin:
    filename: str
    url: str
    sha256: str


def resolve(package: str, version: str, platform: str) -> WheelPin:
    args = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
            "--only-binary=:all:", "--quiet", "--report", "-", "--disable-pip-version-check"]
    for tag in _PLATFORM_TAGS.get(platform, []):
        args += ["--platform", tag]
    if platform in _PLATFORM_TAGS:
        args += ["--target", "/nonexistent-sparkimg-target"]
    args.append(f"{package}=={version}")
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ResolveError(f"pip could not resolve {package}=={version}: {exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise ResolveError(f"no {platform} wheel for {package}=={version}: {last}",
                           hint="check the name and version; pin `filename` if several wheels fit")
    report = json.loads(proc.stdout)
    item = report["install"][0]
    info = item["download_info"]
    sha256 = info.get("archive_info", {}).get("hashes", {}).get("sha256")
    url = str(info["url"])
    if not sha256:
        raise ResolveError(f"{package}=={version}: the index gave no sha256 for {url}")
    return WheelPin(url.rsplit("/", 1)[-1], url, str(sha256))
