"""The lock (``sparkimg-lock/v1``): every mutable reference of a spec resolved once.

``resolve`` turns a spec into a lock (tag -> digests, branch -> commit, version -> wheel
URL and sha256, local files -> sha256 and md5, toolchain identity). ``load`` reads one
back, and ``check`` fails closed when it is stale or disagrees with the spec or the disk.
"""

from __future__ import annotations

import hashlib
import json
import platform as _platform
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import __version__, _git, _pypi, _tree
from . import patches as patches_mod
from ._registry import RegistryClient
from .errors import LockError, ResolveError
from .spec import GitSource, PatchSet, PathSource, PypiSource, Spec
from .store import Store, sha256_file, write_atomic

SCHEMA = "sparkimg-lock/v1"
Log = Callable[[str], None]


def _silent(message: str) -> None:
    return None


def lock_path(spec: Spec) -> Path:
    """``SPEC.lock.json`` beside the spec."""
    return spec.path.with_name(spec.path.name + ".lock.json")


@dataclass(frozen=True)
class Lock:
    """A loaded lock: the JSON data as written, and the sha256 of its bytes."""

    data: dict[str, Any]
    digest: str
    path: Path

    @property
    def platform(self) -> str:
        return str(self.data["platform"])

    @property
    def base(self) -> dict[str, Any]:
        return dict(self.data["base"])

    @property
    def sources(self) -> dict[str, dict[str, Any]]:
        return dict(self.data["sources"])

    @property
    def patches(self) -> dict[str, dict[str, Any]]:
        return dict(self.data["patches"])

    @property
    def toolchain(self) -> dict[str, Any]:
        return dict(self.data["toolchain"])

    @property
    def source_date_epoch(self) -> int:
        return int(self.data["source_date_epoch"])


def native_platform() -> str:
    machine = _platform.machine().lower()
    return {"x86_64": "linux/amd64", "amd64": "linux/amd64", "aarch64": "linux/arm64",
            "arm64": "linux/arm64"}.get(machine, f"linux/{machine}")


def resolve(
    spec: Spec,
    store: Store,
    *,
    previous: Lock | None = None,
    update: Iterable[str] = (),
    registry: RegistryClient | None = None,
    log: Log = _silent,
) -> dict[str, Any]:
    """Resolve every input of ``spec``; keep ``previous`` pins unless named in ``update``."""
    update = set(update)
    known = {"base", "toolchain", "all", *spec.sources, *(p.name for p in spec.patches)}
    unknown = sorted(update - known)
    if unknown:
        raise LockError(f"--update {', '.join(unknown)}: no such input in {spec.path.name}",
                        hint=f"name one of: {', '.join(sorted(known - {'all'}))}")
    everything = "all" in update
    old = previous.data if previous else {}
    platform = spec.platform if spec.platform != "native" else native_platform()

    def keep(entry: Any, name: str, entry_spec: dict[str, Any]) -> dict[str, Any] | None:
        """The previous pin, if it was made for the same spec entry and not asked to update."""
        if everything or name in update:
            return None
        if isinstance(entry, dict) and entry.get("spec") == entry_spec and old.get("platform") == platform:
            return entry
        return None

    base_spec = {"image": spec.base.reference, "digest": spec.base.digest}
    base = keep(old.get("base"), "base", base_spec)
    if base is None:
        log(f"resolving base {spec.base.reference}")
        client = registry or RegistryClient()
        resolved = client.resolve(spec.base.repository, spec.base.digest or spec.base.tag or "", platform)
        if spec.base.digest and spec.base.digest not in (resolved.manifest_digest, resolved.index_digest):
            raise ResolveError(f"base {spec.base.reference}: registry returned {resolved.manifest_digest}, "
                               f"the spec pins {spec.base.digest}")
        base = {
            "spec": base_spec,
            "repository": spec.base.repository,
            "tag": spec.base.tag,
            "index_digest": resolved.index_digest,
            "manifest_digest": resolved.manifest_digest,
            "config_digest": resolved.config_digest,
            "media_type": resolved.media_type,
            "platform": platform,
        }

    sources: dict[str, Any] = {}
    for name, source in spec.sources.items():
        if isinstance(source, PathSource):
            sources[name] = _path_entry(spec, source)
            continue
        entry_spec = _source_spec(source)
        entry = keep(old.get("sources", {}).get(name), name, entry_spec)
        if entry is None:
            log(f"resolving source {name}")
            entry = _resolve_source(source, store, platform)
            entry["spec"] = entry_spec
        sources[name] = entry

    patches = {p.name: _patch_entry(spec, p) for p in spec.patches}
    toolchain = _toolchain(spec)
    commit_times = [e["committed"] for e in sources.values() if e.get("kind") == "git"]
    epoch = max(commit_times) if commit_times else int(old.get("source_date_epoch") or time.time())
    return {
        "schema": SCHEMA,
        "generator": f"sparkimg {__version__}",
        "spec": {"file": spec.path.name, "digest": spec.digest},
        "created": old.get("created") if old.get("spec", {}).get("digest") == spec.digest
        else datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "platform": platform,
        "cuda_architectures": [a.text for a in spec.cuda_architectures],
        "source_date_epoch": epoch,
        "base": base,
        "sources": sources,
        "patches": patches,
        "toolchain": toolchain,
    }


