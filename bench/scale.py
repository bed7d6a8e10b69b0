"""Scale benchmark: a real gigabyte wheel layer, `sparkimg build` against `docker build` of the
equivalent Dockerfile, measured in the same run (issue 22).

The layer is NVIDIA's cuBLAS wheel from PyPI (nvidia-cublas-cu12 12.9.3.13: 581 MB, 1.7 GB
installed, one of the nvidia-* wheels torch pulls into every vLLM image and the largest single
file of them after cuDNN). It is downloaded once into --cache (not part of CI; CI's
tests/integration/test_scale.py runs the same paths with a generated 200 MB wheel).

For each run (scripts/dev-up must have run):
  - cold `sparkimg build` of base + cublas + one baked patch set: a fresh store seeded with the
    wheel (both tools start from the wheel on local disk), the image absent from the engine;
  - cold `docker build` (BuildKit, build cache pruned): COPY the wheel, `pip install --no-deps`
    with --network none, COPY the patch file;
  - a patch-only rebuild with sparkimg (one patch file changed), with the large blob's inode and
    mtime checked unchanged;
  - `sparkimg push` of the fresh build to the loopback registry, then of the patch-only change,
    bytes counted by the client's report; the fresh build pushed again with `--compression zstd`
    and with `--compression gzip` (every core), each into a repository of its own.
Prints medians, peak RSS of each sparkimg command, and ratios to docker's figure; asserts nothing
about times. Usage: python bench/scale.py [--runs 1] [--cache ~/.cache/sparkimg-bench]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
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
BASE = "127.0.0.1:5000/sparkimg/demo-base:bookworm"
REGISTRY = "127.0.0.1:5000"
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
# The wheel, pinned: its name per machine architecture and its sha256 (from PyPI's simple index).
PACKAGE, VERSION = "nvidia-cublas-cu12", "12.9.3.13"
WHEELS = {
    "x86_64": ("nvidia_cublas_cu12-12.9.3.13-py3-none-manylinux_2_27_x86_64.whl",
               "d7d51055f161b317c7105ddaae90e71eda059026074ffef93cf7cde2886bfe72"),
}


def command_line() -> list[str]:
    script = Path(sys.executable).with_name("sparkimg")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "sparkimg.cli"]


def run(command: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """(seconds, peak RSS in KiB of the command, stdout); raises with its stderr on failure."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env or ENV)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        text = out.read().decode()
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{err.read().decode()[-4000:]}")
    return elapsed, usage.ru_maxrss, text


def sparkimg(store: Path, *args: str) -> tuple[float, int, dict[str, Any]]:
    quiet = ["--quiet"] if args[0] == "build" else []
    elapsed, rss, out = run([*command_line(), "--store", str(store), *args, "--json", *quiet])
    return elapsed, rss, json.loads(out)


def docker(*args: str, env: dict[str, str] | None = None) -> float:
    return run([DOCKER, *args], env={**os.environ, **(env or {})})[0]


def wheel(cache: Path) -> tuple[Path, str]:
    arch = platform.machine()
    if arch not in WHEELS:
        raise SystemExit(f"no pinned {PACKAGE} wheel for {arch}: add its filename and sha256 to WHEELS")
    filename, sha256 = WHEELS[arch]
    path = cache / filename
    if not path.is_file() or _sha256(path) != sha256:
        cache.mkdir(parents=True, exist_ok=True)
        print(f"downloading {filename} into {cache} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                        "--platform", filename.rsplit("-", 1)[1].removesuffix(".whl"), "-d", str(cache),
                        f"{PACKAGE}=={VERSION}"], check=True, capture_output=True)
        if _sha256(path) != sha256:
            raise SystemExit(f"{path}: sha256 differs from the pinned {sha256}")
    return path, sha256


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


SPEC = """\
schema: sparkimg/v1
name: {name}
image: sparkimg-bench/{name}
platform: native
cuda_architectures: ["12.1a"]
base:
  image: {base}
sources:
  cublas:
    pypi: {package}
    version: "{version}"
    sha256: {sha256}
layers:
  - name: cublas
    kind: wheel
    source: cublas
patches:
  - name: tweak
    dir: patches/tweak
    mode: bake
"""

DOCKERFILE = """\
FROM {base}
COPY {wheel} /tmp/{wheel}
RUN python3 -m pip install --no-deps --no-cache-dir --break-system-packages --no-compile /tmp/{wheel} \\
 && rm /tmp/{wheel}
COPY tweak.conf /etc/sparkimg-bench/tweak.conf
"""


def _patch(project: Path, text: str) -> None:
    folder = project / "patches" / "tweak"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tweak.conf").write_text(text)
    (folder / "mounts.txt").write_text("tweak.conf /etc/sparkimg-bench/tweak.conf\n")
    run([*command_line(), "--store", str(project / "pin-store"), "patches", "pin", str(folder)])


