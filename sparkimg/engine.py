"""The one adapter between sparkimg and a container engine (python-on-whales underneath).

Containers started here are always removed. Log lines are handed to a callback tagged
with the layer and phase; rendering them is the CLI's job.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import BuildError, EngineError

LogFn = Callable[[str, str, str], None]  # (layer, phase, line)

# A client without buildx but older than 23 has BuildKit built into `docker build`;
# a newer one without the buildx plugin fails with DOCKER_BUILDKIT=1 (environment.md).
_BUILTIN_BUILDKIT_BEFORE = 23


def _quiet(layer: str, phase: str, line: str) -> None:
    return None


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
    id: str
    labels: dict[str, str]


@dataclass(frozen=True)
class BuildOutput:
    image_id: str
    builder: str


@dataclass
class Engine:
    """A Docker-compatible engine reached through one chosen client binary."""

    client: str
    version: str
    buildx: bool
    _docker: Any = field(repr=False, default=None)

    @classmethod
    def connect(cls, client: str | None = None) -> Engine:
        """Pick a client that can build (buildx, or BuildKit built in) and check the engine runs."""
        candidates = [client] if client else _candidates()
        problems: list[str] = []
        for candidate in candidates:
            path = shutil.which(candidate) if candidate else None
            if path is None:
                problems.append(f"{candidate}: not found")
                continue
            try:
                version = _run([path, "version", "--format", "{{.Client.Version}}"]).strip()
            except EngineError as exc:
                problems.append(f"{path}: {exc.message}")
                continue
            buildx = _ok([path, "buildx", "version"])
            major = int(version.split(".", 1)[0]) if version.split(".", 1)[0].isdigit() else 0
            if not buildx and major >= _BUILTIN_BUILDKIT_BEFORE and client is None:
                problems.append(f"{path} {version}: no buildx plugin and no built-in BuildKit")
                continue
            try:
                _run([path, "info", "--format", "{{.ServerVersion}}"])
            except EngineError:
                raise EngineError(
                    f"the Docker engine is not running (client {path})",
                    hint="start it (scripts/dev-up on a dev machine, or systemctl start docker)",
                ) from None
            from python_on_whales import DockerClient

            return cls(path, version, buildx, DockerClient(client_call=[path]))
        raise EngineError(
            "no usable Docker client: " + "; ".join(problems),
            hint="install Docker with buildx, or set SPARKIMG_DOCKER to a client with BuildKit",
        )

    # -- images ----------------------------------------------------------------

    def image_id(self, reference: str) -> str | None:
        """The local image ID (config digest) of a reference, or None if absent."""
        try:
            return _run([self.client, "image", "inspect", "--format", "{{.Id}}", reference]).strip()
        except EngineError:
            return None

    def inspect(self, reference: str) -> ImageInfo | None:
        """ID and labels of a local image in one call; None when it is absent."""
        import json

        try:
            out = _run([self.client, "image", "inspect", "--format", "{{.Id}} {{json .Config.Labels}}", reference])
        except EngineError:
            return None
        image_id, _, labels = out.strip().partition(" ")
        return ImageInfo(image_id, dict(json.loads(labels or "null") or {}))

    def image_labels(self, reference: str) -> dict[str, str]:
        import json

        out = _run([self.client, "image", "inspect", "--format", "{{json .Config.Labels}}", reference])
        labels = json.loads(out or "null")
        return dict(labels or {})

    def pull(self, reference: str) -> None:
        _run([self.client, "pull", "-q", reference])

    def tag(self, source: str, target: str) -> None:
        _run([self.client, "tag", source, target])

    def remove_image(self, reference: str) -> None:
        _ok([self.client, "image", "rm", "-f", reference])

    def server_version(self) -> str:
        return _run([self.client, "info", "--format", "{{.ServerVersion}}"]).strip()

    # -- containers --------------------------------------------------------------

    def run_bounded(
        self,
        image: str,
        command: Sequence[str],
        *,
        limits: RunLimits,
        mounts: Sequence[Mount] = (),
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        gpus: bool = False,
        log: LogFn = _quiet,
        layer: str = "",
        phase: str = "run",
    ) -> RunResult:
        """Run ``command`` with no network inside cgroup bounds; stream logs; always remove."""
        from python_on_whales.exceptions import DockerException

        name = f"sparkimg-{layer or 'run'}-{uuid.uuid4().hex[:10]}"
        kwargs: dict[str, Any] = {
            "detach": True,
            "name": name,
            "networks": ["none"],
            "memory": limits.memory,
            "memory_swap": limits.memory,
            "pids_limit": limits.pids,
            "envs": dict(env or {}),
            "volumes": [m.volume() for m in mounts],
            "workdir": workdir,
            "pull": "never",
        }
        if limits.cpus is not None:
            kwargs["cpus"] = limits.cpus
        if limits.cpuset is not None:
            kwargs["cpuset_cpus"] = _cpu_list(limits.cpuset)
        if limits.cgroup_parent:
            kwargs["cgroup_parent"] = limits.cgroup_parent
        if gpus:
            kwargs["gpus"] = "all"
        try:
            container = self._docker.run(image, list(command), **kwargs)
        except DockerException as exc:
            raise EngineError(f"could not start a container from {image}: {_why(exc)}") from None
        try:
            reader = threading.Thread(target=self._follow, args=(container, log, layer, phase), daemon=True)
            reader.start()
            exit_code = int(self._docker.container.wait(container))
            reader.join(timeout=10)
            state = self._docker.container.inspect(container).state
            return RunResult(exit_code, bool(state.oom_killed))
        finally:
            _ok([self.client, "rm", "-f", name])

    def _follow(self, container: Any, log: LogFn, layer: str, phase: str) -> None:
        from python_on_whales.exceptions import DockerException

        try:
            for _stream, chunk in self._docker.container.logs(container, follow=True, stream=True):
                for line in chunk.decode("utf-8", "replace").splitlines():
                    log(layer, phase, line)
        except DockerException:
            return

    # -- builds --------------------------------------------------------------------

    def build(
        self,
        context: Path,
        *,
        tags: Sequence[str],
        labels: Mapping[str, str],
        build_args: Mapping[str, str],
        log: LogFn = _quiet,
        layer: str = "image",
    ) -> BuildOutput:
        """Build ``context/Dockerfile`` with no network: buildx if present, else BuildKit."""
        iidfile = context.parent / f".{context.name}.iid"
        args = [self.client]
        env = dict(os.environ)
        if self.buildx:
            args += ["buildx", "build", "--load", "--provenance=false"]
            builder = "buildx"
        else:
            args += ["build"]
            env["DOCKER_BUILDKIT"] = "1"
            builder = "buildkit"
        args += ["--network", "none", "--iidfile", str(iidfile), "--progress", "plain"]
        for tag in tags:
            args += ["--tag", tag]
        for key, value in sorted(labels.items()):
            args += ["--label", f"{key}={value}"]
        for key, value in sorted(build_args.items()):
            args += ["--build-arg", f"{key}={value}"]
        args.append(str(context))
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
        tail: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail = [*tail[-40:], line]
            log(layer, "assemble", line)
        if proc.wait() != 0:
            raise BuildError(f"image assembly failed ({builder}); last output:\n" + "\n".join(tail[-15:]))
        image_id = iidfile.read_text().strip()
        iidfile.unlink(missing_ok=True)
        return BuildOutput(image_id, builder)


def _candidates() -> list[str]:
    chosen = os.environ.get("SPARKIMG_DOCKER")
    if chosen:
        return [chosen]
    found = [shutil.which(name) for name in ("docker", "/usr/bin/docker", "podman")]
    return list(dict.fromkeys(path for path in found if path))


def _cpu_list(cpuset: str) -> list[int]:
    cpus: list[int] = []
    for part in cpuset.split(","):
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def _why(exc: Exception) -> str:
    stderr = getattr(exc, "stderr", None)
    return (stderr or str(exc)).strip().splitlines()[-1] if (stderr or str(exc)).strip() else "unknown error"


def _run(args: list[str]) -> str:
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"{' '.join(args[:3])}: {exc}") from None
    if proc.returncode != 0:
        raise EngineError(f"{' '.join(args[:4])} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def _ok(args: list[str]) -> bool:
    try:
        return subprocess.run(args, capture_output=True, timeout=120, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
