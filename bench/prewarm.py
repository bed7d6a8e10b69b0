"""Prewarm against FlashInfer's lazy JIT, and the cost of verifying the result, in one run.

Baseline: a fresh Python imports FlashInfer and builds each module of the demo kernel set
on first use, one after another, as a serving process does on its first requests
(``build_and_load`` per module, FlashInfer's own defaults). Then ``sparkimg prewarm
--runner host`` compiles the same set into another fresh cache, modules in parallel
within the job budget. Then ``--verify`` (full) and ``--verify --quick`` on that cache,
median of --runs, each as the whole command a start-up check would run. Both compiles
include one interpreter start and FlashInfer import. Needs the FlashInfer environment:
``eval "$(bash scripts/flashinfer-env)"; python bench/prewarm.py``.
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "layers" / "demo.yaml"


def lazy_script(modules: list[dict[str, object]]) -> str:
    """One process that builds each module on first use, as serving would."""
    return (
        "import importlib, json, sys\n"
        f"for m in json.loads({json.dumps(json.dumps(modules))}):\n"
        "    path, _, fn = m['generator'].rpartition('.')\n"
        "    getattr(importlib.import_module(path), fn)(*m['args'], **m['kwargs']).build_and_load()\n")


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=env)
    return time.perf_counter() - started


def verify_times(command: list[str], runs: int) -> tuple[float, float]:
    """Median (whole command, the checks alone as the report times them) over ``runs``."""
    wall, inner = [], []
    for _ in range(runs):
        started = time.perf_counter()
        out = subprocess.run([*command, "--json"], check=True, capture_output=True, text=True).stdout
        wall.append(time.perf_counter() - started)
        inner.append(json.loads(out)["seconds"])
    return statistics.median(wall), statistics.median(inner)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=os.environ.get("SPARKIMG_FLASHINFER_PYTHON"),
                        help="the FlashInfer environment's interpreter (default: $SPARKIMG_FLASHINFER_PYTHON)")
    parser.add_argument("--runs", type=int, default=5, help="verify runs (the compiles run once each)")
    args = parser.parse_args()
    if not args.python:
        sys.exit("no FlashInfer environment: eval \"$(bash scripts/flashinfer-env)\" first, or pass --python")
    from sparkimg.prewarm.targets import target_of_spec
    from sparkimg.spec import load_spec

    target = target_of_spec(load_spec(SPEC))
    modules = [m.to_json() for m in target.kernels.modules]
    key = Path(tempfile.mkdtemp(prefix="sparkimg-bench-key.")) / "bench"
    sparkimg = [sys.executable, "-m", "sparkimg.cli"]
    subprocess.run([*sparkimg, "keygen", "--out", str(key)], check=True, capture_output=True)
    cuda = target.toolchain.get("path") or "/usr/local/cuda"
    with tempfile.TemporaryDirectory(prefix="sparkimg-bench-prewarm.") as tmp:
        lazy_ws, cache = Path(tmp) / "lazy", Path(tmp) / "cache"
        env = {**os.environ, "FLASHINFER_WORKSPACE_BASE": str(lazy_ws), "FLASHINFER_CUDA_ARCH_LIST": target.arch_list,
               "CUDA_HOME": cuda}
        lazy = timed([args.python, "-c", lazy_script(modules)], env)
        base = [*sparkimg, "prewarm", "--spec", str(SPEC), "--runner", "host", "--python", args.python,
                "--cache", str(cache)]
        started = time.perf_counter()
        run = subprocess.run([*base, "--key", f"{key}.key", "--json", "--quiet"], check=True, capture_output=True,
                             text=True, env=dict(os.environ))
        prewarm = time.perf_counter() - started
        result = json.loads(run.stdout)
        verify = verify_times([*base, "--verify", "--key", f"{key}.pub"], args.runs)
        quick = verify_times([*base, "--verify", "--quick", "--key", f"{key}.pub"], args.runs)
        size = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    names = ", ".join(m["name"] for m in result["modules"])
    print(f"demo kernel set: {len(modules)} modules ({names}), {target.arch_list}, {os.cpu_count()} CPUs, "
          f"cache {size / 2**20:.1f} MiB")
    print(f"  lazy JIT, one module at a time (baseline)   {lazy:6.1f} s")
    print(f"  sparkimg prewarm ({result['workers']} at once, {result['jobs_per_module']} job each)     "
          f"{prewarm:6.1f} s   {lazy / prewarm:.2f}x faster")
    for label, (wall, inner) in (("--verify", verify), ("--verify --quick", quick)):
        print(f"  prewarm {label:17s} (median of {args.runs})   {wall:6.2f} s command, {inner * 1000:6.1f} ms checks")


if __name__ == "__main__":
    main()
