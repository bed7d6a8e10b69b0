"""Docker as sparkimg's container engine (``protocol.Engine``); ``podman.PodmanEngine`` is the
same with podman's differences.

Short queries run the client binary (one helper, ``_call``) or, where the client talks to a
local daemon, its API socket; containers go through python-on-whales, imported only by the
methods that start them so that connecting costs no pydantic models. Containers started here
are always removed. Log lines are handed to a callback tagged with the layer and phase;
rendering them is the CLI's job.

Failures keep their meaning: an image the engine does not have is ``None``, an engine that
does not answer (stopped, broken client, timeout) is an ``EngineError`` (exit 3).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sparkimg.engine import socket_api as engine_api
from sparkimg.engine.ownership import LEASE, OWNER_LABEL, alive, lease, owner
from sparkimg.engine.protocol import ImageInfo, LogFn, Mount, PullProgress, RunLimits, RunResult, quiet
from sparkimg.errors import EngineError
from sparkimg.formats.canonical import loads

# A client without buildx but older than 23 has BuildKit built into `docker build`;
# a newer one without the buildx plugin fails with DOCKER_BUILDKIT=1 (environment.md).
_BUILTIN_BUILDKIT_BEFORE = 23

# One call answers both "which client" and "does the daemon answer": with the daemon down,
# docker still prints the client part ("28.2.2|") and exits non-zero.
_VERSION_FORMAT = "{{.Client.Version}}|{{.Server.Version}}"

# What a client prints on stderr when the daemon is not there, and when an image is absent
# (docker 20.10 "Error: No such image: x", 28.x "no such image: x: No such image: x" and
# "invalid reference format" under the same prefix; podman "image not known").
_DAEMON_DOWN = ("cannot connect to the docker daemon", "is the docker daemon running", "cannot connect to podman")
_ABSENT = ("no such image", "no such object", "image not known")

_NOT_RUNNING_HINT = "start it (scripts/dev-up on a dev machine, or systemctl start docker)"


class DockerEngine:
    """A Docker engine reached through one chosen client binary (``connect.connect`` chooses).

    ``buildx`` is asked of the client only when something needs it, unless choosing the client
    needed it already; ``server`` is the daemon version ``connect`` saw.
    """

    # Docker's classic store skips the layers of an archive whose chain it has already.
    loads_by_chain = True

    def __init__(self, client: str, version: str, buildx: bool | None = None, *, server: str | None = None,
                 api_socket: str | None = None) -> None:
        self.client = client
        self.version = version
        self.server = server
        self.api_socket = api_socket
        self._buildx = buildx
        self._docker: Any = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(client={self.client!r}, version={self.version!r}, buildx={self._buildx!r})"

    @property
    def pulls_handoff(self) -> bool:
        """A pull from sparkimg's loopback registry goes over the daemon's API socket."""
        return self.api_socket is not None

    @property
    def buildx(self) -> bool:
        """Whether the client has the buildx plugin (asked once, when first needed)."""
        if self._buildx is None:
            self._buildx = _ok([self.client, "buildx", "version"])
        return self._buildx

    @property
    def builder(self) -> str:
        """What ``build`` builds with: ``buildx`` where the client has the plugin, else the
        BuildKit built into ``docker build`` (the receipt records which)."""
        return "buildx" if self.buildx else "buildkit"

    def _whales(self) -> Any:
        """The python-on-whales client, imported on first use (its models cost ~0.4 s to import)."""
        if self._docker is None:
            from python_on_whales import DockerClient

            self._docker = DockerClient(client_call=[self.client])
        return self._docker

    # -- images ----------------------------------------------------------------

    def inspect(self, reference: str) -> ImageInfo | None:
        """ID, labels and repo digests of a local image in one call; None if the engine has no such image.

        Raises ``EngineError`` when the engine does not answer: a stopped engine is not an absent image.
        Where the client talks to a local daemon's API socket, the same question goes straight to
        that socket (one HTTP request, about a millisecond, instead of starting the client).
        """
        if self.api_socket is not None:
            return self._inspect_api(reference, self.api_socket)
        args = [self.client, "image", "inspect", "--format", "{{json .}}", reference]
        proc = _call(args)
        if proc.returncode != 0:
            if _says(proc.stderr, _DAEMON_DOWN):
                raise _not_running(self.client)
            if _says(proc.stderr, _ABSENT):
                return None
            raise EngineError(f"the container engine failed: {_failed(args, proc)}",
                              hint="check that `docker info` answers; " + _NOT_RUNNING_HINT)
        return _image_info(proc.stdout, f"{' '.join(args[1:3])} {reference}")

    def _inspect_api(self, reference: str, socket_path: str) -> ImageInfo | None:
        """``GET /images/REF/json`` on the Engine API socket: the endpoint ``docker image inspect`` calls."""
        path = engine_api.image_path(reference)
        try:
            status, body = engine_api.http_get(socket_path, path)
        except (FileNotFoundError, ConnectionRefusedError):
            raise _not_running(f"{self.client}, socket {socket_path}") from None
        except (OSError, ValueError) as exc:
            raise EngineError(f"the container engine failed: GET {path} on {socket_path}: {exc}",
                              hint="check that `docker info` answers; " + _NOT_RUNNING_HINT) from None
        if status == 404:
            return None
        if status != 200:
            if status == 400 and _says(body, ("invalid reference", "no such image")):
                return None  # what the client reports as absent for a name it cannot parse
            raise EngineError(f"the container engine failed: GET {path} answered {status}: {body.strip()[:200]}",
                              hint=_NOT_RUNNING_HINT)
        return _image_info(body, f"GET {path}")

    def image_id(self, reference: str) -> str | None:
        """The local image ID (config digest) of a reference, or None if absent."""
        info = self.inspect(reference)
        return info.id if info else None

    def image_labels(self, reference: str) -> dict[str, str]:
        """The labels of a local image; an absent image is an error (ask ``inspect`` to tell)."""
        info = self.inspect(reference)
        if info is None:
            raise EngineError(f"{reference}: no such image in the engine")
        return info.labels

    def pull(self, reference: str, progress: PullProgress | None = None) -> None:
        if progress is None or self.api_socket is None:
            _run([self.client, "pull", "-q", reference])
            return
        self._pull_told(reference, progress)

    def _pull_told(self, reference: str, progress: PullProgress, timeout: float = 3600) -> None:
        """``POST /images/create`` with the client's credentials for the registry (``X-Registry-Auth``,
        as the docker client sends them), reading the daemon's JSON stream as it comes: each layer's
        downloaded bytes, summed, go to ``progress``; an error in the stream fails the pull."""
        path = _create_path(reference)
        request = f"POST {path}"
        try:
            status, lines = engine_api.http_lines(self.api_socket or "", "POST", path,
                                                   _registry_auth(reference.partition("@")[0]), timeout)
            layers: dict[str, tuple[int, int]] = {}  # layer -> (received, size)
            for line in lines:
                message = loads(line) if line.strip() else {}
                if not isinstance(message, dict):
                    continue
                if status not in (200, 201) or message.get("error") or message.get("errorDetail"):
                    raise EngineError(f"pull {reference}: the engine refused: "
                                      f"{message.get('error') or message.get('message') or line[:200]!r}")
                layer, detail = str(message.get("id") or ""), message.get("progressDetail") or {}
                if message.get("status") == "Downloading" and isinstance(detail, dict) \
                        and isinstance(detail.get("total"), int) and isinstance(detail.get("current"), int):
                    layers[layer] = (detail["current"], detail["total"])
                elif message.get("status") == "Download complete" and layer in layers:
                    layers[layer] = (layers[layer][1], layers[layer][1])
                else:
                    continue
                progress(sum(done for done, _ in layers.values()), sum(size for _, size in layers.values()))
        except (OSError, ValueError) as exc:
            raise EngineError(f"the container engine failed: {request} on {self.api_socket}: {exc}",
                              hint=_NOT_RUNNING_HINT) from None
        if status not in (200, 201):
            raise EngineError(f"pull {reference}: the engine refused: {request} answered {status}")

    def tag(self, source: str, target: str) -> None:
        if self.api_socket is None:
            _run([self.client, "tag", "--", source, target])  # a name never read as an option
            return
        from urllib.parse import urlencode

        repository, tag = split_tag(target)
        self._api("POST", f"{engine_api.image_path(source, '/tag')}?{urlencode({'repo': repository, 'tag': tag})}",
                  f"tag {source} {target}")

    def untag(self, reference: str) -> None:
        """Remove one name of an image and nothing else (the image stays while it has another)."""
        if self.api_socket is None:
            _run([self.client, "image", "rm", "--no-prune", "--", reference])
            return
        self._api("DELETE", f"{engine_api.image_path(reference, '')}?noprune=1", f"untag {reference}")

    def pull_plain(self, reference: str, timeout: float = 3600) -> None:
        """Pull with no credentials over the daemon's API socket (``POST /images/create``): a pull
        from a registry sparkimg itself serves on loopback. Only where ``api_socket`` is known."""
        self._api("POST", _create_path(reference), f"pull {reference}", timeout=timeout)

    def load(self, archive: Path) -> str:
        """``docker load`` a docker-archive tar; return what the engine said (the loaded names). Over
        the API socket where the client would use it (``POST /images/load``: no client to start)."""
        if self.api_socket is None:
            return _run([self.client, "load", "--input", str(archive)]).strip()
        try:
            # The daemon answers only when the whole load is done: allow for a multi-GB layer.
            status, body = engine_api.http_post_file(self.api_socket, "/images/load?quiet=1", archive,
                                                     "application/x-tar", timeout=3600)
        except (OSError, ValueError) as exc:
            raise EngineError(f"the container engine failed: POST /images/load on {self.api_socket}: {exc}",
                              hint=_NOT_RUNNING_HINT) from None
        return _streamed(status, body, "the engine refused the image", "POST /images/load")

    def _api(self, method: str, path: str, what: str, timeout: float = 60) -> str:
        assert self.api_socket is not None
        try:
            status, body = engine_api.http_call(self.api_socket, method, path, timeout)
        except (OSError, ValueError) as exc:
            raise EngineError(f"the container engine failed: {method} {path} on {self.api_socket}: {exc}",
                              hint=_NOT_RUNNING_HINT) from None
        return _streamed(status, body, f"{what}: the engine refused", f"{method} {path}", ok=(200, 201))

    def remove_image(self, reference: str) -> None:
        _ok([self.client, "image", "rm", "-f", reference])

    def server_version(self) -> str:
        """The daemon's version: the one ``connect`` saw, else asked now."""
        if self.server is None and self.api_socket is not None and engine_api.last_server:
            self.server = engine_api.last_server
        if self.server is None and self.api_socket is not None:
            try:
                status, body = engine_api.http_get(self.api_socket, "/version")
                version = loads(body).get("Version") if status == 200 else None
                self.server = str(version) if isinstance(version, str) else None
            except (OSError, ValueError, AttributeError):
                self.server = None
        if self.server is None:
            self.server = _run([self.client, "info", "--format", "{{.ServerVersion}}"]).strip()
        return self.server

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
        log: LogFn = quiet,
        layer: str = "",
        phase: str = "run",
    ) -> RunResult:
        """Run ``command`` with no network inside cgroup bounds; stream logs; always remove."""
        import threading
        import uuid

        from python_on_whales.exceptions import DockerException

        docker = self._whales()
        self.reap_orphans()
        name = f"sparkimg-{layer or 'run'}-{uuid.uuid4().hex[:10]}"
        with lease() as lease_folder:
            kwargs: dict[str, Any] = {
                "detach": True,
                "name": name,
                "networks": ["none"],
                "memory": limits.memory,
                "memory_swap": limits.memory,
                "pids_limit": limits.pids,
                "envs": {**(env or {}), "SPARKIMG_LEASE": LEASE},
                "volumes": [*(m.volume() for m in mounts), (str(lease_folder), str(Path(LEASE).parent), "ro")],
                "workdir": workdir,
                "pull": "never",
                "labels": {OWNER_LABEL: owner()},
            }
            if limits.cpus is not None:
                kwargs["cpus"] = limits.cpus
            if limits.cpuset is not None:
                kwargs["cpuset_cpus"] = _cpu_list(limits.cpuset)
            if limits.cgroup_parent:
                kwargs["cgroup_parent"] = limits.cgroup_parent
            if gpus:
                kwargs.update(self._gpus())
            kwargs.update(self._run_options(limits))
            try:
                try:
                    container = docker.run(image, list(command), **kwargs)
                except DockerException as exc:
                    raise self._gone(exc) or EngineError(f"could not start a container from {image}: "
                                                         f"{_why(exc)}") from None
                reader = threading.Thread(target=self._follow, args=(container, log, layer, phase), daemon=True)
                reader.start()
                try:
                    exit_code = int(docker.container.wait(container))
                    reader.join(timeout=10)
                    state = docker.container.inspect(container).state
                except DockerException as exc:
                    raise self._gone(exc) or EngineError(f"{name}: the engine failed while it ran: {_why(exc)}") \
                        from None
                return RunResult(exit_code, bool(state.oom_killed))
            finally:
                _ok([self.client, "rm", "-f", name])

    def _gone(self, exc: Exception) -> EngineError | None:
        """The error to give when the engine stopped answering in the middle of a call (a restart,
        a crash), else None: the engine answered, and the call's own error stands."""
        if _call([self.client, "version", "--format", "{{.Server.Version}}"], timeout=10).returncode == 0:
            return None
        return EngineError(f"the engine went away while a container ran ({_why(exc)})",
                           hint="start the engine again (`sparkimg doctor` says how it is), then run the "
                           "command again: what it had built is kept")

    def _gpus(self) -> dict[str, Any]:
        """How a container is given every GPU (python-on-whales ``run`` arguments)."""
        return {"gpus": "all"}

    def _run_options(self, limits: RunLimits) -> dict[str, Any]:
        """What this engine adds to every bounded ``run`` (nothing, for Docker)."""
        return {}

    def reap_orphans(self) -> list[str]:
        """Remove the containers of sparkimg runs on this host whose process is gone (a kill -9
        leaves them behind); return their names."""
        proc = _call([self.client, "ps", "-a", "--filter", f"label={OWNER_LABEL}", "--format",
                      f'{{{{.Names}}}} {{{{.Label "{OWNER_LABEL}"}}}}'], timeout=120)
        if proc.returncode != 0:
            return []
        gone = [name for name, _, label in (line.partition(" ") for line in proc.stdout.splitlines())
                if name and not alive(label)]
        for name in gone:
            _ok([self.client, "rm", "-f", name])
        return gone

    def _follow(self, container: Any, log: LogFn, layer: str, phase: str) -> None:
        from python_on_whales.exceptions import DockerException

        try:
            for _stream, chunk in self._whales().container.logs(container, follow=True, stream=True):
                for line in chunk.decode("utf-8", "replace").splitlines():
                    log(layer, phase, line)
        except DockerException:
            return

