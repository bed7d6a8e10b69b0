"""The lock (``sparkimg-lock/v1``): every mutable reference of a spec, resolved once.

One frozen model per entry kind; ``LockFile.from_json`` validates types and shapes and
names the field that is wrong, ``to_json`` gives back the exact JSON that was read. No
I/O here: ``sparkimg.lock.resolve`` resolves, writes, loads and checks locks against the disk.
docs/lock.md is the reference for every field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sparkimg.errors import LockError
from sparkimg.formats.paths import NAME, bare_name, clean_absolute, clean_relative

SCHEMA = "sparkimg-lock/v1"
PLATFORMS = ("linux/amd64", "linux/arm64")
MAX_EPOCH = 253402300799  # 9999-12-31T23:59:59Z
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class _Reader:
    """Typed field access on one JSON object; a wrong field is a LockError naming it."""

    def __init__(self, data: Any, where: str, path: str) -> None:
        if not isinstance(data, dict):
            raise LockError(f"{where}: {path or '(top level)'} must be an object, not {type(data).__name__}",
                            hint="re-create it with `sparkimg lock`")
        self.data, self.where, self.path = data, where, path

    def _fail(self, key: str, what: str) -> LockError:
        dotted = f"{self.path}.{key}" if self.path else key
        return LockError(f"{self.where}: {dotted} must be {what}, found {self.data.get(key)!r}",
                         hint="re-create it with `sparkimg lock`")

    def text(self, key: str) -> str:
        value = self.data.get(key)
        if not isinstance(value, str):
            raise self._fail(key, "a string")
        return value

    def opt_str(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is not None and not isinstance(value, str):
            raise self._fail(key, "a string or null")
        return value

    def count(self, key: str) -> int:
        value = self.data.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._fail(key, "a non-negative integer")
        return value

    def digest(self, key: str) -> str:
        value = self.text(key)
        if not _DIGEST.match(value):
            raise self._fail(key, "a sha256:HEX digest")
        return value

    def hex(self, key: str, length: int) -> str:
        value = self.text(key)
        if not re.fullmatch(f"[0-9a-f]{{{length}}}", value):
            raise self._fail(key, f"{length} lower-case hex digits")
        return value

    def name(self, key: str, suffix: str = "") -> str:
        """A bare file name: never a path, never hidden, never '..'."""
        value = self.text(key)
        if not bare_name(value) or not value.endswith(suffix):
            raise self._fail(key, f"a bare file name{' ending ' + suffix if suffix else ''} (no folder)")
        return value

    def relative(self, key: str) -> str:
        """A clean relative path under the spec's root: no leading '/', no '..', no empty part."""
        value = self.text(key)
        if not clean_relative(value):
            raise self._fail(key, "a clean path relative to the spec's root")
        return value

    def absolute(self, key: str) -> str:
        """A clean absolute path, never '/'."""
        value = self.text(key)
        if not clean_absolute(value):
            raise self._fail(key, "a clean absolute path (not /, no '..')")
        return value

    def obj(self, key: str) -> _Reader:
        return _Reader(self.data.get(key), self.where, f"{self.path}.{key}" if self.path else key)

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.data.get(key)
        if not isinstance(value, dict):
            raise self._fail(key, "an object")
        return value

    def items(self, key: str) -> list[Any]:
        value = self.data.get(key)
        if not isinstance(value, list):
            raise self._fail(key, "a list")
        return value


