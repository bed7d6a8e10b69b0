"""Rebuild benchmark: sparkimg's no-op and patch-only rebuilds against baselines from the same run.

Prints, for the demo spec (scripts/dev-up must have run):
  - no-op `sparkimg build` vs `docker build` of the same generated Dockerfile, warm cache (each the
    median of five invocations, as a user runs them: the console script, the docker client);
  - patch-only `sparkimg build` vs the cold build (empty store, no image), and the same with the
    `patches pin` and `lock` a user runs first;
and the start-up cost of the CLI (`sparkimg --version`, median of several runs).
The sub-second figures are each the median of five in a run (five patch-only rebuilds: five new
patches), and each figure printed is the median over --runs runs. Three gates print PASS or FAIL, and the
script exits 1 when one fails: `sparkimg --version` within 0.15 s, the no-op rebuild at most
1.0x the warm docker build, the patch-only rebuild at most 0.1x the cold build.
Usage: python bench/rebuild.py [--runs 3] [--startup-only]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STARTUP_LIMIT = 0.15  # seconds for `sparkimg --version`
NOOP_RATIO_LIMIT = 1.0  # no-op rebuild / warm docker build
PATCH_RATIO_LIMIT = 0.1  # patch-only rebuild / cold build (one small layer is written and loaded)
STARTUP_RUNS = 7
# This checkout's sparkimg, here and in children, not whatever the venv has installed (an
# editable install may point at another worktree).
sys.path.insert(0, str(REPO))
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}


REPEAT = 5  # timed repetitions of the sub-second figures (no-op, warm docker build, patch-only); the median counts


def command_line() -> list[str]:
    """How a user runs sparkimg: the venv's console script when there is one."""
    script = Path(sys.executable).with_name("sparkimg")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "sparkimg.cli"]


def sparkimg(store: Path, *args: str) -> float:
    started = time.perf_counter()
    subprocess.run([*command_line(), "--store", str(store), *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - started


def median_of(run: Callable[[], float], times: int = REPEAT) -> float:
    return statistics.median(run() for _ in range(times))


def startup() -> tuple[str, float]:
    """Median wall time of `sparkimg --version`: the venv's console script when there is one."""
    command = [*command_line(), "--version"]
    shown = "sparkimg --version" if len(command) == 2 else "python -m sparkimg.cli --version"
    times = []
    for _ in range(STARTUP_RUNS):
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=ENV)
        times.append(time.perf_counter() - started)
    return shown, statistics.median(times)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def copy_demo(into: Path) -> Path:
    for part in ("layers/demo.yaml", "layers/demo.recipe.yaml", "build/demo-kernel", "patches/demo",
                 "patches/demo-runtime"):
        source, target = REPO / part, into / part
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copyfile)(source, target)
    spec = into / "layers" / "demo.yaml"
    spec.write_text(spec.read_text().replace("image: sparkimg/demo", f"image: sparkimg-bench/{uuid.uuid4().hex[:8]}"))
    return spec


def docker_build_warm(spec_path: Path, store_root: Path, work: Path) -> float:
    """Time `docker build` of the generated Dockerfile and context, after one warm-up build."""
    from sparkimg.engine.connect import connect as connect_engine
    from sparkimg.fetch.inputs import base_tag
    from sparkimg.image.assemble import labels
    from sparkimg.image.build import compile_records
    from sparkimg.image.dockerfile import write_context
    from sparkimg.lock import resolve as lock_mod
    from sparkimg.plan.keys import compute
    from sparkimg.spec import load_spec
    from sparkimg.store.content import Store

    spec = load_spec(spec_path)
    lock = lock_mod.load_lock(spec)
    store = Store(store_root)
    engine = connect_engine()
    plan = compute(spec, lock, store)
    records = compile_records(plan, store)
    context = work / "context"
    write_context(plan, base_tag(spec, lock), records, store, context)
    command = [engine.client] + (["buildx", "build", "--load"] if engine.builder == "buildx" else ["build"])
    command += ["--network", "none", "-q", "-t", f"{spec.image}:docker-baseline", "--build-arg",
                f"SOURCE_DATE_EPOCH={lock.source_date_epoch}"]
    for key, value in labels(plan).items():
        command += ["--label", f"{key}={value}"]
    command.append(str(context))
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)  # warm the cache

    def once() -> float:
        started = time.perf_counter()
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
        return time.perf_counter() - started
    return median_of(once)


