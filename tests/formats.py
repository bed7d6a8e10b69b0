"""Builders for sparkimg's formats, made from the models themselves: one place for every test
that needs a lock, a layer record or a kernel label, so a renamed field breaks here first."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from sparkimg.formats.lockfile import (
    BasePin,
    LockFile,
    PatchFilePin,
    PatchSetPin,
    PathPin,
    PypiPin,
    ToolchainPin,
    TreeFile,
)
from sparkimg.formats.prewarm_manifest import CachedFile, CachedModule, PrewarmManifest, Workspace
from sparkimg.formats.record import LayerRecord, Metrics, Output
from sparkimg.formats.scheme import BaseScheme, InstalledDist
from sparkimg.formats.statement import Descriptor, RunMetadata, Statement, Subject
from sparkimg.lock.resolve import Lock

DIGEST = "sha256:" + "1" * 64


def lock_file(*, platform: str = "linux/arm64") -> LockFile:
    """A complete lock for a spec with a path source ``kernel``, a wheel ``six`` and a patch set ``demo``."""
    return LockFile(
        generator="sparkimg test",
        spec_file="keys.yaml",
        spec_digest="sha256:" + "a" * 64,
        created="2026-12-03T00:00:00Z",
        platform=platform,
        cuda_architectures=("12.1a",),
        source_date_epoch=1700000000,
        base=BasePin({"image": "r:t", "digest": None}, "r", "t", None, DIGEST, "sha256:" + "2" * 64,
                     "application/vnd.oci.image.manifest.v1+json", platform),
        sources={
            "kernel": PathPin("kernel", "3" * 64, {"build_wheel.py": TreeFile("c" * 64, "d" * 32, False)}),
            "six": PypiPin({"pypi": "six", "version": "1.16.0", "sha256": None, "filename": None}, "six", "1.16.0",
                           "six-1.16.0-py2.py3-none-any.whl", "https://files.example/six.whl", "4" * 64),
        },
        patches={"demo": PatchSetPin("patches/demo", "bake", (PatchFilePin("a.py", "/a.py", 3, "e" * 32, "5" * 64),))},
        toolchain=ToolchainPin("host", "/usr/local/cuda", "/usr/local/cuda-13.0", "13.0, V13.0.88", "cuda_13.0",
                               "6" * 64),
    )


def lock_json(**kwargs: Any) -> dict[str, Any]:
    """``lock_file`` as the JSON a lock file holds, for tests that edit it field by field."""
    return lock_file(**kwargs).to_json()


def loaded(data: dict[str, Any], digest: str = DIGEST) -> Lock:
    """A lock as ``sparkimg.lock.resolve.load`` returns it, validated by the model."""
    return Lock(LockFile.from_json(data, "test.lock.json"), digest, Path("test.lock.json"))


def layer_record(*, key: str = "f" * 64, wheels: int = 1) -> LayerRecord:
    return LayerRecord(
        layer="kernel", key=key,
        outputs=tuple(Output(f"kernel-{i}-py3-none-any.whl", f"{i}" * 64, 1000 + i) for i in range(wheels)),
        metrics=Metrics(3.1, 2.9, 222 << 20),
        budget={"memory": 2 << 30, "cpus": None, "cpuset": None, "pids": 4096, "jobs": 2, "job_memory": 1 << 30,
                "cgroup_parent": None, "reserve": None, "mem_available": None},
        audit=({"file": "kernel.whl!k.so", "sm": [121], "missing": []},),
        finished="2026-12-03T00:00:00Z",
    )


def statement(*, metadata: bool = True) -> Statement:
    """A receipt statement with one dependency of each kind sparkimg writes, and one byproduct."""
    return Statement(
        subjects=(Subject("sparkimg/demo:0123456789abcdef", {"sha256": "2" * 64}, {"kind": "image-config"}),),
        external={"spec": {"name": "demo", "path": "demo.yaml", "image": "sparkimg/demo",
                           "digest": {"sha256": "a" * 64}}},
        internal={"platform": "linux/arm64", "cuda_architectures": ["12.1a"], "image_key": "f" * 64},
        dependencies=(
            Descriptor("base", "oci://r@" + DIGEST, {"sha256": "1" * 64}, annotations={"reference": "r:t"},
                       nulls=("mediaType",)),
            Descriptor("source:six", "pkg:pypi/six@1.16.0", {"sha256": "4" * 64}, "https://files.example/six.whl",
                       annotations={"kind": "pypi", "filename": "six-1.16.0-py2.py3-none-any.whl",
                                    "version": "1.16.0"}),
            Descriptor("patch:demo/a.py", "file:patches/demo/a.py", {"sha256": "5" * 64, "md5": "e" * 32},
                       annotations={"set": "demo", "mode": "bake", "mount": "/a.py", "size": 3}),
            Descriptor("lock", "file:demo.yaml.lock.json", {"sha256": "9" * 64}),
        ),
        builder_version={"sparkimg": "0.1.0"},
        metadata=RunMetadata("urn:uuid:x", "2026-12-03T00:00:00Z", "2026-12-03T00:01:00Z") if metadata else None,
        byproducts=(Descriptor("layer:kernel", annotations={"key": "f" * 64}),),
    )


def prewarm_manifest() -> PrewarmManifest:
    ws = ".cache/flashinfer/0.7.2/121a"
    files = (CachedFile(f"{ws}/cached_ops/page/page.so", 100, "7" * 64),
             CachedFile(f"{ws}/cached_ops/page/build.ninja", 10, "8" * 64))
    return PrewarmManifest(
        flashinfer="0.7.2", cuda_architectures=("12.1a",), image={"id": DIGEST, "reference": "sparkimg/demo:x"},
        runner="image", workspace=Workspace("/var/cache/sparkimg/flashinfer", ws, "121a"),
        serving_env={"CUDA_HOME": "/usr/local/cuda"}, toolchain_mount=None, environment={"python": "3.11.2"},
        modules=(CachedModule("page", {"generator": "flashinfer.jit.page.gen_page_module", "args": [], "kwargs": {}},
                              f"{ws}/cached_ops/page/page.so", files, False, 25.0),),
        created="2026-12-03T00:00:00Z", sparkimg="0.1.0")


SITE = "/usr/local/lib/python3.11/dist-packages"


def base_scheme(*installed: InstalledDist) -> BaseScheme:
    """Debian bookworm's python3 as root (``posix_local``) on its glibc 2.36, with ``installed`` in its
    dist-packages."""
    return BaseScheme(
        interpreter="/usr/bin/python3", python_version="3.11.2",
        paths={"purelib": SITE, "platlib": SITE, "scripts": "/usr/local/bin", "data": "/usr/local",
               "headers": "/usr/include/python3.11"},
        installed=tuple(sorted(installed, key=lambda d: (d.name, d.dist_info))), glibc="2.36")


def old_six() -> InstalledDist:
    """six 1.15.0 as Debian's pip installs it: a module, its bytecode and a dist-info folder."""
    info = f"{SITE}/six-1.15.0.dist-info"
    return InstalledDist(
        "six", "1.15.0", info,
        tuple(sorted([f"{SITE}/six.py", f"{SITE}/__pycache__/six.cpython-311.pyc", *(
            f"{info}/{name}" for name in ("INSTALLER", "LICENSE", "METADATA", "RECORD", "REQUESTED", "WHEEL",
                                          "top_level.txt", "direct_url.json"))])),
        (f"{SITE}/__pycache__", info))


