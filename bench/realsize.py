"""The real vLLM environment's nightly cycle at the size users build it (issue 36):
layers/vllm-env.yaml (torch 2.14.0, its CUDA 13 wheels and vLLM 0.34.0, one wheel layer each, on
the demo base, about 6 GB installed) built by sparkimg against `docker build` of the same wheel
files, every step measured in the same run:

  - cold: a fresh store seeded with the wheels (both tools start from the wheels on local disk),
    the spec copied under a new image name, locked, built, the image absent; against a cold
    `docker build` (BuildKit, build cache pruned, --network none, the wheels bind-mounted,
    `pip install --no-deps` of the dependencies in one RUN and of vLLM in a second);
  - no-op: the same build again; against the same `docker build` again (warm);
  - one wheel moved: vLLM 0.34.0 -> 0.33.0 (the commonest night), locked again from the old lock
    and built; against `docker build` of the Dockerfile naming the other vLLM wheel (its first
    RUN cached);
  - push: `sparkimg push --compression zstd` of the moved image to the loopback registry, against
    `docker push` of docker's image (both to an empty repository).

The wheels are scripts/vllm-build-requirements.txt's and vLLM 0.33.0's (``MOVED``), downloaded
once into --cache by pip in hash-checking mode (about 3.5 GB; not part of CI); scripts/dev-up
must have run. Prints medians and each step's ratio to docker's; asserts nothing about times.
Usage: python bench/realsize.py [--runs 1] [--cache ~/.cache/sparkimg-bench/vllm-env] [--work DIR]
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

from scale import BASE, DOCKER, REGISTRY, REPO, _sha256, command_line, docker, run, sparkimg  # bench/scale.py

from sparkimg._internal.wheeltags import platform_tags

SPEC = REPO / "layers" / "vllm-env.yaml"
REQUIREMENTS = REPO / "scripts" / "vllm-build-requirements.txt"
PYTHON = "3.11"  # the demo base's CPython (Debian 12), which the requirements file pins wheels for
GLIBC = "2.36"

# A Dockerfile as a careful writer would keep it: the dependencies and vLLM in folders of their
# own, so a new vLLM wheel leaves the first RUN's bind mount, and so its cache, unchanged.
DOCKERFILE = """\
FROM {base}
RUN --mount=type=bind,source=deps,target=/wheels python3 -m pip install --no-deps --no-index --no-cache-dir \\
    --break-system-packages --no-compile {deps}
RUN --mount=type=bind,source=top,target=/wheels python3 -m pip install --no-deps --no-index --no-cache-dir \\
    --break-system-packages --no-compile /wheels/{vllm}
"""
# The wheel that moves: vLLM one release back (its file, pinned by sha256 like every input).
MOVED = ("0.33.0", "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl",
         "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa")


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


def moved_wheel(cache: Path) -> Path:
    """vLLM 0.33.0's wheel, downloaded once and checked against ``MOVED``."""
    version, filename, sha256 = MOVED
    path = cache / filename
    if not path.is_file() or _sha256(path) != sha256:
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                        "--python-version", PYTHON, "--implementation", "cp", "--platform",
                        filename.rsplit("-", 1)[1].removesuffix(".whl"), "-d", str(cache), f"vllm=={version}"],
                        check=True, capture_output=True)
        if _sha256(path) != sha256:
            raise SystemExit(f"{path}: sha256 differs from the pinned {sha256}")
    return path


def _move(spec: Path) -> None:
    """The spec's vLLM pin moved to ``MOVED``."""
    version, _, sha256 = MOVED
    text = spec.read_text()
    moved = re.sub(r'(  vllm:\n    pypi: vllm\n    version: )"[^"]+"\n    sha256: [0-9a-f]{64}',
                   rf'\1"{version}"\n    sha256: {sha256}', text)
    assert moved != text, "the spec's vllm source is not where the bench looks for it"
    spec.write_text(moved)


def _context(context: Path, files: dict[str, Path], vllm: Path) -> None:
    """docker's build context: the dependencies in deps/, the vLLM wheel alone in top/."""
    shutil.rmtree(context, ignore_errors=True)
    for folder in ("deps", "top"):
        (context / folder).mkdir(parents=True)
    deps = [p for p in files.values() if not p.name.startswith("vllm-")]
    for path in [*deps, vllm]:
        target = context / ("top" if path == vllm else "deps") / path.name
        os.link(path, target) if path.stat().st_dev == context.stat().st_dev else shutil.copy(path, target)
    (context / "Dockerfile").write_text(DOCKERFILE.format(
        base=BASE, deps=" ".join(f"/wheels/{p.name}" for p in deps), vllm=vllm.name))


