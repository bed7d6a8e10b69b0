"""``run-args``: the ``docker run`` arguments a receipt implies for serving.

Patch sets with ``mode: mount`` are not in the image; the receipt records each file's
container path and digests. The files on disk are hashed first: a file that differs
from the receipt is never mounted. With a prewarmed cache, its read-only mount and the
FlashInfer environment it was compiled with are added (``prewarm/serving.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg._internal.emulation import native, refusal
from sparkimg._internal.fs.hashing import hash_many
from sparkimg.errors import RunArgsError
from sparkimg.formats.statement import facts, parse_statement
from sparkimg.prewarm.serving import CacheArgs, cache_args
from sparkimg.signing import dsse
from sparkimg.signing.keys import PublicKey


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
    cache: CacheArgs | None = None
    platform: str | None = None  # set when it is not this machine's: `docker run --platform` (emulated)

    def args(self) -> list[str]:
        patches = [part for mount in self.mounts for part in ("-v", mount.arg())]
        return ([*("--platform", self.platform)] if self.platform else []) + patches + (
            self.cache.args() if self.cache else [])

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "image_id": self.image_id, "platform": self.platform, "args": self.args(),
                "mounts": [{"host": str(m.host), "container": m.container, "read_only": True} for m in self.mounts],
                "cache": self.cache.to_json() if self.cache else None}


def run_args(receipt: Path, root: Path, key: PublicKey | None = None, cache: Path | None = None,
             platform: str | None = None) -> RunArgs:
    """Mount arguments for every ``mode: mount`` patch file of ``receipt``, paths under ``root``,
    and for the prewarmed FlashInfer ``cache`` made in the receipt's image; a receipt for another
    platform than ``platform`` (default: this machine's) is refused."""
    envelope = dsse.read(receipt)
    if key is not None and (why := envelope.check_signature(key)):
        raise RunArgsError(f"{receipt}: {why}", hint="run `sparkimg verify-receipt` to see every check")
    data = parse_statement(envelope.payload, str(receipt))
    if refused := refusal(facts(data).get("platform"), platform, "run", "pass the receipt of that platform's image"):
        raise RunArgsError(f"{receipt}: {refused[0]}", hint=refused[1])
    foreign = platform if platform not in (None, native()) else None
    wanted = [d for d in data.dependencies if d.name.startswith("patch:") and d.notes.get("mode") == "mount"]
    paths = {d.name: (root / (d.uri or "").removeprefix("file:")).resolve() for d in wanted}
    hashed = hash_many(paths.values())
    bad = []
    for dep in wanted:
        digests, pinned = hashed[paths[dep.name]], dep.digests.get("sha256")
        if digests is None:
            bad.append(f"{paths[dep.name]}: missing")
        elif digests["sha256"] != pinned:
            bad.append(f"{paths[dep.name]}: sha256 {digests['sha256']}, the receipt pins {pinned}")
    if bad:
        raise RunArgsError(f"{receipt}: patch files to mount differ from the receipt:\n" +
                           "\n".join(f"  {line}" for line in bad),
                           hint="restore the pinned files (or pass --root where they are); never mount other bytes")
    subject = data.image
    mounts = tuple(Mount(paths[d.name], str(d.notes.get("mount"))) for d in wanted)
    return RunArgs(subject.name, subject.sha256, mounts,
                   cache_args(cache, subject.sha256, key) if cache is not None else None, foreign)
