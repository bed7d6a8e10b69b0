"""Where podman's CLI differs from docker's, in one place: it has no daemon (one version, no
Client/Server), it must be told that a loopback registry speaks plain HTTP, and it asks the
runtime for resource limits the caller may not be allowed to grant (``run_ulimits``)."""

from __future__ import annotations

import resource
from pathlib import Path


def is_podman(client: str) -> bool:
    """Whether the client is podman, whose CLI differs from docker's in a few places (version, pull)."""
    return Path(client).name == "podman"


def loopback(reference: str) -> bool:
    host = reference.split("/", 1)[0] if "/" in reference else ""
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name == "localhost" or name.startswith("127.") or name in ("[::1]", "::1")


def pull_flags(client: str, reference: str) -> list[str]:
    """What ``pull`` adds: docker reaches a registry on loopback over plain HTTP by itself; podman must be told."""
    return ["--tls-verify=false"] if is_podman(client) and loopback(reference) else []


def run_ulimits(client: str, pids: int) -> list[str]:
    """What ``run`` adds under podman: explicit open-file and process limits. Left alone, podman
    (4.x, as root) asks runc for 1048576 open files and more processes than a caller without
    CAP_SYS_RESOURCE may grant (a container on a container host), and every ``podman run`` fails
    with "error setting rlimit type 7: operation not permitted". Docker sets neither and the
    container inherits the daemon's. So: open files at this process's own hard limit (what it
    may always grant), processes at the pid bound the container has anyway (``--pids-limit``)."""
    if not is_podman(client):
        return []
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    processes = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    files = 1 << 20 if files == resource.RLIM_INFINITY else min(files, 1 << 20)
    processes = pids if processes == resource.RLIM_INFINITY else min(processes, pids)
    return [f"nofile={files}:{files}", f"nproc={processes}:{processes}"]