def _image_info(text: str, what: str) -> ImageInfo:
    """An ``ImageInfo`` from the engine's JSON description of an image (the same from the client and the API;
    podman writes the ID without its ``sha256:``)."""
    try:
        data = loads(text)
        if isinstance(data, list) and len(data) == 1:  # podman 4 prints the list `inspect` gives, format or not
            data = data[0]
        labels = (data.get("Config") or {}).get("Labels") or {}
        image_id = str(data["Id"])
        if re.fullmatch(r"[0-9a-f]{64}", image_id):
            image_id = "sha256:" + image_id
        return ImageInfo(image_id, {str(k): str(v) for k, v in labels.items()},
                         tuple(str(d) for d in data.get("RepoDigests") or ()),
                         tuple(str(d) for d in (data.get("RootFS") or {}).get("Layers") or ()))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise EngineError(f"the container engine failed: {what} printed no image description: "
                          f"{text.strip()[:200]!r}",
                          hint="check the client works (`docker version`), or set SPARKIMG_DOCKER") from None


def _cpu_list(cpuset: str) -> list[int]:
    cpus: list[int] = []
    for part in cpuset.split(","):
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def _why(exc: Exception) -> str:
    stderr = getattr(exc, "stderr", None)
    return (stderr or str(exc)).strip().splitlines()[-1] if (stderr or str(exc)).strip() else "unknown error"