@dataclass(frozen=True)
class BasePin:
    """The base image: the spec entry it was resolved for, and its digests."""

    spec: Mapping[str, str | None]
    repository: str
    tag: str | None
    index_digest: str | None
    manifest_digest: str
    config_digest: str
    media_type: str | None
    platform: str
    # "http": its registry, on the LAN, was reached over plain HTTP because `lock --plain-http` asked,
    # and every command that reads the base does the same; None (the key left out): as Docker
    # would (loopback HTTP, else HTTPS), so a lock made without the flag is the same bytes as before.
    transport: str | None = None

    @property
    def reference(self) -> str:
        """``repository[:tag]`` as a person reads it."""
        return self.repository + (f":{self.tag}" if self.tag else "")

    def to_json(self) -> dict[str, Any]:
        out = {"spec": dict(self.spec), "repository": self.repository, "tag": self.tag,
               "index_digest": self.index_digest, "manifest_digest": self.manifest_digest,
               "config_digest": self.config_digest, "media_type": self.media_type, "platform": self.platform}
        return out if self.transport is None else {**out, "transport": self.transport}

    @classmethod
    def from_json(cls, r: _Reader) -> BasePin:
        index = r.digest("index_digest") if r.data.get("index_digest") is not None else None
        transport = r.opt_str("transport")
        if transport not in (None, PLAIN_HTTP):
            raise r._fail("transport", f"'{PLAIN_HTTP}' or absent")
        return cls(dict(r.mapping("spec")), r.text("repository"), r.opt_str("tag"), index,
                   r.digest("manifest_digest"), r.digest("config_digest"), r.opt_str("media_type"),
                   r.text("platform"), transport)


PLAIN_HTTP = "http"  # BasePin.transport of a base whose registry is reached without TLS, as asked


@dataclass(frozen=True)
class GitPin:
    """A git source: branch or tag resolved to a commit, with its tree and commit time."""

    spec: Mapping[str, Any]
    url: str
    ref: str | None
    commit: str
    tree: str
    committed: int
    kind: Literal["git"] = "git"

    @property
    def identity(self) -> dict[str, str]:
        """What a compile layer's output depends on."""
        return {"commit": self.commit, "tree": self.tree}

    def to_json(self) -> dict[str, Any]:
        return {"kind": "git", "url": self.url, "ref": self.ref, "commit": self.commit, "tree": self.tree,
                "committed": self.committed, "spec": dict(self.spec)}

    @classmethod
    def from_json(cls, r: _Reader) -> GitPin:
        return cls(dict(r.mapping("spec")), r.text("url"), r.opt_str("ref"), r.hex("commit", 40), r.hex("tree", 40),
                   r.count("committed"))


@dataclass(frozen=True)
class PypiPin:
    """A PyPI file: the wheel pip chose (``dist: wheel``) or the version's sdist (``dist: sdist``),
    where it came from, its sha256 and its size. A lock without ``dist`` (older locks) pins a
    wheel; one without ``size`` (older locks, or an index that did not say) bounds no download."""

    spec: Mapping[str, Any]
    package: str
    version: str
    filename: str
    url: str
    sha256: str
    kind: Literal["pypi"] = "pypi"
    dist: Literal["wheel", "sdist"] = "wheel"
    size: int | None = None  # bytes, as the index gave them when locked: a download stops past it

    @property
    def identity(self) -> dict[str, str]:
        """What a compile layer built from this file depends on: its bytes."""
        return {"sha256": self.sha256}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "pypi", "package": self.package, "version": self.version,
                               "filename": self.filename, "url": self.url, "sha256": self.sha256,
                               "spec": dict(self.spec)}
        if self.dist != "wheel":  # a wheel's entry stays as older locks wrote it
            out["dist"] = self.dist
        if self.size is not None:
            out["size"] = self.size
        return out

    @classmethod
    def from_json(cls, r: _Reader) -> PypiPin:
        url = r.text("url")
        if not url.startswith(("https://", "http://", "file://")):
            raise r._fail("url", "an https://, http:// or file:// URL")
        dist = r.data.get("dist", "wheel")
        if dist not in ("wheel", "sdist"):
            raise r._fail("dist", "'wheel' or 'sdist'")
        filename = r.name("filename", ".whl" if dist == "wheel" else ".tar.gz")
        return cls(dict(r.mapping("spec")), r.text("package"), r.text("version"), filename, url,
                   r.hex("sha256", 64), dist=dist, size=r.count("size") if "size" in r.data else None)


@dataclass(frozen=True)
class TreeFile:
    """One file of a local folder source."""

    sha256: str
    md5: str
    executable: bool

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "md5": self.md5, "executable": self.executable}