def one_run(work: Path, wheel_path: Path, sha256: str) -> dict[str, float]:
    from sparkimg.store.content import Store

    name = f"scale-{uuid.uuid4().hex[:8]}"
    project = work / name
    project.mkdir(parents=True)
    _patch(project, "one\n")
    spec = project / "spec.yaml"
    spec.write_text(SPEC.format(name=name, base=BASE, package=PACKAGE, version=VERSION, sha256=sha256))
    store = work / f"{name}-store"
    run([*command_line(), "--store", str(store), "lock", str(spec)])
    Store(store).put_file(wheel_path, expected=sha256)  # the input on local disk, as for docker
    figures: dict[str, float] = {}

    figures["sparkimg build"], rss, built = sparkimg(store, "build", str(spec))
    figures["sparkimg build peak RSS MiB"] = rss / 1024
    reference = built["image"]["reference"]
    # The new layers are stored uncompressed (digest = diff_id): the largest is the wheel's.
    blob = max((store / "blobs" / "sha256" / d.split(":")[1] for d in built["oci"]["diff_ids"]),
               key=lambda path: path.stat().st_size)
    figures["layer bytes MB"] = blob.stat().st_size / 1e6
    before = (blob.stat().st_ino, blob.stat().st_mtime_ns)
    figures["gzip-6 1 thread of the layer s (est.)"] = _gzip_seconds(blob)

    context = work / f"{name}-context"
    context.mkdir()
    os.link(wheel_path, context / wheel_path.name) if wheel_path.stat().st_dev == context.stat().st_dev \
        else shutil.copy(wheel_path, context / wheel_path.name)
    (context / "tweak.conf").write_text("one\n")
    (context / "Dockerfile").write_text(DOCKERFILE.format(base=BASE, wheel=wheel_path.name))
    subprocess.run([DOCKER, "builder", "prune", "-af"], capture_output=True, check=False)
    figures["docker build"] = docker("build", "--network", "none", "--no-cache", "-q", "-t", f"{name}-docker",
                                     str(context), env={"DOCKER_BUILDKIT": "1"})

    _patch(project, "two\n")
    run([*command_line(), "--store", str(store), "lock", str(spec)])
    figures["sparkimg patch-only rebuild"], rss, rebuilt = sparkimg(store, "build", str(spec))
    figures["patch-only rebuild peak RSS MiB"] = rss / 1024
    after = (blob.stat().st_ino, blob.stat().st_mtime_ns)
    figures["large layer rewritten (0 = no)"] = float(before != after or not _cached(rebuilt, "cublas"))

    repository = f"{REGISTRY}/sparkimg-bench/{name}"
    _patch(project, "one\n")
    run([*command_line(), "--store", str(store), "lock", str(spec)])
    sparkimg(store, "build", str(spec))
    figures["sparkimg push (fresh)"], rss, pushed = sparkimg(store, "push", str(spec), "--to", repository)
    figures["push peak RSS MiB"] = rss / 1024
    figures["push bytes MB (fresh)"] = _sent(pushed) / 1e6
    for method in ("zstd", "gzip"):  # compressed on the way out, each into a repository of its own
        elapsed, rss, packed = sparkimg(store, "push", str(spec), "--to", f"{repository}-{method}",
                                        "--compression", method)
        figures[f"sparkimg push --compression {method}"] = elapsed
        figures[f"push {method} peak RSS MiB"] = rss / 1024
        figures[f"push bytes MB ({method})"] = _sent(packed) / 1e6
    _patch(project, "two\n")
    run([*command_line(), "--store", str(store), "lock", str(spec)])
    sparkimg(store, "build", str(spec))
    figures["sparkimg push (patch-only)"], _, again = sparkimg(store, "push", str(spec), "--to", repository)
    figures["push bytes MB (patch-only)"] = _sent(again) / 1e6

    for image in (reference, f"{name}-docker", rebuilt["image"]["reference"]):
        subprocess.run([DOCKER, "rmi", "-f", image], capture_output=True, check=False)
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(context, ignore_errors=True)
    return figures


def _gzip_seconds(blob: Path, sample: int = 128 << 20) -> float:
    """What a single-thread zlib level 6 (what sparkimg did before, and what `docker push` does)
    takes for the whole layer: timed over its first ``sample`` bytes and scaled by size."""
    import zlib

    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    done = 0
    started = time.perf_counter()
    with blob.open("rb") as handle:
        while done < sample and (chunk := handle.read(1 << 20)):
            compressor.compress(chunk)
            done += len(chunk)
    compressor.flush()
    return (time.perf_counter() - started) * blob.stat().st_size / max(done, 1)


def _cached(result: dict[str, Any], name: str) -> bool:
    return any(layer["name"] == name and layer["cached"] for layer in result["layers"])


def _sent(pushed: dict[str, Any]) -> int:
    return int(pushed["sent_bytes"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "sparkimg-bench")
    parser.add_argument("--work", type=Path, default=None, help="a folder on the disk to measure (default: a temp)")
    options = parser.parse_args()
    wheel_path, sha256 = wheel(options.cache.expanduser())
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(dir=options.work) as work:
        for number in range(options.runs):
            runs.append(one_run(Path(work), wheel_path, sha256))
            print(f"run {number + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in runs[-1].items()), flush=True)
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    docker_s = median["docker build"]
    print(f"\n{PACKAGE} {VERSION} ({wheel_path.stat().st_size / 1e6:.0f} MB wheel, "
          f"{median['layer bytes MB']:.0f} MB layer), {options.runs} run(s), {os.cpu_count()} cores")
    for key, value in median.items():
        timed = key.startswith("sparkimg") and "RSS" not in key
        ratio = f"  {value / docker_s:.2f}x docker build" if timed else ""
        print(f"  {key:34} {value:9.1f}{ratio}")
    patch_ratio = median["sparkimg patch-only rebuild"] / median["sparkimg build"]
    print(f"  patch-only / cold sparkimg build    {patch_ratio:.3f}")
    gzip_one = median["gzip-6 1 thread of the layer s (est.)"]
    for push in ("sparkimg push (fresh)", "sparkimg push --compression zstd", "sparkimg push --compression gzip"):
        print(f"  gzip-6 on 1 thread / {push:32} {gzip_one / median[push]:.1f}x faster")


if __name__ == "__main__":
    main()
