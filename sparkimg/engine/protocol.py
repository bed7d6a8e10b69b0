"""The seam between sparkimg and a container engine: what every stage may ask of one, and the
words it is asked in. ``engine/docker.py`` implements it for Docker, ``engine/podman.py`` for
podman (where podman's CLI differs), ``engine/connect.py`` picks one; no stage outside
``engine/`` asks which engine it has, only what it can do (``loads_by_chain``, ``pulls_handoff``),
as repo2docker's ``ContainerEngine`` interface does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

LogFn = Callable[[str, str, str], None]  # (layer, phase, line)


def quiet(layer: str, phase: str, line: str) -> None:
    """A ``LogFn`` that drops every line."""
    return None


PullProgress = Callable[[int, int | None], None]  # bytes received, bytes in all (None: not known yet)


@dataclass(frozen=True)
class Mount:
    """A bind mount; read-only unless ``writable``."""

    source: Path
    target: str
    writable: bool = False

    def volume(self) -> tuple[str, str, str]:
        return (str(self.source), self.target, "rw" if self.writable else "ro")


@dataclass(frozen=True)
class RunLimits:
    """cgroup bounds for one container; memory-swap equals memory (no swap)."""

    memory: int
    cpus: float | None = None
    cpuset: str | None = None
    pids: int = 4096
    cgroup_parent: str | None = None


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    oom_killed: bool


@dataclass(frozen=True)
class ImageInfo:
    """What one ``image inspect`` says about a local image."""

    id: str  # the image ID (config digest)
    labels: dict[str, str] = field(default_factory=dict)
    repo_digests: tuple[str, ...] = ()  # repository@sha256:... names it was pulled or pushed as
    layers: tuple[str, ...] = ()  # its diff_ids, base first (RootFS.Layers)


class Engine(Protocol):
    """A container engine as sparkimg uses it. An image it does not have is ``None``; an engine
    that does not answer (stopped, broken client, timeout) is an ``EngineError`` (exit 3).
    Containers it starts are always removed."""

    client: str  # the client binary's path
    version: str  # the client's version
    api_socket: str | None  # the daemon's Engine API socket, where the client talks to one

    @property
    def builder(self) -> str:
        """What built an image the engine built itself (recorded in a receipt)."""

    @property
    def loads_by_chain(self) -> bool:
        """Whether a load may leave out the layers whose chain the engine holds already (Docker's
        classic store); podman takes every layer of an archive it loads."""

    @property
    def pulls_handoff(self) -> bool:
        """Whether the engine can pull an image from a registry sparkimg serves on loopback
        (``image/handoff.py``): a daemon's API socket, or podman's own pull."""

    def inspect(self, reference: str) -> ImageInfo | None: ...

    def image_id(self, reference: str) -> str | None: ...

    def image_labels(self, reference: str) -> dict[str, str]: ...

    def pull(self, reference: str, progress: PullProgress | None = None) -> None:
        """Pull with the credentials the engine's client would use; ``progress(done, total)`` as
        the engine tells the bytes it has received (a daemon's API stream), when given."""

    def pull_plain(self, reference: str, timeout: float = 3600) -> None:
        """Pull with no credentials from a registry sparkimg itself serves on loopback."""

    def tag(self, source: str, target: str) -> None: ...

    def untag(self, reference: str) -> None: ...

    def load(self, archive: Path) -> str:
        """Load a docker-archive tar; what the engine said."""

    def remove_image(self, reference: str) -> None: ...

    def server_version(self) -> str: ...

    def run_bounded(self, image: str, command: Sequence[str], *, limits: RunLimits, mounts: Sequence[Mount] = (),
                    env: Mapping[str, str] | None = None, workdir: str | None = None, gpus: bool = False,
                    log: LogFn = quiet, layer: str = "", phase: str = "run") -> RunResult:
        """Run ``command`` with no network inside cgroup bounds; stream its log; always remove it."""

    def reap_orphans(self) -> list[str]:
        """Remove the containers of sparkimg runs whose process is gone; their names."""
