"""``run-args``: the ``docker run`` arguments a receipt implies for serving.

Patch sets with ``mode: mount`` are not in the image; the receipt records each file's
container path and digests. The files on disk are hashed first: a file that differs
from the receipt is never mounted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._hashing import hash_many
from ..errors import SparkimgError
from . import dsse
from .keys import PublicKey
from .statement import load


class RunArgsError(SparkimgError):
    """A patch file to mount is missing or differs from the receipt (exit 1)."""


@dataclass(frozen=True)
class Mount:
    host: Path
    container: str

    def arg(self) -> str:
        return f"{self.host}:{self.container}:ro"


@dataclass(frozen=True)
class RunArgs:
    image: str
    image_id: str
    mounts: tuple[Mount, ...]

    def args(self) -> list[str]:
        return [part for mount in self.mounts for part in ("-v", mount.arg())]

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "image_id": self.image_id, "args": self.args(),
                "mounts": [{"host": str(m.host), "container": m.container, "read_only": True} for m in self.mounts]}


def run_args(receipt: Path, root: Path, key: PublicKey | None = None) -> RunArgs:
    """Mount arguments for every ``mode: mount`` patch file of ``receipt``, paths under ``root``."""
    envelope = dsse.read(receipt)
    if key is not None and (why := envelope.check_signature(key)):
        raise RunArgsError(f"{receipt}: {why}", hint="run `sparkimg verify-receipt` to see every check")
    data = load(envelope.payload, str(receipt))
    deps = data["predicate"]["buildDefinition"]["resolvedDependencies"]
    wanted = [d for d in deps if d["name"].startswith("patch:") and d["annotations"]["mode"] == "mount"]
    paths = {d["name"]: (root / d["uri"].removeprefix("file:")).resolve() for d in wanted}
    hashed = hash_many(paths.values())
    bad = []
    for dep in wanted:
        digests = hashed[paths[dep["name"]]]
        if digests is None:
            bad.append(f"{paths[dep['name']]}: missing")
        elif digests["sha256"] != dep["digest"]["sha256"]:
            bad.append(f"{paths[dep['name']]}: sha256 {digests['sha256']}, the receipt pins {dep['digest']['sha256']}")
    if bad:
        raise RunArgsError(f"{receipt}: patch files to mount differ from the receipt:\n" +
                           "\n".join(f"  {line}" for line in bad),
                           hint="restore the pinned files (or pass --root where they are); never mount other bytes")
    subject = data["subject"][0]
    mounts = tuple(Mount(paths[d["name"]], d["annotations"]["mount"]) for d in wanted)
    return RunArgs(subject["name"], "sha256:" + subject["digest"]["sha256"], mounts)