# -- fatbins: the 0xBA55ED50 container nvcc puts in a shared object ----------------------------


def entry(kind: int, sm: int, payload: bytes = b"\0" * 8) -> bytes:
    header = bytearray(64)
    struct.pack_into("<H", header, 0, kind)
    struct.pack_into("<I", header, 4, 64)
    struct.pack_into("<Q", header, 8, len(payload))
    struct.pack_into("<I", header, 28, sm)
    return bytes(header) + payload


def fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


# -- spec texts -------------------------------------------------------------------------------


def spec_header(name: str, *, base: str = "127.0.0.1:5000/sparkimg/demo-base:bookworm",
                platform: str = "linux/arm64", image: str | None = None) -> str:
    """What every test spec starts with: schema, name (and image), platform, 12.1a, base, host CUDA."""
    return (f"schema: sparkimg/v1\nname: {name}\n" + (f"image: {image}\n" if image else "")
            + f'platform: {platform}\ncuda_architectures: ["12.1a"]\nbase:\n  image: {base}\n'
            "toolchain:\n  cuda: host\n  path: /usr/local/cuda\n")


def vllm_sdist_body(version: str) -> str:
    """Sources and layers of a spec that builds vLLM from its PyPI sdist for {cuda_arch}."""
    return f"""\
sources:
  vllm:
    pypi: vllm
    version: "{version}"
    dist: sdist
layers:
  - name: vllm
    kind: compile
    source: vllm
    command: python3 -m pip wheel --no-build-isolation --no-deps -w /out /src
    env:
      TORCH_CUDA_ARCH_LIST: "{{cuda_arch}}"
"""


# -- a valid spec, for tests that break one field of it ----------------------------------------

GOOD = spec_header("demo") + """\
sources:
  kernel:
    path: kernel
  six:
    pypi: six
    version: "1.16.0"
  vllm:
    git: https://example.invalid/vllm.git
    ref: dsv41-feat
    commit: e47aa780
layers:
  - name: kernel
    kind: compile
    source: kernel
    command: python3 /src/build_wheel.py --out /out
    env:
      NVCC_GENCODE: "{gencode}"
    memory: 2g
    job_memory: 512m
  - name: six
    kind: wheel
    source: six
patches:
  - name: demo
    dir: patches/demo
    mode: bake
env:
  A: "1"
labels:
  org.example.x: "y"
"""
