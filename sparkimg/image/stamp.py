"""The no-op stamp: what a ``sparkimg build`` said that the next one, a no-op, says again, so
that one can tell in milliseconds that nothing changed, without loading the spec or the pipeline.

A stamp lists every file the build read (the spec, the lock, every file and folder of the
path sources and patch sets, nvcc, the signing key, sparkimg's own modules) and wrote (the
receipt, its statement record, the store's image record and blobs), each by inode, size, mtime
and ctime (ctime moves on any change and cannot be set back by the file's owner; what ninja and
git's index trust), plus the options (the SBOM's format among them) and environment that change
a build's outcome. It holds only while all of them are the same and the engine still has the
image by the same ID (the config digest, or the manifest digest that names it: the same labels,
the key among them); then the build prints what the stamped no-op said. Anything else goes the
whole way, which writes a new stamp.

Checking a stamp imports the standard library's ``os``, ``marshal`` and ``socket`` and the engine
API leaf, nothing else (``cli.fast``): the answer costs tens of milliseconds, most of them the
interpreter's start.
"""

from __future__ import annotations

import os
import sys

from sparkimg import __version__
from sparkimg._internal.fs.identity import identity
from sparkimg._internal.locations import KEY_ENV
from sparkimg.formats.sbom_formats import SPDX

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path
    from typing import Any

    from sparkimg.engine.protocol import Engine
    from sparkimg.image.build import BuildResult
    from sparkimg.lock.resolve import Lock
    from sparkimg.spec import Spec
    from sparkimg.store.content import Store

VERSION = 2  # 2: outputs stamped as written; the engine answer checked by image ID alone
KEY_LABEL = "dev.sparkimg.key"  # plan.KEY_LABEL; a test keeps the two equal
ENVIRONMENT = (KEY_ENV, "SPARKIMG_DOCKER", "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "HOME", "PATH")
SECRETS = ("SPARKIMG_KEY_PASSWORD",)  # recorded as a hash, never as the value
# The stamp file: this line, then the stamp's fields in marshal's format (read with no import; a
# cache in the user's own store, so a Python that writes another marshal format only misses it).
MAGIC = f"sparkimg-stamp/{VERSION} python/{sys.version_info[0]}.{sys.version_info[1]}\n".encode()
RACY_NS = 1_000_000_000  # a file changed this close to the build's start may have changed while it read it


def location(store_root: str | os.PathLike[str], spec: str | os.PathLike[str]) -> str:
    """Where the stamp of ``spec`` lives in the store."""
    name = _sha256(os.path.realpath(spec).encode())
    return os.path.join(store_root, "records", "stamps", f"{name}.json")


def _sha256(data: bytes) -> str:
    """hashlib's sha256, from its own C module where Python has it (loading OpenSSL for one small
    hash costs the no-op answer several milliseconds)."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]
    except ImportError:  # a Python built without it
        from hashlib import sha256
    return str(sha256(data).hexdigest())


def context(store_root: str | os.PathLike[str], *, key: str | os.PathLike[str] | None,
            receipt: str | os.PathLike[str] | None, record_host: bool, sbom_format: str = SPDX) -> dict[str, Any]:
    """What besides the files changes a build's outcome: the options and the environment (the key
    file as the build would find it: ``key``, else $SPARKIMG_KEY, from this folder)."""
    chosen = key or os.environ.get(KEY_ENV) or None
    return {"sparkimg": __version__, "stamp": VERSION, "store": os.path.realpath(store_root),
            "key": os.path.realpath(chosen) if chosen else None,
            "receipt": os.path.realpath(receipt) if receipt else None,
            "record_host": record_host, "sbom_format": sbom_format,
            "env": {name: os.environ.get(name) for name in ENVIRONMENT},
            "secrets": {name: _sha256(os.environ[name].encode()) if name in os.environ else None
                        for name in SECRETS}}


def own_code() -> list[Path]:
    """sparkimg's own modules: a stamp made by other code (a checkout moved on) does not hold."""
    from pathlib import Path

    package = Path(__file__).resolve().parents[1]
    return [Path(folder) / n for folder, _, names in os.walk(package) for n in names if n.endswith(".py")]


def tree(root: Path) -> list[Path]:
    """A folder and everything under it: a file added, removed or changed anywhere changes a stat."""
    from pathlib import Path

    found = [root]
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        found += [Path(folder) / d for d in dirs] + [Path(folder) / n for n in sorted(names)]
    return found


