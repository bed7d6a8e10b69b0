"""The prewarm manifest: what a warmed FlashInfer cache holds and what it was made for.

``DIR/sparkimg-prewarm.json`` is a DSSE envelope around an in-toto Statement v1 with
sparkimg's own predicate type. Its subjects are the modules' shared objects; the predicate
records the FlashInfer version, the architectures, the image, the path the cache was
compiled under, and every file of every module with size and sha256. ``PrewarmManifest``
is its frozen model; ``prewarm.manifest`` writes and reads the file. docs/prewarm.md is
the reference for every field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sparkimg.errors import EnvelopeError
from sparkimg.formats.intoto import STATEMENT_TYPE, parse_payload

PREDICATE_TYPE = "https://sparkimg.dev/prewarm/v1"


@dataclass(frozen=True)
class CachedFile:
    path: str
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class CachedModule:
    """One compiled JIT module: FlashInfer's name for it, the generator call, its library and files."""

    name: str
    module: Mapping[str, Any]
    library: str
    files: tuple[CachedFile, ...]
    aot: bool = False
    seconds: float | None = None

    @property
    def library_file(self) -> CachedFile | None:
        return next((f for f in self.files if f.path == self.library), None)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "module": dict(self.module), "library": self.library, "aot": self.aot,
                "seconds": self.seconds, "files": [f.to_json() for f in self.files]}


@dataclass(frozen=True)
class Workspace:
    """FLASHINFER_WORKSPACE_BASE at compile time, and FlashInfer's folders under it."""

    base: str
    dir: str
    arch_dir: str

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "dir": self.dir, "arch_dir": self.arch_dir}


@dataclass(frozen=True)
class PrewarmManifest:
    flashinfer: str
    cuda_architectures: tuple[str, ...]
    image: Mapping[str, Any] | None
    runner: str
    workspace: Workspace
    serving_env: Mapping[str, str]
    toolchain_mount: Mapping[str, str] | None
    environment: Mapping[str, Any]
    modules: tuple[CachedModule, ...]
    created: str
    sparkimg: str

    @property
    def image_id(self) -> str | None:
        return None if self.image is None else self.image.get("id")

    def timeless(self) -> PrewarmManifest:
        """The manifest without its creation time: what "says the same" compares."""
        return replace(self, created="")

    def to_json(self) -> dict[str, Any]:
        subjects = [{"name": m.library, "digest": {"sha256": f.sha256}}
                    for m in self.modules if (f := m.library_file) is not None]
        return {
            "_type": STATEMENT_TYPE,
            "subject": subjects,
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "flashinfer": {"version": self.flashinfer},
                "cuda_architectures": list(self.cuda_architectures),
                "image": None if self.image is None else dict(self.image),
                "runner": self.runner,
                "workspace": self.workspace.to_json(),
                "serving_env": dict(self.serving_env),
                "toolchain_mount": None if self.toolchain_mount is None else dict(self.toolchain_mount),
                "environment": dict(self.environment),
                "modules": [m.to_json() for m in self.modules],
                "created": self.created,
                "sparkimg": self.sparkimg,
            },
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> PrewarmManifest:
        """Validate ``data``; every shape problem is an EnvelopeError naming ``where``."""
        problem = _shape_problem(data)
        if problem is None:
            try:
                p = data["predicate"]
                return cls(
                    str(p["flashinfer"]["version"]), tuple(str(a) for a in p["cuda_architectures"]), p.get("image"),
                    str(p["runner"]), Workspace(str(p["workspace"]["base"]), str(p["workspace"]["dir"]),
                                                str(p["workspace"].get("arch_dir", ""))),
                    dict(p.get("serving_env") or {}), p.get("toolchain_mount"), dict(p.get("environment") or {}),
                    tuple(_module(m) for m in p["modules"]), str(p.get("created", "")), str(p.get("sparkimg", "")))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                problem = f"predicate field {exc.__class__.__name__}: {exc}"
        raise EnvelopeError(f"{where}: not a sparkimg prewarm manifest: {problem}")


def _module(m: dict[str, Any]) -> CachedModule:
    files = tuple(CachedFile(str(f["path"]), int(f["size"]), str(f["sha256"])) for f in m["files"])
    return CachedModule(str(m["name"]), dict(m["module"]), str(m["library"]), files, bool(m.get("aot", False)),
                        m.get("seconds"))


def _shape_problem(data: Any) -> str | None:
    if not isinstance(data, dict) or data.get("_type") != STATEMENT_TYPE:
        return f"_type is not {STATEMENT_TYPE!r}"
    if data.get("predicateType") != PREDICATE_TYPE:
        return (f"predicateType is {data.get('predicateType')!r}, not {PREDICATE_TYPE!r} "
                "(a build receipt? pass the cache's sparkimg-prewarm.json)")
    predicate = data.get("predicate")
    fields = ("flashinfer", "cuda_architectures", "workspace", "modules", "runner")
    if not isinstance(predicate, dict) or any(f not in predicate for f in fields):
        return f"predicate must hold {', '.join(fields)}"
    modules = predicate["modules"]
    if not isinstance(modules, list) or not all(isinstance(m, dict) and isinstance(m.get("files"), list)
                                                for m in modules):
        return "predicate.modules must list objects with files"
    return None


def parse_manifest(payload: bytes, where: str) -> PrewarmManifest:
    """A manifest from an envelope payload; every shape problem names ``where``."""
    return PrewarmManifest.from_json(parse_payload(payload, where), where)
