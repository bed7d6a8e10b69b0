"""vLLM's _C_stable_libtorch for 12.1a, for real, on this CPU machine: layers/vllm-stable-gb10.yaml
(its CI subset) compiled from the pinned vLLM 0.34.0 sdist with the arch patch, in the bounded,
no-network container on the vLLM build base (torch 2.14.0 with its CUDA 13 wheels), CUTLASS v4.7.0
from the pinned copy. The audit finds sm_121a in every CUDA object but the Marlin helper (sm_80 +
PTX, reported), `build --check` rebuilds the layer from an empty store to the same wheel bytes, the
image holds the rebuilt library at the path vLLM imports it from, and without the arch patch
`sparkimg check` exits 6 before anything compiles.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

import pytest

from sparkimg.engine.protocol import Engine
from sparkimg.store.content import Store
from tests.support import REPO

from .helpers import BuiltSpec, dev_script

pytestmark = pytest.mark.integration

SPEC = REPO / "layers" / "vllm-stable-gb10.yaml"
LIBRARY = "vllm/_C_stable_libtorch.abi3.so"
SITE = "/opt/venv/lib/python3.11/site-packages"
ARCH_PATCH = "      - patches/vllm-gb10-archs/cuda13-sm121.patch\n"


def sparkimg(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkimg.cli", "--store", str(store), *args],
                          capture_output=True, text=True, check=False, cwd=REPO)


def copy_spec(root: Path, text: str) -> Path:
    """The spec in a folder of its own, with what its path sources and patches name."""
    (root / "layers").mkdir(parents=True)
    spec = root / "layers" / SPEC.name
    spec.write_text(text)
    shutil.copytree(REPO / "build" / "vllm-ext", root / "build" / "vllm-ext",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "patches" / "vllm-gb10-archs", root / "patches" / "vllm-gb10-archs")
    (root / "build" / "vendor").mkdir()
    shutil.copytree(REPO / dev_script("vendor-cutlass"), root / "build" / "vendor" / "cutlass-v4.7.0")
    return spec


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, engine: Engine, demo_base: str) -> BuiltSpec:
    base = dev_script("vllm-build-image")
    text = SPEC.read_text()
    assert "dist: sdist" in text and ARCH_PATCH in text
    text = re.sub(r"(?m)^  image: 127\.0\.0\.1:5000/sparkimg/vllm-build-base:\S+$", f"  image: {base}", text)
    text = re.sub(r"(?m)^image: sparkimg/(\S+)$", rf"image: sparkimg-test/\1-{uuid.uuid4().hex[:8]}", text)
    root = tmp_path_factory.mktemp("vllm-ext")
    spec = copy_spec(root, text)
    store = root / "store"
    seconds: dict[str, float] = {}
    started = time.monotonic()
    locked = sparkimg(store, "lock", str(spec))
    assert locked.returncode == 0, locked.stderr[-3000:]
    seconds["lock"] = time.monotonic() - started
    started = time.monotonic()
    run = sparkimg(store, "build", str(spec), "--check", "--json", "--quiet")
    seconds["build --check"] = time.monotonic() - started
    assert run.returncode == 0, run.stderr[-3000:]
    return BuiltSpec(root, spec, store, json.loads(run.stdout), seconds)


def layer_record(built: BuiltSpec, kind: str) -> dict[str, Any]:
    layer = next(layer for layer in built.result["layers"] if layer["kind"] == "compile")
    data: dict[str, Any] = json.loads((built.store / "records" / kind / f"{layer['key']}.json").read_text())
    return data


def test_every_cuda_object_holds_sm_121a_but_the_reported_helper(built: BuiltSpec) -> None:
    audit = layer_record(built, "audits")
    (report,) = [r for r in audit["reports"] if r["file"].endswith("!" + LIBRARY)]
    assert report["cubin_sm"] == [80, 121] and report["ptx_sm"] == [80] and not report["missing"]
    assert "collapsed" not in report  # no object came out sm_120 or sm_120f
    # Six CUDA objects in the subset: five with sm_121a, gptq_marlin_repack at sm_80 + PTX (vLLM's choice).
    assert report["fatbins"] == 6
    assert report["helpers"] == [{"code": "sm_80 + PTX 80", "fatbins": 1}]


def test_two_clean_builds_give_the_same_library(built: BuiltSpec) -> None:
    check = built.result["check"]
    assert check["identical"] and not check["differences"], check
    wheels = [c for c in check["compared"] if c["what"].startswith("compile vllm-stable-libtorch: ")]
    assert len(wheels) == 1 and wheels[0]["same"], wheels
    assert wheels[0]["what"].endswith("sparkimg_vllm_ext-0.34.0+sm121a.subset-cp38-abi3-linux_x86_64.whl")
    record = layer_record(built, "layers")
    steps = {s["object"]: s for s in record["steps"]}
    assert sorted(steps) == sorted(line.split("#")[0].strip() for line in
                                   (REPO / "build" / "vllm-ext" / "ci-subset.txt").read_text().splitlines()
                                   if line.split("#")[0].strip())
    heavy = [name for name, s in steps.items() if s["heavy"]]
    assert heavy == ["csrc/quantization/fp4/nvfp4_scaled_mm_sm120_kernels.cu"]
    # Through sccache the compiles run in its server: their peak is not the launcher's to know.
    assert all(s["wall_s"] > 0 and s["peak_memory"] is None for s in steps.values())
    cache = record["compiler_cache"]
    assert cache["tool"] == "sccache 0.16.0" and cache["misses"] > 0 and cache["errors"] == 0
    print(f"\nvllm-stable-libtorch: {built.seconds}, compile {record['metrics']}, cache {cache}")
    for name, s in sorted(steps.items(), key=lambda kv: -kv[1]["wall_s"]):
        print(f"  {name}: {s['wall_s']} s")


def test_the_image_holds_the_rebuilt_library_where_vllm_imports_it(built: BuiltSpec, engine: Engine) -> None:
    record = layer_record(built, "layers")
    wheel = Store(built.store).blob(record["outputs"][0]["sha256"])
    with zipfile.ZipFile(io.BytesIO(wheel.read_bytes())) as archive:
        rebuilt = hashlib.sha256(archive.read(LIBRARY)).hexdigest()
    image = built.result["image"]["reference"]
    run = subprocess.run([engine.client, "run", "--rm", "--network", "none", image, "sha256sum", f"{SITE}/{LIBRARY}"],
                         capture_output=True, text=True, check=False, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[0] == rebuilt


def test_without_the_arch_patch_check_exits_6_before_any_compile(built: BuiltSpec, tmp_path: Path) -> None:
    text = built.spec.read_text().replace(ARCH_PATCH, "")
    spec = copy_spec(tmp_path, text)
    store = tmp_path / "store"
    assert sparkimg(store, "lock", str(spec)).returncode == 0
    checked = sparkimg(store, "check", str(spec))
    assert checked.returncode == 6, checked.stderr
    assert "12.1a collapses to 12.0" in checked.stderr and "cuda13-sm121.patch" in checked.stderr
    assert not (store / "records" / "layers").exists() or not any((store / "records" / "layers").iterdir())
