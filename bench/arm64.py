"""The arm64 demo under emulation against the amd64 demo, each built cold in the same run.

layers/demo.yaml (this machine's platform, the host's CUDA toolkit) and layers/demo-arm64.yaml
(linux/arm64: every program of the arm64 base runs through qemu, and the kernel compiles with
NVIDIA's aarch64 toolkit wheels) are each copied into a folder of their own and locked, then
built from an empty store (fetch, compile, audit, assemble, load), then built again with
``--check`` (a second compile in a scratch store, compared byte for byte). Prints each spec's
times, the compile step of each, and the ratios arm64 / amd64 (the baseline is the amd64 demo
measured in the same run). The toolkit wheels (about 95 MB) come from the package index on the
first run and from pip's cache after; the arm64 build also unpacks them into its store.

``--env [STORE]`` instead builds layers/vllm-env-arm64.yaml, the GB10's vLLM environment at real
size (34 aarch64 wheels, about 3.4 GB), into STORE (kept between runs, so the wheels are
downloaded once): lock, fetch, a cold build, the CPU audit's census, the image's size and
``python3 -c "import torch, vllm"`` in an arm64 container under emulation (no GPU: the import,
not CUDA's initialisation). Not CI.

Needs scripts/dev-up (which registers emulation and makes the arm64 base). About two minutes.
Usage: python bench/arm64.py [--env [STORE]]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PARTS = ("build/demo-kernel", "patches/demo", "patches/demo-runtime")


def copied(spec: str, into: Path) -> Path:
    """The spec and what it reads in a folder of its own, with an image name of this run."""
    for part in PARTS:
        shutil.copytree(REPO / part, into / part)
    (into / "layers").mkdir()
    target = into / "layers" / spec
    name = spec.removesuffix(".yaml")
    target.write_text((REPO / "layers" / spec).read_text().replace(
        f"image: sparkimg/{name}", f"image: sparkimg-bench/{name}-{uuid.uuid4().hex[:8]}"))
    return target


def sparkimg(store: Path, *args: str) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    quiet = ["--quiet"] if args[0] == "build" else []
    done = subprocess.run([sys.executable, "-m", "sparkimg.cli", "--store", str(store), *args, "--json", *quiet],
                          capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"sparkimg {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout) if done.stdout.strip() else {}


def measure(spec: str, root: Path) -> dict[str, Any]:
    path = copied(spec, root)
    store = root / "store"
    locked, _ = sparkimg(store, "lock", str(path))
    cold, result = sparkimg(store, "build", str(path))
    compiled = {s["step"]: s["wall_s"] for s in result.get("steps", []) if s.get("layer") == "demo-kernel"}
    checked, again = sparkimg(store, "build", str(path), "--check", "--recheck")
    subprocess.run(["docker", "rmi", "-f", result["image"]["reference"]], capture_output=True, check=False)
    return {"spec": spec, "lock_s": round(locked, 1), "cold_s": round(cold, 1),
            "compile_s": compiled.get("compile"), "check_s": round(checked, 1),
            "identical": bool(again.get("check", {}).get("identical"))}


def environment(store: Path) -> None:
    """layers/vllm-env-arm64.yaml at real size: lock, fetch (timed apart: the network), a cold
    build, the CPU audit's census, the installed size, and the import under emulation."""
    with tempfile.TemporaryDirectory(prefix="sparkimg-bench-arm64-env.", dir="/var/tmp") as folder:
        root = Path(folder)
        (root / "layers").mkdir()
        spec = root / "layers" / "vllm-env-arm64.yaml"
        spec.write_text((REPO / "layers" / spec.name).read_text().replace(
            "image: sparkimg/vllm-env-arm64", f"image: sparkimg-bench/vllm-env-arm64-{uuid.uuid4().hex[:8]}"))
        locked, _ = sparkimg(store, "lock", str(spec))
        fetched, _ = sparkimg(store, "fetch", str(spec))
        cold, result = sparkimg(store, "build", str(spec))
        reference = result["image"]["reference"]
        record = json.loads((store / "records" / "images" / f"{result['layers'][-1]['key']}.json").read_text())
        census: dict[str, int] = {}
        for layer in record["layers"]:
            for machine, count in layer.get("elfMachines", {}).items():
                census[machine] = census.get(machine, 0) + count
        size = json.loads(subprocess.run(["docker", "image", "inspect", reference], capture_output=True, text=True,
                                         check=True).stdout)[0]["Size"]
        started = time.monotonic()
        imported = subprocess.run(["docker", "run", "--rm", "--platform", "linux/arm64", "--network", "none", reference,
                                   "python3", "-c", "import platform, torch, vllm; print(platform.machine(), "
                                   "torch.__version__, torch.version.cuda, vllm.__version__)"],
                                  capture_output=True, text=True, check=False)
        seconds = time.monotonic() - started
        subprocess.run(["docker", "rmi", "-f", reference], capture_output=True, check=False)
    print(f"vllm-env-arm64: lock {locked:.1f} s, fetch {fetched:.1f} s, cold build {cold:.1f} s, "
          f"image {size / 1e9:.2f} GB, ELF files {census}")
    print(f"import torch, vllm under emulation: {seconds:.1f} s, exit {imported.returncode}: "
          f"{(imported.stdout or imported.stderr).strip()[-400:]}")


def main() -> None:
    if sys.argv[1:2] == ["--env"]:
        environment(Path(sys.argv[2]) if len(sys.argv) > 2 else Path.home() / ".cache" / "sparkimg-bench" / "arm64")
        return
    with tempfile.TemporaryDirectory(prefix="sparkimg-bench-arm64.", dir="/var/tmp") as folder:
        amd64 = measure("demo.yaml", Path(folder) / "amd64")
        arm64 = measure("demo-arm64.yaml", Path(folder) / "arm64")
    for row in (amd64, arm64):
        print(f"{row['spec']:<17} lock {row['lock_s']:6.1f} s  cold build {row['cold_s']:6.1f} s  "
              f"(compile {row['compile_s']} s)  --check --recheck {row['check_s']:6.1f} s  "
              f"identical {row['identical']}")
    print(f"arm64 / amd64: cold build {arm64['cold_s'] / amd64['cold_s']:.2f}x, "
          f"compile {(arm64['compile_s'] or 0) / (amd64['compile_s'] or 1):.2f}x, "
          f"check {arm64['check_s'] / amd64['check_s']:.2f}x")


if __name__ == "__main__":
    main()