def _steps(which: str, built: dict[str, object]) -> dict[str, float]:
    """Where a build's time went, from its ``--json`` steps (a layer's writing is inside "assemble")."""
    totals: dict[str, float] = {}
    for step in built.get("steps") or []:  # type: ignore[attr-defined]
        if step["step"] != "assemble" or step["layer"] is None:
            totals[f"{which}: {step['step']} s"] = totals.get(f"{which}: {step['step']} s", 0.0) + step["wall_s"]
    return totals


def one_run(work: Path, files: dict[str, Path], moved: Path) -> dict[str, float]:
    from sparkimg.store.content import Store

    name = f"vllm-env-{uuid.uuid4().hex[:8]}"
    project = work / name
    (project / "layers").mkdir(parents=True)
    spec = project / "layers" / "vllm-env.yaml"
    spec.write_text(SPEC.read_text().replace("image: sparkimg/vllm-env", f"image: sparkimg-bench/{name}"))
    store = work / f"{name}-store"
    run([*command_line(), "--store", str(store), "lock", str(spec)])
    seeded = Store(store)
    for sha256, path in [*files.items(), (MOVED[2], moved)]:
        seeded.put_file(path, expected=sha256)  # the inputs on local disk, as for docker
    figures: dict[str, float] = {}
    figures["sparkimg cold"], rss, built = sparkimg(store, "build", str(spec))
    figures["sparkimg peak RSS MiB"] = rss / 1024
    figures["new layers GB"] = sum(
        (store / "blobs" / "sha256" / d.split(":")[1]).stat().st_size for d in built["oci"]["diff_ids"]) / 1e9
    figures["wheel layers"] = float(sum(layer["kind"] == "wheel" for layer in built["layers"]))
    figures.update(_steps("cold", built))
    figures["sparkimg no-op"], _, again = sparkimg(store, "build", str(spec))
    assert again["oci"] == built["oci"], "a no-op build must give the same image"
    _move(spec)
    run([*command_line(), "--store", str(store), "lock", str(spec)])  # from the old lock, as the nightly does
    figures["sparkimg moved"], rss, moved_built = sparkimg(store, "build", str(spec))
    figures["sparkimg peak RSS MiB"] = max(figures["sparkimg peak RSS MiB"], rss / 1024)
    figures.update(_steps("moved", moved_built))
    new = [d for d in moved_built["oci"]["diff_ids"] if d not in built["oci"]["diff_ids"]]
    figures["moved: new layers"] = float(len(new))
    figures["sparkimg push"], _, _ = sparkimg(store, "push", str(spec), "--to", f"{REGISTRY}/bench/{name}",
                                              "--compression", "zstd")

    context = work / f"{name}-context"
    _context(context, files, next(p for p in files.values() if p.name.startswith("vllm-")))
    subprocess.run([DOCKER, "builder", "prune", "-af"], capture_output=True, check=False)
    tag = f"{name}-docker"
    buildkit = {"DOCKER_BUILDKIT": "1"}
    figures["docker cold"] = docker("build", "--network", "none", "-q", "-t", tag, str(context), env=buildkit)
    figures["docker no-op"] = docker("build", "--network", "none", "-q", "-t", tag, str(context), env=buildkit)
    _context(context, files, moved)
    figures["docker moved"] = docker("build", "--network", "none", "-q", "-t", tag, str(context), env=buildkit)
    docker("tag", tag, f"{REGISTRY}/bench/{name}:d")
    figures["docker push"] = docker("push", "-q", f"{REGISTRY}/bench/{name}:d")
    for image in (built["image"]["reference"], moved_built["image"]["reference"], tag, f"{REGISTRY}/bench/{name}:d"):
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
    moved = moved_wheel(options.cache.expanduser() / "moved")
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(dir=options.work) as work:
        for number in range(options.runs):
            runs.append(one_run(Path(work), files, moved))
            print(f"run {number + 1}: " + json.dumps({k: round(v, 2) for k, v in runs[-1].items()}), flush=True)
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    size = sum(p.stat().st_size for p in files.values()) / 1e9
    print(f"\n{SPEC.name}: {len(files)} wheels ({size:.1f} GB), {options.runs} run(s), {os.cpu_count()} cores")
    print(f"  {'step':10} {'sparkimg s':>11} {'docker s':>10} {'ratio':>8}")
    for step in ("cold", "no-op", "moved", "push"):
        ours, theirs = median[f"sparkimg {step}"], median[f"docker {step}"]
        print(f"  {step:10} {ours:11.2f} {theirs:10.2f} {ours / theirs:7.2f}x")
    for key, value in median.items():
        if not key.startswith(("sparkimg ", "docker ")) or "RSS" in key:
            print(f"  {key:30} {value:9.2f}")


if __name__ == "__main__":
    main()
