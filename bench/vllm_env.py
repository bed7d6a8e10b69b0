"""The real vLLM environment at the size users build it (issue 34): layers/vllm-env.yaml (torch
2.14.0, its CUDA 13 wheels and vLLM 0.34.0, one wheel layer each, on the demo base), `sparkimg
build` against `docker build` of the same wheel files, measured in the same run.

The wheels are scripts/vllm-build-requirements.txt's, downloaded once into --cache by pip in
hash-checking mode (about 3.5 GB; not part of CI). For each run (scripts/dev-up must have run):
  - cold `sparkimg build`: a fresh store seeded with the wheels (both tools start from the wheels
    on local disk), the spec copied under a new image name, locked, built; the image absent;
  - the same build again: a no-op;
  - cold `docker build` (BuildKit, build cache pruned, --network none): the wheels bind-mounted,
    `pip install --no-deps` of the dependencies in one RUN and of vLLM in a second.
Prints medians and the ratio to docker's figure; asserts nothing about times.
Usage: python bench/vllm_env.py [--runs 1] [--cache ~/.cache/sparkimg-bench/vllm-env] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from scale import BASE, DOCKER, REPO, _sha256, command_line, docker, run, sparkimg  # bench/scale.py

from sparkimg._internal.wheeltags import platform_tags

SPEC = REPO / "layers" / "vllm-env.yaml"
REQUIREMENTS = REPO / "scripts" / "vllm-build-requirements.txt"
PYTHON = "3.11"  # the demo base's CPython (Debian 12), which the requirements file pins wheels for
GLIBC = "2.36"

DOCKERFILE = """\
FROM {base}
RUN --mount=type=bind,source=.,target=/wheels python3 -m pip install --no-deps --no-index --no-cache-dir \\
    --break-system-packages --no-compile {deps}
RUN --mount=type=bind,source=.,target=/wheels python3 -m pip install --no-deps --no-index --no-cache-dir \\
    --break-system-packages --no-compile /wheels/{vllm}
"""


def wheels(cache: Path) -> dict[str, Path]:
    """sha256 -> the wheel file, every one the requirements file pins, downloaded once."""
    pins = re.findall(r"--hash=sha256:([0-9a-f]{64})", REQUIREMENTS.read_text())
    found = {_sha256(p): p for p in cache.glob("*.whl")} if cache.is_dir() else {}
    if not set(pins) <= set(found):
        cache.mkdir(parents=True, exist_ok=True)
        print(f"downloading the {len(pins)} wheels of {REQUIREMENTS.name} into {cache} (once)", flush=True)
        platforms = [a for tag in platform_tags("linux/amd64", GLIBC) for a in ("--platform", tag)]
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                        "--require-hashes", "--python-version", PYTHON, "--implementation", "cp", *platforms,
                        "-d", str(cache), "-r", str(REQUIREMENTS)], check=True, capture_output=True)
        found = {_sha256(p): p for p in cache.glob("*.whl")}
    missing = set(pins) - set(found)
    if missing:
        raise SystemExit(f"{cache}: no wheel with sha256 {sorted(missing)[0]}")
    return {sha: found[sha] for sha in pins}


def one_run(work: Path, files: dict[str, Path]) -> dict[str, float]:
    from sparkimg.store.content import Store

    name = f"vllm-env-{uuid.uuid4().hex[:8]}"
    project = work / name
    (project / "layers").mkdir(parents=True)
    spec = project / "layers" / "vllm-env.yaml"
    spec.write_text(SPEC.read_text().replace("image: sparkimg/vllm-env", f"image: sparkimg-bench/{name}"))
    store = work / f"{name}-store"
    run([*command_line(), "--store", str(store), "lock", str(spec)])
    seeded = Store(store)
    for sha256, path in files.items():
        seeded.put_file(path, expected=sha256)  # the inputs on local disk, as for docker
    figures: dict[str, float] = {}
    figures["sparkimg build"], rss, built = sparkimg(store, "build", str(spec))
    figures["sparkimg build peak RSS MiB"] = rss / 1024
    figures["new layers GB"] = sum(
        (store / "blobs" / "sha256" / d.split(":")[1]).stat().st_size for d in built["oci"]["diff_ids"]) / 1e9
    figures["wheel layers"] = float(sum(layer["kind"] == "wheel" for layer in built["layers"]))
    figures["sparkimg no-op build"], _, again = sparkimg(store, "build", str(spec))
    assert again["oci"] == built["oci"], "a no-op build must give the same image"

    context = work / f"{name}-context"
    context.mkdir()
    for path in files.values():
        os.link(path, context / path.name) if path.stat().st_dev == context.stat().st_dev \
            else shutil.copy(path, context / path.name)
    vllm = next(p.name for p in files.values() if p.name.startswith("vllm-"))
    deps = " ".join(f"/wheels/{p.name}" for p in files.values() if p.name != vllm)
    (context / "Dockerfile").write_text(DOCKERFILE.format(base=BASE, deps=deps, vllm=vllm))
    subprocess.run([DOCKER, "builder", "prune", "-af"], capture_output=True, check=False)
    figures["docker build"] = docker("build", "--network", "none", "--no-cache", "-q", "-t", f"{name}-docker",
                                     str(context), env={"DOCKER_BUILDKIT": "1"})
    for image in (built["image"]["reference"], f"{name}-docker"):
        subprocess.run([DOCKER, "rmi", "-f", image], capture_output=True, check=False)
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(context, ignore_errors=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "sparkimg-bench" / "vllm-env")
    parser.add_argument("--work", type=Path, default=None, help="a folder on the disk to measure (default: a temp)")
    options = parser.parse_args()
    files = wheels(options.cache.expanduser())
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(dir=options.work) as work:
        for number in range(options.runs):
            runs.append(one_run(Path(work), files))
            print(f"run {number + 1}: " + json.dumps({k: round(v, 2) for k, v in runs[-1].items()}), flush=True)
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    docker_s = median["docker build"]
    size = sum(p.stat().st_size for p in files.values()) / 1e9
    print(f"\n{SPEC.name}: {len(files)} wheels ({size:.1f} GB), {options.runs} run(s), {os.cpu_count()} cores")
    for key, value in median.items():
        timed = key.startswith("sparkimg") and "RSS" not in key
        ratio = f"  {value / docker_s:.2f}x docker build" if timed else ""
        print(f"  {key:30} {value:9.2f}{ratio}")


if __name__ == "__main__":
    main()