def write(spec: Spec, data: dict[str, Any]) -> Lock:
    path = lock_path(spec)
    raw = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
    write_atomic(path, raw)
    return Lock(data, "sha256:" + hashlib.sha256(raw).hexdigest(), path)


def load(spec: Spec, path: Path | None = None) -> Lock:
    path = path or lock_path(spec)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise LockError(f"{path}: no lock file; the build refuses unpinned inputs",
                        hint=f"run `sparkimg lock {_rel(spec.path)}`") from None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise LockError(f"{path}: not valid JSON ({exc})", hint="re-create it with `sparkimg lock`") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise LockError(f"{path}: not a {SCHEMA} lock", hint="re-create it with `sparkimg lock`")
    return Lock(data, "sha256:" + hashlib.sha256(raw).hexdigest(), path)


def check(spec: Spec, lock: Lock) -> None:
    """Fail closed unless the lock matches the spec and the local files on disk."""
    relock = f"run `sparkimg lock {_rel(spec.path)}`"
    problems: list[str] = []
    if lock.data.get("spec", {}).get("digest") != spec.digest:
        raise LockError(f"{lock.path}: stale: {spec.path.name} changed since it was locked", hint=relock)
    data = lock.data
    if spec.platform != "native" and data.get("platform") != spec.platform:
        problems.append(f"platform: lock has {data.get('platform')}, spec asks for {spec.platform}")
    if data.get("cuda_architectures") != [a.text for a in spec.cuda_architectures]:
        problems.append("cuda_architectures differ")
    base = data.get("base") or {}
    if base.get("spec") != {"image": spec.base.reference, "digest": spec.base.digest}:
        problems.append(f"base: lock pins {base.get('spec')}, spec has {spec.base.reference}")
    for key in ("manifest_digest", "config_digest"):
        if not str(base.get(key, "")).startswith("sha256:"):
            problems.append(f"base.{key} is not pinned")
    locked_sources = data.get("sources") or {}
    if set(locked_sources) != set(spec.sources):
        problems.append(f"sources: lock has {sorted(locked_sources)}, spec has {sorted(spec.sources)}")
    for name, source in spec.sources.items():
        entry = locked_sources.get(name) or {}
        if isinstance(source, PathSource):
            found = _tree.describe(source.path)["sha256"]
            if entry.get("sha256") != found:
                problems.append(f"sources.{name}: {source.written} changed since the lock "
                                f"(`sparkimg lock --update {name}` pins the new content)")
        elif entry.get("spec") != _source_spec(source):
            problems.append(f"sources.{name}: lock pins {entry.get('spec')}, spec has {_source_spec(source)}")
        elif source.kind == "git" and len(str(entry.get("commit", ""))) != 40:
            problems.append(f"sources.{name}: commit is not pinned")
        elif source.kind == "pypi" and len(str(entry.get("sha256", ""))) != 64:
            problems.append(f"sources.{name}: sha256 is not pinned")
    for patch_set in spec.patches:
        entry = (data.get("patches") or {}).get(patch_set.name)
        if entry != _patch_entry(spec, patch_set):
            problems.append(f"patches.{patch_set.name}: files in {patch_set.written} differ from the lock")
    if data.get("toolchain") != _toolchain(spec):
        problems.append("toolchain: the CUDA toolkit differs from the one locked")
    if problems:
        raise LockError(f"{lock.path} disagrees with {spec.path.name}:\n" +
                        "\n".join(f"  {p}" for p in problems), hint=relock)


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _source_spec(source: GitSource | PypiSource) -> dict[str, Any]:
    if isinstance(source, GitSource):
        return {"git": source.url, "ref": source.ref, "commit": source.commit}
    return {"pypi": source.package, "version": source.version, "sha256": source.sha256,
            "filename": source.filename}