def one_run() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="sparkimg-bench.") as tmp:
        root = Path(tmp)
        spec, store = copy_demo(root), root / "store"
        sparkimg(store, "lock", str(spec))
        cold = sparkimg(store, "build", str(spec), "--quiet")
        time.sleep(1.1)  # files written less than a second before a build are not stamped
        sparkimg(store, "build", str(spec), "--quiet")  # the first no-op, as docker gets a warm-up build
        noop = median_of(lambda: sparkimg(store, "build", str(spec), "--quiet"))
        docker_warm = docker_build_warm(spec, store, root)
        patch = root / "patches" / "demo" / "serve.env"
        pin_lock, patch_build = [], []
        for _ in range(REPEAT):  # each a new patch: pinned, locked, built
            patch.write_text(patch.read_text() + f"BENCH={uuid.uuid4().hex}\n")
            pin_lock.append(sparkimg(store, "patches", "pin", str(patch.parent)) + sparkimg(store, "lock", str(spec)))
            patch_build.append(sparkimg(store, "build", str(spec), "--quiet"))
        return {"cold": cold, "noop": noop, "docker_warm": docker_warm, "patch_build": statistics.median(patch_build),
                "patch_pin_lock": statistics.median(pin_lock)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--startup-only", action="store_true",
                        help="time `sparkimg --version` only (needs no engine or demo base image)")
    args = parser.parse_args()
    gates: list[bool] = []
    command, took = startup()
    gates.append(took <= STARTUP_LIMIT)
    print(f"start-up: `{command}`, median of {STARTUP_RUNS} runs   {took:7.3f} s"
          f"   {verdict(gates[-1])} (limit {STARTUP_LIMIT:.2f} s)")
    if not args.startup_only:
        runs = [one_run() for _ in range(args.runs)]
        median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        ratio = median["noop"] / median["docker_warm"]
        gates.append(ratio <= NOOP_RATIO_LIMIT)
        print(f"demo spec, median of {args.runs} runs (seconds)")
        print(f"  cold build (empty store, no image)          {median['cold']:7.2f}")
        print(f"  docker build, same Dockerfile, warm cache   {median['docker_warm']:7.2f}")
        print(f"  sparkimg no-op rebuild                       {median['noop']:7.2f}"
              f"   ratio to warm docker build: {ratio:.2f}   {verdict(gates[-1])} (limit {NOOP_RATIO_LIMIT:.1f}x)")
        patch_ratio = median["patch_build"] / median["cold"]
        gates.append(patch_ratio <= PATCH_RATIO_LIMIT)
        print(f"  sparkimg patch-only rebuild (build)          {median['patch_build']:7.2f}"
              f"   ratio to cold build: {patch_ratio:.2f}   {verdict(gates[-1])} (limit {PATCH_RATIO_LIMIT:.1f}x)")
        flow = median["patch_build"] + median["patch_pin_lock"]
        print(f"  the same with `patches pin` + `lock` first   {flow:7.2f}   ratio to cold build: "
              f"{flow / median['cold']:.2f}")
        subprocess.run("docker images --format '{{.Repository}}:{{.Tag}}' | grep '^sparkimg-bench/' | "
                       "xargs -r docker rmi -f >/dev/null 2>&1", shell=True, check=False)
    sys.exit(0 if all(gates) else 1)


if __name__ == "__main__":
    main()
