"""Local folders as content: a digest over their files, and a deterministic tar of them."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

from sparkimg._internal.fs.files import inside, regular_file
from sparkimg.errors import UsageError

IGNORED = {"__pycache__", ".git", ".pytest_cache", ".mypy_cache"}


def files(root: Path) -> list[Path]:
    """Regular files under ``root``, sorted, skipping caches and VCS folders. A link is followed
    only while it stays under ``root``; a link out of it, or a FIFO, socket or device, is refused
    (a source reads nothing from outside its folder, and nothing that would block a read)."""
    top = root.resolve()
    found: list[Path] = []

    def unreadable(exc: OSError) -> None:
        raise UsageError(f"{exc.filename}: cannot read: {exc.strerror}", hint="a source folder must be readable whole")
    for folder, dirs, names in os.walk(root, onerror=unreadable):
        dirs[:] = sorted(d for d in dirs if d not in IGNORED)
        for name in [*dirs, *sorted(names)]:
            path = Path(folder) / name
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                raise UsageError(f"{path!r}: cannot be part of a source (its name is not UTF-8)",
                                 hint="rename it") from None
            (inside if name in dirs else regular_file)(path, top, within=f"the source folder {root}")
        for name in sorted(names):
            path = Path(folder) / name
            if path.suffix == ".pyc":
                continue
            if not path.is_file():
                raise UsageError(f"{path}: not a regular file (a FIFO, socket, device or broken link)",
                                 hint="a source folder holds plain files and folders only")
            found.append(path)
    return found


def describe(root: Path) -> dict[str, Any]:
    """Per-file sha256, md5 and mode, and one sha256 over the whole listing."""
    listing: dict[str, dict[str, Any]] = {}
    for path in files(root):
        data = path.read_bytes()
        listing[path.relative_to(root).as_posix()] = {
            "sha256": hashlib.sha256(data).hexdigest(),
            "md5": hashlib.md5(data, usedforsecurity=False).hexdigest(),
            "executable": os.access(path, os.X_OK),
        }
    canonical = "".join(
        f"{name}\0{entry['sha256']}\0{int(entry['executable'])}\n" for name, entry in sorted(listing.items())
    )
    return {"sha256": hashlib.sha256(canonical.encode()).hexdigest(), "files": listing}


def tar(root: Path) -> bytes:
    """A tar of ``root`` with fixed owners and times, so equal trees give equal bytes."""
    buffer = io.BytesIO()
    import tarfile  # only where a tar is written: a no-op build checks digests and never tars

    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in files(root):
            info = tarfile.TarInfo(path.relative_to(root).as_posix())
            data = path.read_bytes()
            info.size = len(data)
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