def _call(args: list[str], *, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run one client command to completion; a client that cannot start or hangs is an engine failure."""
    try:
        return subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"{' '.join(args[:3])}: {exc}") from None


def _failed(args: list[str], proc: subprocess.CompletedProcess[str]) -> str:
    return f"{' '.join(args[:4])} failed: {proc.stderr.strip() or proc.stdout.strip()}"


def _says(stderr: str, markers: tuple[str, ...]) -> bool:
    text = stderr.lower()
    return any(marker in text for marker in markers)


def _not_running(client: str) -> EngineError:
    return EngineError(f"the Docker engine is not running (client {client})", hint=_NOT_RUNNING_HINT)


def _run(args: list[str]) -> str:
    proc = _call(args)
    if proc.returncode != 0:
        raise EngineError(_failed(args, proc))
    return proc.stdout


def _ok(args: list[str]) -> bool:
    try:
        return _call(args, timeout=120).returncode == 0
    except EngineError:
        return False


def split_tag(reference: str) -> tuple[str, str]:
    """``repo[:tag]`` as the API's ``repo`` and ``tag`` (``latest`` when none is given)."""
    slash = reference.rfind("/")
    colon = reference.rfind(":")
    if colon > slash:
        return reference[:colon], reference[colon + 1:]
    return reference, "latest"


def _streamed(status: int, body: str, refused: str, request: str, ok: tuple[int, ...] = (200,)) -> str:
    """The lines of a daemon's answer, whose JSON stream (load, pull) can carry an error after a 200;
    raises ``EngineError`` with the daemon's words for one."""
    said = []
    for text in body.splitlines():
        try:
            message = loads(text) if text.strip() else {}
        except ValueError:
            message = {"stream": text}
        if not isinstance(message, dict):
            continue
        if status not in ok or message.get("error") or message.get("errorDetail"):
            raise EngineError(f"{refused}: {message.get('error') or message.get('message') or text}")
        said.append(str(message.get("stream") or message.get("status") or "").strip())
    if status not in ok:
        raise EngineError(f"{refused}: {request} answered {status}")
    return "\n".join(s for s in said if s)


def _create_path(reference: str) -> str:
    """The API path that pulls ``reference`` (``POST /images/create``; a digest goes as its tag)."""
    from urllib.parse import urlencode

    name, _, digest = reference.partition("@")
    return "/images/create?" + urlencode({"fromImage": name, "tag": digest} if digest else {"fromImage": reference})


def _registry_auth(repository: str) -> dict[str, str]:
    """The ``X-Registry-Auth`` header the docker client would send for ``repository``'s registry:
    the credentials it finds in its config (helper, store or ``auths``), base64url JSON; none for
    a registry it has none for (an anonymous pull)."""
    import base64

    from sparkimg._internal.net.registry import ImageRef, credentials

    registry = ImageRef.parse(repository).registry
    found = credentials(registry)
    if found is None:
        return {}
    user, password = found
    encoded = json.dumps({"username": user, "password": password, "serveraddress": registry}).encode()
    return {"X-Registry-Auth": base64.urlsafe_b64encode(encoded).decode()}
