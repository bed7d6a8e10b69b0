"""What sparkimg adds to a podman ``run``: limits the caller may grant (podman's own defaults ask
runc for more open files and processes than a root without CAP_SYS_RESOURCE may set)."""

from __future__ import annotations

import resource

from sparkimg.engine.podman import run_ulimits


def test_docker_gets_no_ulimits_and_podman_gets_grantable_ones() -> None:
    assert run_ulimits("/usr/bin/docker", 4096) == []
    files_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    procs_hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nofile, nproc = run_ulimits("/usr/bin/podman", 512)
    files = int(nofile.removeprefix("nofile=").split(":")[0])
    procs = int(nproc.removeprefix("nproc=").split(":")[0])
    assert files <= (1 << 20) and (files_hard == resource.RLIM_INFINITY or files <= files_hard)
    assert procs <= 512 and (procs_hard == resource.RLIM_INFINITY or procs <= procs_hard)
    assert nofile == f"nofile={files}:{files}" and nproc == f"nproc={procs}:{procs}"  # soft = hard
