"""The no-op stamp: what a ``sparkimg build`` that built nothing saw, so that the next one can
tell in milliseconds that nothing changed, without loading the spec or the pipeline.

A stamp lists every file the no-op read (the spec, the lock, every file and folder of the
path sources and patch sets, nvcc, the signing key, the receipt and its statement record),
each by inode, size, mtime and ctime (ctime moves on any change and cannot be set back by
the file's owner; what ninja and git's index trust), plus the options and environment that
change a build's outcome. It holds only while all of them are the same and the engine still
has the image by the same ID under a label with the same key; then the build prints what the
stamped no-op printed. Anything else goes the whole way, which writes a new stamp.

Standard library only (with the engine API leaf), so checking a stamp costs a few milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkimg import __version__
from sparkimg._internal.fs.files import identity
from sparkimg._internal.locations import KEY_ENV, signing_key_path
from sparkimg.engine import socket_api as engine_api

if TYPE_CHECKING:
    from sparkimg.engine.protocol import Engine
    from sparkimg.image.build import BuildResult
    from sparkimg.lock.resolve import Lock
    from sparkimg.spec import Spec
    from sparkimg.store.content import Store

VERSION = 1
KEY_LABEL = "dev.sparkimg.key"  # plan.KEY_LABEL; a test keeps the two equal
ENVIRONMENT = (KEY_ENV, "SPARKIMG_DOCKER", "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "HOME", "PATH")
SECRETS = ("SPARKIMG_KEY_PASSWORD",)  # recorded as a hash, never as the value
RACY_NS = 1_000_000_000  # a file changed this close to the build's start may have changed while it read it


def location(store_root: Path, spec: Path) -> Path:
    """Where the stamp of ``spec`` lives in the store."""
    name = hashlib.sha256(str(spec.resolve()).encode()).hexdigest()
    return store_root / "records" / "stamps" / f"{name}.json"


def context(store_root: Path, *, key: Path | None, receipt: Path | None, record_host: bool) -> dict[str, Any]:
    """What besides the files changes a build's outcome: the options and the environment (the key
    file as the build would find it: ``key``, else $SPARKIMG_KEY, from this folder)."""
    chosen = signing_key_path(key)
    return {"sparkimg": __version__, "stamp": VERSION, "store": str(store_root.resolve()),
            "key": str(chosen.resolve()) if chosen else None, "receipt": str(receipt.resolve()) if receipt else None,
            "record_host": record_host, "env": {name: os.environ.get(name) for name in ENVIRONMENT},
            "secrets": {name: hashlib.sha256(os.environ[name].encode()).hexdigest() if name in os.environ else None
                        for name in SECRETS}}


def own_code() -> list[Path]:
    """sparkimg's own modules: a stamp made by other code (a checkout moved on) does not hold."""
    package = Path(__file__).resolve().parents[1]
    return [Path(folder) / n for folder, _, names in os.walk(package) for n in names if n.endswith(".py")]


def tree(root: Path) -> list[Path]:
    """A folder and everything under it: a file added, removed or changed anywhere changes a stat."""
    found = [root]
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        found += [Path(folder) / d for d in dirs] + [Path(folder) / n for n in sorted(names)]
    return found


