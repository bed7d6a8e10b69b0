"""Choosing the engine: the client binary (``SPARKIMG_DOCKER``, else docker, Debian's docker,
podman), checked to answer, as a ``DockerEngine`` or, for podman, a ``PodmanEngine``. The choice
is remembered by the store while the candidate binaries are unchanged, so a no-op build starts
no client to ask again."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from sparkimg._internal.fs.identity import identity
from sparkimg.engine import socket_api as engine_api
from sparkimg.engine.docker import (
    _BUILTIN_BUILDKIT_BEFORE,
    _DAEMON_DOWN,
    _VERSION_FORMAT,
    DockerEngine,
    _call,
    _failed,
    _not_running,
    _ok,
    _says,
)
from sparkimg.engine.podman import PodmanEngine, is_podman
from sparkimg.engine.protocol import Engine
from sparkimg.errors import EngineError
from sparkimg.formats.canonical import loads


def connect(client: str | None = None, *, remember: Path | None = None) -> Engine:
    """Pick a client that can build (buildx, or BuildKit built in) and check the engine runs.

    One ``docker version`` per candidate gives the client version and whether the daemon
    answers; ``buildx version`` runs here only where it decides the choice (an automatically
    chosen client of version 23 or later, which cannot build without the plugin).
    """
    candidates = [client] if client else _candidates()
    found = _identity(candidates)
    if remember is not None and (known := _remembered(remember, found)) is not None:
        return known
    problems: list[str] = []
    for candidate in candidates:
        path = shutil.which(candidate) if candidate else None
        if path is None:
            problems.append(f"{candidate}: not found")
            continue
        podman = is_podman(path)
        # podman (no daemon) prints one version; docker a client's and its daemon's.
        args = [path, "version", "--format", "{{.Version}}|{{.Version}}" if podman else _VERSION_FORMAT]
        try:
            proc = _call(args)
        except EngineError as exc:
            problems.append(f"{path}: {exc.message}")
            continue
        version, _, server = proc.stdout.strip().partition("|")
        down = proc.returncode != 0 and _says(proc.stderr, _DAEMON_DOWN)
        if not version or (proc.returncode != 0 and not down):
            problems.append(f"{path}: {_failed(args, proc)}")
            continue
        buildx: bool | None = None
        major = int(version.split(".", 1)[0]) if version.split(".", 1)[0].isdigit() else 0
        if major >= _BUILTIN_BUILDKIT_BEFORE and client is None and not podman:
            buildx = _ok([path, "buildx", "version"])
            if not buildx:
                problems.append(f"{path} {version}: no buildx plugin and no built-in BuildKit")
                continue
        if down or not server:
            raise _not_running(path)
        engine = _engine(path, version, buildx, server=server)
        if remember is not None:
            _remember(remember, found, engine)
        return engine
    raise EngineError(
        "no usable Docker client: " + "; ".join(problems),
        hint="install Docker with buildx, or set SPARKIMG_DOCKER to a client with BuildKit",
    )


def _engine(client: str, version: str, buildx: bool | None, *, server: str | None = None) -> DockerEngine:
    kind = PodmanEngine if is_podman(client) else DockerEngine
    return kind(client, version, buildx, server=server, api_socket=engine_api.api_socket(client))


def _identity(candidates: list[str]) -> list[list[Any]]:
    """What a remembered choice of client depends on: each candidate binary, by path and stat."""
    found: list[list[Any]] = []
    for candidate in candidates:
        path = shutil.which(candidate) if candidate else None
        found.append([candidate, path, identity(Path(path)) if path else None])
    return found


def _remembered(path: Path, found: list[list[Any]]) -> DockerEngine | None:
    """The client chosen before for the same candidate binaries; the daemon is asked by the first operation."""
    try:
        data = loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("identity") != found:
        return None
    try:
        return _engine(str(data["client"]), str(data["version"]), data.get("buildx"))
    except KeyError:
        return None


def _remember(path: Path, found: list[list[Any]], engine: DockerEngine) -> None:
    from sparkimg._internal.fs.atomic import write_atomic

    try:
        write_atomic(path, json.dumps({"identity": found, "client": engine.client, "version": engine.version,
                                       "buildx": engine._buildx}).encode())
    except OSError:
        return  # a cache that cannot be written is only slower


def _candidates() -> list[str]:
    chosen = os.environ.get("SPARKIMG_DOCKER")
    if chosen:
        return [chosen]
    found = [shutil.which(name) for name in ("docker", "/usr/bin/docker", "podman")]
    return list(dict.fromkeys(path for path in found if path))
