"""podman as sparkimg's container engine: Docker's adapter (``docker.DockerEngine``) with
podman's differences, in one place. It has no daemon (one version, no Client/Server), it must be
told that a loopback registry speaks plain HTTP, it asks the runtime for resource limits the
caller may not be allowed to grant (``run_ulimits``), it reaches GPUs through CDI, and it takes
every layer of an archive it loads (no layer by chain)."""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

from sparkimg.engine.docker import DockerEngine, _call, _failed, _run
from sparkimg.engine.protocol import PullProgress, RunLimits
from sparkimg.errors import EngineError


def is_podman(client: str) -> bool:
    """Whether the client binary is podman (``connect`` asks, to choose the adapter)."""
    return Path(client).name == "podman"


def loopback(reference: str) -> bool:
    host = reference.split("/", 1)[0] if "/" in reference else ""
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name == "localhost" or name.startswith("127.") or name in ("[::1]", "::1")


def run_ulimits(pids: int) -> list[str]:
    """What ``run`` adds under podman: explicit open-file and process limits. Left alone, podman
    (4.x, as root) asks runc for 1048576 open files and more processes than a caller without
    CAP_SYS_RESOURCE may grant (a container on a container host), and every ``podman run`` fails
    with "error setting rlimit type 7: operation not permitted". Docker sets neither and the
    container inherits the daemon's. So: open files at this process's own hard limit (what it
    may always grant), processes at the pid bound the container has anyway (``--pids-limit``)."""
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    processes = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    files = 1 << 20 if files == resource.RLIM_INFINITY else min(files, 1 << 20)
    processes = pids if processes == resource.RLIM_INFINITY else min(processes, pids)
    return [f"nofile={files}:{files}", f"nproc={processes}:{processes}"]


class PodmanEngine(DockerEngine):
    """podman through its docker-compatible CLI."""

    loads_by_chain = False  # podman takes no layer by chain: every layer goes in the archive it loads

    @property
    def pulls_handoff(self) -> bool:
        """podman pulls from the loopback registry itself (no daemon), told it speaks plain HTTP."""
        return True

    def pull(self, reference: str, progress: PullProgress | None = None) -> None:
        """podman's own pull (its progress is not streamed: it says it is pulling, then done)."""
        _run([self.client, "pull", "-q", *self._pull_flags(reference), reference])

    def pull_plain(self, reference: str, timeout: float = 3600) -> None:
        if self.api_socket is not None:
            super().pull_plain(reference, timeout)
            return
        args = [self.client, "pull", "--quiet", *self._pull_flags(reference), reference]
        proc = _call(args, timeout=timeout)
        if proc.returncode != 0:
            raise EngineError(_failed(args, proc))

    def server_version(self) -> str:
        """No daemon: the version is podman's own."""
        if self.server is None and self.api_socket is None:
            self.server = "podman " + _run([self.client, "version", "--format", "{{.Client.Version}}"]).strip()
        return super().server_version()

    def _pull_flags(self, reference: str) -> list[str]:
        """Docker reaches a registry on loopback over plain HTTP by itself; podman must be told."""
        return ["--tls-verify=false"] if loopback(reference) else []

    def _gpus(self) -> dict[str, Any]:
        """podman reaches GPUs through CDI (``nvidia-ctk cdi generate``), not ``--gpus``."""
        return {"devices": ["nvidia.com/gpu=all"]}

    def _run_options(self, limits: RunLimits) -> dict[str, Any]:
        return {"ulimit": run_ulimits(limits.pids)}
