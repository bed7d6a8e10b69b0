"""Where podman's CLI differs from docker's, in one place: it has no daemon (one version, no
Client/Server), and it must be told that a loopback registry speaks plain HTTP."""

from __future__ import annotations

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