@dataclass(frozen=True)
class Stamp:
    context: dict[str, Any]
    files: list[list[Any]]  # [path, stat or None]
    links: list[list[str]]  # [path as written, where it led]: a link pointed elsewhere breaks the stamp
    image: dict[str, str]  # reference, id, key, socket
    output: dict[str, Any]  # what the no-op printed with --json
    events: list[dict[str, Any]]  # what it reported, as Event.to_json

    @classmethod
    def of(cls, ctx: dict[str, Any], inputs: Iterable[Path], outputs: Iterable[Path], links: Iterable[Path],
           image: dict[str, str], output: dict[str, Any], events: list[dict[str, Any]], *,
           started_ns: int) -> Stamp | None:
        """The stamp, or None when an input changed so close to ``started_ns`` (the build's start)
        that the build may have read it before the change: such a stamp could vouch for unread
        bytes. ``outputs`` (the receipt, the store's records and blobs: written whole, by rename)
        are stamped as the build left them, however recent."""
        read = {str(Path(p).absolute()) for p in inputs}
        paths = sorted(read | {str(Path(p).absolute()) for p in outputs})
        stats = {p: identity(Path(p)) for p in paths}
        if any(st is not None and max(st[2], st[3]) >= started_ns - RACY_NS for p, st in stats.items() if p in read):
            return None
        written = sorted({str(Path(p).absolute()) for p in links})
        return cls(ctx, [[p, st] for p, st in stats.items()], [[p, os.path.realpath(p)] for p in written], image,
                   output, events)

    def holds(self, ctx: dict[str, Any]) -> bool:
        """The same options and environment, every file the same file, every link where it led,
        the same engine socket, and the image still there."""
        if ctx != self.context or any(identity(Path(path)) != stat for path, stat in self.files):
            return False
        if any(os.path.realpath(path) != real for path, real in self.links):
            return False
        if engine_api.api_socket(self.image.get("client", "")) != (self.image.get("socket") or None):
            return False
        socket_path = self.image.get("socket")
        if not socket_path:
            return False
        try:
            status, body = engine_api.http_get(socket_path, engine_api.image_path(self.image["reference"]))
            data = json.loads(body) if status == 200 else None
        except (OSError, ValueError, RecursionError):
            return False
        if not isinstance(data, dict):
            return False
        labels = (data.get("Config") or {}).get("Labels") or {}
        return data.get("Id") == self.image["id"] and labels.get(KEY_LABEL) == self.image["key"]

    def to_json(self) -> dict[str, Any]:
        return {"context": self.context, "files": self.files, "links": self.links, "image": self.image,
                "output": self.output, "events": self.events}


def read(path: Path) -> Stamp | None:
    """The stamp at ``path``; None when there is none or it is damaged (then the build goes the whole way)."""
    try:
        data = json.loads(path.read_bytes())
        return Stamp(dict(data["context"]), list(data["files"]), list(data["links"]), dict(data["image"]),
                     dict(data["output"]), list(data["events"]))
    except (OSError, ValueError, RecursionError, KeyError, TypeError):
        return None


def write(path: Path, stamp: Stamp) -> None:
    from sparkimg._internal.fs.atomic import write_atomic

    try:
        write_atomic(path, json.dumps(stamp.to_json(), sort_keys=True).encode())
    except OSError:
        return  # a stamp that cannot be written only makes the next no-op slower


def forget(path: Path) -> None:
    """Drop the stamp (a build that built something, or failed)."""
    try:
        path.unlink()
    except OSError:
        return


def keep_noop(where: Path, spec: Spec, lock: Lock, store: Store, engine: Engine, result: BuildResult, *,
              receipt_file: Path, statement_file: Path, sbom_file: Path, output: dict[str, Any], said: list[Any],
              started_ns: int, key: Path | None, receipt: Path | None, record_host: bool) -> None:
    """After a build of the spec's own lock: stamp what it read and wrote (the store's image record
    and blobs among it) and what the next no-op says (``output``, ``said``), so that one is
    answered in milliseconds; forget the stamp when the build cannot be stamped (no image, no
    store record, an input changed as it started)."""
    from sparkimg._internal.locations import docker_config
    from sparkimg.formats.canonical import hex_of
    from sparkimg.image.assemble import IMAGES
    from sparkimg.spec import PathSource

    oci = result.oci
    if result.image_id is None or oci is None:
        forget(where)
        return
    files = [spec.path, lock.path, docker_config(), *own_code()]
    outputs = [receipt_file, statement_file, sbom_file, store.record_path(IMAGES, result.plan.image.key),
               *(store.blob(hex_of(digest)) for digest in (oci.manifest_digest, oci.config_digest,
                                                          *(layer.descriptor.digest for layer in oci.layers)))]
    links = [spec.path, lock.path]
    for source in spec.sources.values():
        if isinstance(source, PathSource):
            files += tree(source.path)
            links.append(spec.root / source.written)
    for patch_set in spec.patches:
        files += tree(patch_set.dir)
        links.append(spec.root / patch_set.written)
    if spec.toolchain.cuda == "host" and spec.toolchain.path:
        nvcc = Path(spec.toolchain.path) / "bin" / "nvcc"
        files += [nvcc, nvcc.resolve()]
    if (chosen := signing_key_path(key)) is not None:
        files.append(chosen)
    image = {"reference": result.image_ref, "id": result.image_id, "key": result.plan.image.key,
             "socket": engine.api_socket or "", "client": engine.client}
    ctx = context(store.root, key=key, receipt=receipt, record_host=record_host)
    made = Stamp.of(ctx, files, outputs, links, image, output, [e.to_json() for e in said], started_ns=started_ns)
    if made is None:
        forget(where)
    else:
        write(where, made)