@dataclass(frozen=True)
class PathPin:
    """A local folder: its path under the spec's root, one digest over it, and its files."""

    path: str
    sha256: str
    files: Mapping[str, TreeFile]
    kind: Literal["path"] = "path"

    @property
    def identity(self) -> dict[str, str]:
        return {"sha256": self.sha256}

    def to_json(self) -> dict[str, Any]:
        return {"kind": "path", "path": self.path, "sha256": self.sha256,
                "files": {name: f.to_json() for name, f in self.files.items()}}

    @classmethod
    def from_json(cls, r: _Reader) -> PathPin:
        files = {}
        for name, item in r.mapping("files").items():
            f = _Reader(item, r.where, f"{r.path}.files.{name}")
            files[str(name)] = TreeFile(f.hex("sha256", 64), f.hex("md5", 32), bool(item.get("executable")))
        return cls(r.relative("path"), r.hex("sha256", 64), files)


SourcePin = GitPin | PypiPin | PathPin


@dataclass(frozen=True)
class PatchFilePin:
    """One patch file: where it goes in the container, its size and both digests."""

    file: str
    mount: str
    size: int
    md5: str
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "mount": self.mount, "size": self.size, "md5": self.md5, "sha256": self.sha256}


@dataclass(frozen=True)
class PatchSetPin:
    """A patch set: its folder under the root, bake or mount, and its files."""

    dir: str
    mode: Literal["bake", "mount"]
    files: tuple[PatchFilePin, ...]

    def to_json(self) -> dict[str, Any]:
        return {"dir": self.dir, "mode": self.mode, "files": [f.to_json() for f in self.files]}

    @classmethod
    def from_json(cls, r: _Reader) -> PatchSetPin:
        mode = r.text("mode")
        if mode not in ("bake", "mount"):
            raise r._fail("mode", "'bake' or 'mount'")
        files = []
        for index, item in enumerate(r.items("files")):
            f = _Reader(item, r.where, f"{r.path}.files[{index}]")
            files.append(PatchFilePin(f.name("file"), f.absolute("mount"), f.count("size"), f.hex("md5", 32),
                                      f.hex("sha256", 64)))
        return cls(r.relative("dir"), mode, tuple(files))  # type: ignore[arg-type]


@dataclass(frozen=True)
class ToolchainPin:
    """Where nvcc comes from; for a host toolkit, its path, version and binary hash; for toolkit
    wheels, each wheel's source and sha256 and the toolkit tree's identity (``compile.toolkit``:
    the sha256 that names its unpacked tree in the store, a function of every wheel's bytes)."""

    cuda: Literal["base", "host", "wheels"]
    path: str | None = None
    resolved: str | None = None
    nvcc_version: str | None = None
    nvcc_build: str | None = None
    nvcc_sha256: str | None = None
    wheels: tuple[tuple[str, str], ...] = ()  # (source, sha256), in the spec's order
    toolkit: str | None = None
    headers: tuple[tuple[str, str], ...] = ()  # (source, sha256) of wheels whose include/ alone is unpacked

    def to_json(self) -> dict[str, Any]:
        if self.cuda == "base":
            return {"cuda": "base"}
        if self.cuda == "wheels":
            found: dict[str, Any] = {
                "cuda": "wheels", "toolkit": self.toolkit, "nvcc_version": self.nvcc_version,
                "wheels": [{"source": name, "sha256": sha256} for name, sha256 in self.wheels]}
            if self.headers:  # absent otherwise: locks without headers keep their bytes
                found["headers"] = [{"source": name, "sha256": sha256} for name, sha256 in self.headers]
            return found
        return {"cuda": "host", "path": self.path, "resolved": self.resolved, "nvcc_version": self.nvcc_version,
                "nvcc_build": self.nvcc_build, "nvcc_sha256": self.nvcc_sha256}

    @classmethod
    def from_json(cls, r: _Reader) -> ToolchainPin:
        cuda = r.text("cuda")
        if cuda == "base":
            return cls("base")
        if cuda == "wheels":
            parts: dict[str, list[tuple[str, str]]] = {"wheels": [], "headers": []}
            for key, found in parts.items():
                for index, item in enumerate(r.items(key) if key == "wheels" or key in r.data else []):
                    wheel = _Reader(item, r.where, f"{r.path}.{key}[{index}]")
                    found.append((wheel.text("source"), wheel.hex("sha256", 64)))
            return cls("wheels", nvcc_version=r.text("nvcc_version"), wheels=tuple(parts["wheels"]),
                       toolkit=r.hex("toolkit", 64), headers=tuple(parts["headers"]))
        if cuda != "host":
            raise r._fail("cuda", "'base', 'host' or 'wheels'")
        return cls("host", r.absolute("path"), r.absolute("resolved"), r.text("nvcc_version"), r.text("nvcc_build"),
                   r.hex("nvcc_sha256", 64))


