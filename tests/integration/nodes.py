"""Extra Docker daemons as stand-ins for the nodes of a serving cluster (environment.md: a second
dockerd works beside the first). Each has its own socket, data root, exec root, pidfile and
containerd namespace under one temporary folder, no bridge and no iptables rules, so it touches
nothing of the shared engine; its pulls are made by the daemon on the host network, so it reaches
the loopback registry. sparkimg is pointed at a node the way the docker client is: ``DOCKER_HOST``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg.cli import main
from tests.support import unavailable


@dataclass(frozen=True)
class Node:
    name: str
    root: Path

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The docker client against this node."""
        return subprocess.run([_client(), *args], capture_output=True, text=True, check=check,
                              env={**os.environ, "DOCKER_HOST": self.host})

    def image_id(self, reference: str) -> str | None:
        found = self.docker("image", "inspect", "--format", "{{.Id}}", reference, check=False)
        return found.stdout.strip() if found.returncode == 0 else None

    def layers(self, reference: str) -> list[str]:
        found = self.docker("image", "inspect", "--format", "{{json .RootFS.Layers}}", reference)
        return list(json.loads(found.stdout))

    def sparkimg(self, store: Path, *args: str) -> tuple[int, Any, str]:
        """``sparkimg --store STORE ARGS`` in-process against this node."""
        return sparkimg(store, *args, host=self.host)


def sparkimg(store: Path, *args: str, host: str | None = None) -> tuple[int, Any, str]:
    """``sparkimg --store STORE ARGS`` in-process, with DOCKER_HOST at ``host`` if given (else the
    engine the session uses): (exit code, stdout parsed when --json is given, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    before = os.environ.get("DOCKER_HOST")
    if host is not None:
        os.environ["DOCKER_HOST"] = host
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["--store", str(store), *args])
    finally:
        if before is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = before
    text = out.getvalue()
    if "--json" in args:
        try:
            return code, json.loads(text), err.getvalue()
        except ValueError:
            return code, None, err.getvalue()
    return code, text, err.getvalue()


def _client() -> str:
    return shutil.which("docker") or "/usr/bin/docker"


@contextlib.contextmanager
def nodes(count: int, folder: Path, extra: tuple[str, ...] = ()) -> Iterator[list[Node]]:
    """``count`` started daemons (each with the dockerd options ``extra``, e.g. an
    ``--insecure-registry``); each is stopped, and its folder removed, at the end."""
    if shutil.which("dockerd") is None:
        unavailable("no dockerd to start nodes with")
    started: list[tuple[Node, subprocess.Popen[bytes]]] = []
    try:
        for index in range(count):
            tag = f"sin{uuid.uuid4().hex[:6]}{index}"  # containerd namespaces of this node
            node = Node(f"node{index}", Path(folder) / f"n{index}")
            for part in ("data", "exec"):
                (node.root / part).mkdir(parents=True)
            log = (node.root / "dockerd.log").open("wb")
            process = subprocess.Popen(
                ["dockerd", "--host", node.host, "--data-root", str(node.root / "data"),
                 "--exec-root", str(node.root / "exec"), "--pidfile", str(node.root / "dockerd.pid"),
                 "--iptables=false", "--bridge=none", "--containerd-namespace", tag,
                 "--containerd-plugins-namespace", f"{tag}p", *extra],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            started.append((node, process))
        for node, process in started:
            deadline = time.monotonic() + 60
            while node.docker("version", check=False).returncode != 0:
                if process.poll() is not None or time.monotonic() > deadline:
                    tail = (node.root / "dockerd.log").read_text(errors="replace")[-800:]
                    unavailable(f"{node.name}: dockerd did not come up: {tail}")
                time.sleep(0.2)
        yield [node for node, _ in started]
    finally:
        for _, process in started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for node, process in started:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
            # A daemon stopped mid-way can leave its overlay mounts behind; never remove through them.
            mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                      if line.split()[1].startswith(str(node.root))]
            for mount in sorted(mounts, reverse=True):
                subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
            shutil.rmtree(node.root, ignore_errors=True)


def signed_demo(folder: Path, *build_args: str) -> tuple[Path, Path, Callable[..., Any], Any]:
    """The demo copied into ``folder/project``, locked and built with a new key ``folder/trusted``:
    (spec, store, a runner of sparkimg on that store that asserts exit 0, the build's JSON)."""
    from .helpers import copy_demo

    demo, store = copy_demo(folder / "project"), folder / "store"

    def run(*args: str) -> Any:
        code, out, err = sparkimg(store, *args)
        assert code == 0, err
        return out

    run("keygen", "--out", str(folder / "trusted"))
    run("lock", str(demo))
    built = run("build", str(demo), "--json", "--quiet", "--key", str(folder / "trusted.key"), *build_args)
    return demo, store, run, built