class Stamp:
    """One stamp: its context, the files and links it holds by, the image, and what to say."""

    __slots__ = ("context", "events", "files", "image", "links", "output", "printed")

    def __init__(self, context: dict[str, Any], files: list[list[Any]], links: list[list[str]],
                 image: dict[str, str], output: dict[str, Any], events: list[dict[str, Any]],
                 printed: str | None = None) -> None:
        self.context = context
        self.files = files  # [path, stat or None]
        self.links = links  # [path as written, where it led]: a link pointed elsewhere breaks the stamp
        self.image = image  # reference, id, key, socket, client, path (the engine API's for the image)
        self.output = output  # what the no-op prints with --json
        self.events = events  # what it reports, as Event.to_json
        if printed is None:
            import json

            printed = json.dumps(output, indent=2, sort_keys=True)
        self.printed = printed  # ``output`` as ``--json`` prints it (no json module to print it again)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stamp) and self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def of(cls, ctx: dict[str, Any], inputs: Iterable[Path], outputs: Iterable[Path], links: Iterable[Path],
           image: dict[str, str], output: dict[str, Any], events: list[dict[str, Any]], *,
           started_ns: int) -> Stamp | None:
        """The stamp, or None when an input changed so close to ``started_ns`` (the build's start)
        that the build may have read it before the change: such a stamp could vouch for unread
        bytes. ``outputs`` (the receipt, the store's records and blobs: written whole, by rename)
        are stamped as the build left them, however recent."""
        read = {os.path.abspath(p) for p in inputs}
        paths = sorted(read | {os.path.abspath(p) for p in outputs})
        stats = {p: identity(p) for p in paths}
        if any(st is not None and max(st[2], st[3]) >= started_ns - RACY_NS for p, st in stats.items() if p in read):
            return None
        written = sorted({os.path.abspath(p) for p in links})
        return cls(ctx, [[p, st] for p, st in stats.items()], [[p, os.path.realpath(p)] for p in written], image,
                   output, events)

    def holds(self, ctx: dict[str, Any]) -> bool:
        """The same options and environment, every file the same file, every link where it led,
        and the engine on the same socket (what the docker client would use is a function of the
        environment and its config file, both held) still holding the image by the same ID."""
        import stat

        from sparkimg.engine import socket_api as engine_api

        if ctx != self.context or any(identity(path) != st for path, st in self.files):
            return False
        if any(os.path.realpath(path) != real for path, real in self.links):
            return False
        socket_path = self.image.get("socket")
        try:
            if not socket_path or not stat.S_ISSOCK(os.stat(socket_path).st_mode):
                return False
            status, body = engine_api.http_get(socket_path, self.image["path"])
        except OSError:
            return False
        # moby writes the image's fields in its struct's order, ID first; any other answer (another
        # engine's order, another image) sends the build the whole way, never a wrong "up to date".
        return status == 200 and body.startswith(f'{{"Id":"{self.image["id"]}",')

    def to_json(self) -> dict[str, Any]:
        return {"context": self.context, "files": self.files, "links": self.links, "image": self.image,
                "output": self.output, "events": self.events, "printed": self.printed}


def holding(spec: str, *, store: str | None, key: str | None, receipt: str | None,
            record_host: bool, sbom_format: str = SPDX) -> Stamp | None:
    """The stamp of ``spec`` in ``store`` (default: the build's) when it holds; None when the build
    must run. Any failure to read or check the stamp is None too: a stamp only ever saves time, so
    a damaged or unreadable one (or one another sparkimg wrote) sends the build the whole way,
    which writes a new one."""
    from sparkimg._internal.locations import default_store_text

    try:
        root = os.path.expanduser(store or default_store_text())
        found = read(location(root, spec))
        ctx = context(root, key=key, receipt=receipt, record_host=record_host, sbom_format=sbom_format)
        return found if found is not None and found.holds(ctx) else None
    except Exception:  # deliberately broad: see the docstring; tests/unit/image/test_stamp.py
        return None


def read(path: str | os.PathLike[str]) -> Stamp | None:
    """The stamp at ``path``; None when there is none or it is damaged (then the build goes the whole way)."""
    import marshal

    try:
        with open(path, "rb") as handle:
            if handle.read(len(MAGIC)) != MAGIC:
                return None
            data = marshal.loads(handle.read())
        return Stamp(dict(data["context"]), list(data["files"]), list(data["links"]), dict(data["image"]),
                     dict(data["output"]), list(data["events"]), str(data["printed"]))
    except (OSError, ValueError, EOFError, RecursionError, KeyError, TypeError):
        return None


def write(path: str | os.PathLike[str], stamp: Stamp) -> None:
    import marshal
    from pathlib import Path

    from sparkimg._internal.fs.atomic import write_atomic

    try:
        write_atomic(Path(path), MAGIC + marshal.dumps(stamp.to_json()))
    except OSError:
        return  # a stamp that cannot be written only makes the next no-op slower


def forget(path: str | os.PathLike[str]) -> None:
    """Drop the stamp (a build that built something, or failed)."""
    try:
        os.unlink(path)
    except OSError:
        return


def keep_noop(where: str, spec: Spec, lock: Lock, store: Store, engine: Engine, result: BuildResult, *,
              receipt_file: Path, statement_file: Path, sbom_file: Path, output: dict[str, Any], said: list[Any],
              started_ns: int, key: Path | None, receipt: Path | None, record_host: bool,
              sbom_format: str = SPDX) -> None:
    """After a build of the spec's own lock: stamp what it read and wrote (the store's image record
    and blobs among it) and what the next no-op says (``output``, ``said``), so that one is
    answered in milliseconds; forget the stamp when the build cannot be stamped (no image, no
    store record, an input changed as it started)."""
    from pathlib import Path

    from sparkimg._internal.locations import docker_config, signing_key_path
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
    from sparkimg.engine.socket_api import image_path

    image = {"reference": result.image_ref, "id": result.image_id, "key": result.plan.image.key,
             "socket": engine.api_socket or "", "client": engine.client, "path": image_path(result.image_ref)}
    ctx = context(store.root, key=key, receipt=receipt, record_host=record_host, sbom_format=sbom_format)
    made = Stamp.of(ctx, files, outputs, links, image, output, [e.to_json() for e in said], started_ns=started_ns)
    if made is None:
        forget(where)
    else:
        write(where, made)
