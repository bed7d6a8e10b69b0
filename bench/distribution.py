"""Distribution benchmark: `sparkimg push` / `sparkimg pull` of the demo against `docker push` /
`docker pull` of the same image, measured in the same run.

For each run (scripts/dev-up must have run; the pulls go into an extra dockerd started here, a
stand-in for a rank, emptied before each cold pull):
  - first push of the demo to a fresh repository on the loopback registry: sparkimg push (from
    its own OCI data, receipt attached) vs docker push of the engine's copy (another fresh repo);
  - cold pull into the node: sparkimg pull (receipt verified, by digest, checked, tagged) vs
    docker pull;
  - a patch-only change (one patch file): push and pull again; bytes moved are the blobs the new
    manifest names that the previous one did not (the registry's own sizes), for both tools.
Prints medians and ratios to docker's figure; asserts nothing about times.
Usage: python bench/distribution.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
REGISTRY = "127.0.0.1:5000"
ACCEPT = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"


def command_line() -> list[str]:
    script = Path(sys.executable).with_name("sparkimg")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "sparkimg.cli"]


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env or ENV)
    return time.perf_counter() - started, done.stdout


def sparkimg(store: Path, *args: str, host: str | None = None) -> tuple[float, str]:
    env = {**ENV, **({"DOCKER_HOST": host} if host else {})}
    return timed([*command_line(), "--store", str(store), *args], env)


def docker(*args: str, host: str | None = None) -> tuple[float, str]:
    env = {**os.environ, **({"DOCKER_HOST": host} if host else {})}
    return timed(["docker", *args], env)


def blobs(repository: str, reference: str) -> dict[str, int]:
    """The blobs (config and layers) a manifest in the registry names, with their sizes."""
    import requests

    name = repository.removeprefix(f"{REGISTRY}/")
    answer = requests.get(f"http://{REGISTRY}/v2/{name}/manifests/{reference}", headers={"Accept": ACCEPT},
                          timeout=10)
    answer.raise_for_status()
    manifest = answer.json()
    return {d["digest"]: int(d["size"]) for d in [manifest["config"], *manifest["layers"]]}


def moved(repository: str, before: str, after: str) -> int:
    old, new = blobs(repository, before), blobs(repository, after)
    return sum(size for digest, size in new.items() if digest not in old)


def empty(node: Any) -> None:
    ids = node.docker("images", "-a", "-q").stdout.split()
    if ids:
        node.docker("rmi", "-f", *ids, check=False)


def one_run(root: Path, node: Any) -> dict[str, float]:
    from tests.integration.helpers import copy_demo

    spec, store = copy_demo(root / f"p{uuid.uuid4().hex[:6]}"), root / "store"
    sparkimg(store, "keygen", "--out", str(root / "bench"), "--force")
    sparkimg(store, "lock", str(spec))
    built = json.loads(sparkimg(store, "build", str(spec), "--quiet", "--json", "--key", str(root / "bench.key"))[1])
    run = uuid.uuid4().hex[:8]
    ours, theirs = f"{REGISTRY}/sparkimg-bench/dist-{run}", f"{REGISTRY}/sparkimg-bench/docker-{run}"
    figures: dict[str, float] = {}

    figures["push_sparkimg"], out = sparkimg(store, "push", str(spec), "--to", ours, "--tag", "latest", "--json")
    first = json.loads(out)
    docker("tag", built["image"]["reference"], f"{theirs}:latest")
    figures["push_docker"], _ = docker("push", "-q", f"{theirs}:latest")
    pub = str(root / "bench.pub")

    empty(node)
    figures["pull_sparkimg"], _ = sparkimg(store, "pull", f"{ours}:latest", "--key", pub, host=node.host)
    empty(node)
    figures["pull_docker"], _ = docker("pull", "-q", f"{theirs}:latest", host=node.host)
    theirs_first = blobs(theirs, "latest")
    # The node keeps docker's copy; sparkimg's first image goes back on it for the patch-only pull.
    sparkimg(store, "pull", f"{ours}:latest", "--key", pub, host=node.host)

    patch = spec.parents[1] / "patches" / "demo" / "serve.env"
    patch.write_text(patch.read_text() + f"BENCH={uuid.uuid4().hex}\n")
    sparkimg(store, "patches", "pin", str(patch.parent))
    sparkimg(store, "lock", str(spec))
    rebuilt = json.loads(sparkimg(store, "build", str(spec), "--quiet", "--json", "--key",
                                  str(root / "bench.key"))[1])
    figures["patch_push_sparkimg"], out = sparkimg(store, "push", str(spec), "--to", ours, "--tag", "latest",
                                                   "--json")
    second = json.loads(out)
    figures["patch_sent_sparkimg"] = float(second["sent_bytes"])
    figures["patch_moved_sparkimg"] = float(moved(ours, first["manifest"], second["manifest"]))
    docker("tag", rebuilt["image"]["reference"], f"{theirs}:latest")
    figures["patch_push_docker"], _ = docker("push", "-q", f"{theirs}:latest")
    figures["patch_moved_docker"] = float(sum(size for digest, size in blobs(theirs, "latest").items()
                                              if digest not in theirs_first))
    figures["patch_pull_sparkimg"], _ = sparkimg(store, "pull", f"{ours}:latest", "--key", pub, host=node.host)
    figures["patch_pull_docker"], _ = docker("pull", "-q", f"{theirs}:latest", host=node.host)
    figures["image_bytes"] = float(sum(blobs(ours, first["manifest"]).values()))
    for result in (built, rebuilt):
        subprocess.run(["docker", "rmi", "-f", result["image"]["reference"]], capture_output=True, check=False)
    # docker's first copy stays under its repository (untagged, by repo digest) after the tag moved:
    # remove every image of this run's own repository, by ID.
    listed = subprocess.run(["docker", "images", "-q", "--filter", f"reference={theirs}"],
                            capture_output=True, text=True, check=False).stdout.split()
    subprocess.run(["docker", "rmi", "-f", *dict.fromkeys(listed)], capture_output=True, check=False)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from tests.integration.nodes import nodes

    with tempfile.TemporaryDirectory(prefix="sparkimg-bench.") as tmp, nodes(1, Path(tmp) / "daemons") as started:
        runs = [one_run(Path(tmp), started[0]) for _ in range(args.runs)]
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    print(f"demo image ({median['image_bytes'] / 1e6:.1f} MB compressed), loopback registry, "
          f"median of {args.runs} run(s); seconds, ratio to docker's")
    for what, ours, theirs in (("first push (fresh repository)", "push_sparkimg", "push_docker"),
                               ("cold pull into a node", "pull_sparkimg", "pull_docker"),
                               ("patch-only push", "patch_push_sparkimg", "patch_push_docker"),
                               ("patch-only pull", "patch_pull_sparkimg", "patch_pull_docker")):
        print(f"  {what:32} sparkimg {median[ours]:6.2f}   docker {median[theirs]:6.2f}   "
              f"ratio {median[ours] / median[theirs]:.2f}")
    print(f"  patch-only bytes moved           sparkimg {median['patch_moved_sparkimg']:8.0f} "
          f"(sent {median['patch_sent_sparkimg']:.0f})   docker {median['patch_moved_docker']:8.0f}   "
          f"ratio {median['patch_moved_sparkimg'] / max(median['patch_moved_docker'], 1):.2f}")


if __name__ == "__main__":
    main()