@dataclass(frozen=True)
class LockFile:
    """A whole lock, as written by ``sparkimg lock``."""

    generator: str
    spec_file: str
    spec_digest: str
    created: str
    platform: str
    cuda_architectures: tuple[str, ...]
    source_date_epoch: int
    base: BasePin
    sources: Mapping[str, SourcePin]
    patches: Mapping[str, PatchSetPin]
    toolchain: ToolchainPin
    schema: str = field(default=SCHEMA)
    # Compile layers' ``source_patches``: path under the root -> sha256 (absent in older locks).
    source_patches: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "generator": self.generator,
            "spec": {"file": self.spec_file, "digest": self.spec_digest},
            "created": self.created,
            "platform": self.platform,
            "cuda_architectures": list(self.cuda_architectures),
            "source_date_epoch": self.source_date_epoch,
            "base": self.base.to_json(),
            "sources": {name: pin.to_json() for name, pin in self.sources.items()},
            "patches": {name: pin.to_json() for name, pin in self.patches.items()},
            "toolchain": self.toolchain.to_json(),
            **({"source_patches": dict(sorted(self.source_patches.items()))} if self.source_patches else {}),
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> LockFile:
        """Validate ``data`` as a lock; every problem is a LockError naming ``where`` and the field."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise LockError(f"{where}: not a {SCHEMA} lock", hint="re-create it with `sparkimg lock`")
        r = _Reader(data, where, "")
        spec = r.obj("spec")
        archs = r.items("cuda_architectures")
        if not archs or not all(isinstance(a, str) and re.fullmatch(r"\d+\.\d[af]?", a) for a in archs):
            raise r._fail("cuda_architectures", "a list of CUDA architectures such as '12.1a'")
        if r.count("source_date_epoch") > MAX_EPOCH:
            raise r._fail("source_date_epoch", "a time before the year 10000")
        if r.text("platform") not in PLATFORMS:
            raise r._fail("platform", f"one of {', '.join(PLATFORMS)}")
        for group in ("sources", "patches"):
            bad = [str(n) for n in r.mapping(group) if not NAME.match(str(n))]
            if bad:
                raise r._fail(group, f"keyed by names such as 'demo' (not {bad[0]!r})")
        sources: dict[str, SourcePin] = {}
        for name in r.mapping("sources"):
            entry = r.obj("sources").obj(name)
            kind = entry.data.get("kind")
            if kind == "git":
                sources[str(name)] = GitPin.from_json(entry)
            elif kind == "pypi":
                sources[str(name)] = PypiPin.from_json(entry)
            elif kind == "path":
                sources[str(name)] = PathPin.from_json(entry)
            else:
                raise entry._fail("kind", "'git', 'pypi' or 'path'")
        patches = {str(name): PatchSetPin.from_json(r.obj("patches").obj(name)) for name in r.mapping("patches")}
        source_patches: dict[str, str] = {}
        if "source_patches" in data:
            listed = r.obj("source_patches")
            for written in r.mapping("source_patches"):
                if not clean_relative(str(written)):
                    raise r._fail("source_patches", f"keyed by clean paths under the root (not {written!r})")
                source_patches[str(written)] = listed.hex(str(written), 64)
        return cls(r.text("generator"), spec.text("file"), spec.digest("digest"), r.text("created"), r.text("platform"),
                   tuple(archs), r.count("source_date_epoch"), BasePin.from_json(r.obj("base")), sources, patches,
                   ToolchainPin.from_json(r.obj("toolchain")), source_patches=source_patches)
