"""What sparkimg adds to a podman ``run``: limits the caller may grant (podman's own defaults ask
runc for more open files and processes than a root without CAP_SYS_RESOURCE may set)."""

from __future__ import annotations

import resource

from sparkimg.engine.docker import DockerEngine
from sparkimg.engine.podman import PodmanEngine, run_ulimits
from sparkimg.engine.protocol import RunLimits


def test_connect_picks_the_adapter_by_client_and_only_podman_loads_every_layer() -> None:
    from sparkimg.engine.connect import _engine

    podman, docker = _engine("/usr/bin/podman", "4.3.1", None), _engine("/usr/bin/docker", "20.10.24", None)
    assert isinstance(podman, PodmanEngine) and type(docker) is DockerEngine
    assert podman.pulls_handoff and not podman.loads_by_chain and docker.loads_by_chain
    assert podman._pull_flags("127.0.0.1:5000/x@sha256:" + "a" * 64) == ["--tls-verify=false"]
    assert podman._pull_flags("registry.example/x:1") == []
    assert podman._gpus() == {"devices": ["nvidia.com/gpu=all"]} and docker._gpus() == {"gpus": "all"}


def test_docker_gets_no_ulimits_and_podman_gets_grantable_ones() -> None:
    limits = RunLimits(memory=1 << 30, pids=512)
    assert DockerEngine("/usr/bin/docker", "20.10")._run_options(limits) == {}
    assert PodmanEngine("/usr/bin/podman", "4.3.1")._run_options(limits) == {"ulimit": run_ulimits(512)}
    files_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    procs_hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nofile, nproc = run_ulimits(512)
    files = int(nofile.removeprefix("nofile=").split(":")[0])
    procs = int(nproc.removeprefix("nproc=").split(":")[0])
    assert files <= (1 << 20) and (files_hard == resource.RLIM_INFINITY or files <= files_hard)
    assert procs <= 512 and (procs_hard == resource.RLIM_INFINITY or procs <= procs_hard)
    assert nofile == f"nofile={files}:{files}" and nproc == f"nproc={procs}:{procs}"  # soft = hard