def _resolve_source(source: GitSource | PypiSource, store: Store, platform: str) -> dict[str, Any]:
    if isinstance(source, GitSource):
        repo = _git.mirror(store, source.url)
        pin = _git.resolve(repo, source.url, source.ref, source.commit)
        return {"kind": "git", "url": source.url, "ref": source.ref, "commit": pin.commit,
                "tree": pin.tree, "committed": pin.committed}
    pin_ = _pypi.resolve(source.package, source.version, platform)
    if source.sha256 and pin_.sha256 != source.sha256:
        raise ResolveError(f"sources.{source.name}: the index serves {pin_.filename} with sha256 "
                           f"{pin_.sha256}, the spec pins {source.sha256}")
    if source.filename and pin_.filename != source.filename:
        raise ResolveError(f"sources.{source.name}: pip chose {pin_.filename}, the spec pins {source.filename}")
    return {"kind": "pypi", "package": source.package, "version": source.version,
            "filename": pin_.filename, "url": pin_.url, "sha256": pin_.sha256}


def _path_entry(spec: Spec, source: PathSource) -> dict[str, Any]:
    described = _tree.describe(source.path)
    return {"kind": "path", "path": source.path.relative_to(spec.root).as_posix(),
            "sha256": described["sha256"], "files": described["files"]}


def _patch_entry(spec: Spec, patch_set: PatchSet) -> dict[str, Any]:
    """The set's files with both digests. Where the set carries MD5SUMS/SHA256SUMS, they must
    agree with the files: a patch does not change without its pin changing too."""
    files: list[dict[str, Any]] = []
    for item in patch_set.files:
        data = (patch_set.dir / item.file).read_bytes()
        files.append({"file": item.file, "mount": item.mount, "size": len(data), **patches_mod.digests(data)})
    problems = patches_mod.disagreements(patch_set.dir, {f["file"]: f for f in files}, required=False)
    for algorithm, name in patches_mod.SUMS.items():
        wrong = sorted({p.file for p in problems if p.algorithm == algorithm})
        if wrong:
            raise LockError(f"patches.{patch_set.name}: {patch_set.written}/{name} disagrees with the files: "
                            f"{', '.join(wrong)}",
                            hint=f"if the change is intended, re-pin with `sparkimg patches pin {patch_set.written}`")
    return {"dir": patch_set.dir.relative_to(spec.root).as_posix(), "mode": patch_set.mode, "files": files}


def _toolchain(spec: Spec) -> dict[str, Any]:
    if spec.toolchain.cuda == "base":
        return {"cuda": "base"}
    assert spec.toolchain.path is not None
    root = Path(spec.toolchain.path)
    nvcc = (root / "bin" / "nvcc").resolve()
    if not nvcc.is_file():
        raise ResolveError(f"toolchain.path: {nvcc} not found",
                           hint="point toolchain.path at a CUDA toolkit (the folder holding bin/nvcc)")
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ResolveError(f"{nvcc} --version failed: {exc}") from None
    release = next((line.split("release", 1)[1].strip() for line in out.splitlines() if "release" in line), "")
    build = next((line.split(":", 1)[-1].strip() for line in out.splitlines() if line.startswith("Build")), "")
    return {"cuda": "host", "path": str(root), "resolved": str(root.resolve()),
            "nvcc_version": release, "nvcc_build": build, "nvcc_sha256": sha256_file(nvcc)}
