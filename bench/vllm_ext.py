"""What vLLM's _C_stable_libtorch costs to build for 12.1a: layers/vllm-stable-gb10.yaml built whole
(all 75 objects; CI builds the named subset) or as its CI subset, from an empty store, in the bounded
container sparkimg runs. Prints the layer's wall time, its cgroup's peak memory and the memory bound
and job count it ran under, then time and peak memory per object class (C++, plain CUDA, heavy
CUTLASS, helper) and the ten slowest objects, from the layer record's per-object figures.

Needs scripts/dev-up; makes the vLLM build base (scripts/vllm-build-image, about 6 GB, once) and
unpacks CUTLASS (scripts/vendor-cutlass). The whole target takes about half an hour on two cores.
Usage: python bench/vllm_ext.py [--subset] [--memory 14g]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SPEC = REPO / "layers" / "vllm-stable-gb10.yaml"


def script(name: str) -> str:
    return subprocess.run(["bash", str(REPO / "scripts" / name)], capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]


def object_class(step: dict[str, Any]) -> str:
    name = str(step["object"])
    if not name.endswith(".cu"):
        return "C++"
    if step.get("heavy"):
        return "heavy (CUTLASS GEMM)"
    return "CUDA"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", action="store_true", help="the CI subset, not the whole target")
    parser.add_argument("--memory", help="the layer's memory bound (sparkimg build --memory)")
    args = parser.parse_args()
    base = script("vllm-build-image")
    cutlass = REPO / script("vendor-cutlass")
    with tempfile.TemporaryDirectory(prefix="sparkimg-bench-vllm-", dir="/var/tmp") as folder:
        root = Path(folder)
        text = SPEC.read_text()
        text = re.sub(r"(?m)^  image: 127\.0\.0\.1:5000/sparkimg/vllm-build-base:\S+$", f"  image: {base}", text)
        text = re.sub(r"(?m)^image: sparkimg/(\S+)$", rf"image: sparkimg-bench/\1-{uuid.uuid4().hex[:8]}", text)
        if not args.subset:
            text = text.replace("      --objects /inputs/vllm-ext-build/ci-subset.txt\n", "")
        (root / "layers").mkdir()
        spec = root / "layers" / SPEC.name
        spec.write_text(text)
        shutil.copytree(REPO / "build" / "vllm-ext", root / "build" / "vllm-ext")
        shutil.copytree(REPO / "patches" / "vllm-gb10-archs", root / "patches" / "vllm-gb10-archs")
        shutil.copytree(cutlass, root / "build" / "vendor" / cutlass.name)
        store = root / "store"
        cli = [sys.executable, "-m", "sparkimg.cli", "--store", str(store)]
        subprocess.run([*cli, "lock", str(spec)], check=True, capture_output=True, cwd=REPO)
        started = time.monotonic()
        build = subprocess.run([*cli, "build", str(spec), "--json", "--quiet",
                                *(["--memory", args.memory] if args.memory else [])],
                               capture_output=True, text=True, check=False, cwd=REPO)
        total = time.monotonic() - started
        if build.returncode != 0:
            print(build.stderr[-3000:], file=sys.stderr)
            return build.returncode
        key = next(layer["key"] for layer in json.loads(build.stdout)["layers"] if layer["kind"] == "compile")
        record = json.loads((store / "records" / "layers" / f"{key}.json").read_text())
        audit = json.loads((store / "records" / "audits" / f"{key}.json").read_text())
    metrics, budget, steps = record["metrics"], record["budget"], record.get("steps", [])
    gib = 1 << 30
    print(f"vLLM _C_stable_libtorch for 12.1a ({'CI subset' if args.subset else 'whole target'}, "
          f"{len(steps)} objects)")
    print(f"  sparkimg build (lock done, empty store): {total:.0f} s")
    print(f"  the compile layer: {metrics['wall_s']:.0f} s wall, {metrics['cpu_s'] or 0:.0f} s CPU, "
          f"peak {(metrics['peak_memory'] or 0) / gib:.2f} GiB; bound {budget['memory'] / gib:.1f} GiB, "
          f"{budget['jobs']} job(s)")
    for report in audit["reports"]:
        print(f"  audit {report['file']}: {report.get('fatbins')} CUDA objects, "
              f"helpers {report.get('helpers', [])}, collapsed {report.get('collapsed', [])}")
    classes: dict[str, list[dict[str, Any]]] = {}
    for step in steps:
        classes.setdefault(object_class(step), []).append(step)
    for name, rows in sorted(classes.items()):
        walls = sorted(r["wall_s"] for r in rows)
        peaks = sorted(r["peak_memory"] for r in rows if r.get("peak_memory") is not None) or [0]
        print(f"  {name}: {len(rows)} objects, {walls[0]:.0f}-{walls[-1]:.0f} s each "
              f"(sum {sum(walls):.0f} s), peak {peaks[0] / gib:.2f}-{peaks[-1] / gib:.2f} GiB")
    for step in sorted(steps, key=lambda s: -s["wall_s"])[:10]:
        peak = step.get("peak_memory")
        print(f"    {step['object']}: {step['wall_s']:.0f} s, "
              + ("peak unknown (compiled by sccache's server)" if peak is None else f"{peak / gib:.2f} GiB"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
