"""End to end with the real engine, registry and index: a compile layer builds for 12.1a from a
PyPI-style sdist (the demo kernel, served by a loopback PEP 691 index), and ``sparkimg check`` /
``plan`` on the pinned vLLM 0.34.0 sdist fail with the 12.1a collapse, then pass with the patch."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import shutil
import socketserver
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkimg.store.content import Store
from tests.formats import vllm_sdist_body
from tests.integration.helpers import HEADER, cli
from tests.support import REPO, VLLM_SDIST, image_build

PATCH = "patches/vllm-gb10-archs/cuda13-sm121.patch"


def demo_kernel_sdist() -> bytes:
    """build/demo-kernel as an sdist would hold it: one top folder, a PKG-INFO."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        files = {"PKG-INFO": b"Metadata-Version: 2.1\nName: demo-kernel\nVersion: 1.0\n"}
        for path in sorted((REPO / "build" / "demo-kernel").iterdir()):
            files[path.name] = path.read_bytes()
        for name, data in files.items():
            info = tarfile.TarInfo(f"demo_kernel-1.0/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 1700000000
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """A loopback index serving the demo kernel's sdist: (index URL, sha256)."""
    data = demo_kernel_sdist()
    sha = hashlib.sha256(data).hexdigest()
    page = json.dumps({"meta": {"api-version": "1.1"}, "name": "demo-kernel", "files": [
        {"filename": "demo_kernel-1.0.tar.gz", "url": "/files/demo_kernel-1.0.tar.gz", "hashes": {"sha256": sha}}]})

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body, kind = {"/simple/demo-kernel/": (page.encode(), "application/vnd.pypi.simple.v1+json"),
                          "/files/demo_kernel-1.0.tar.gz": (data, "application/gzip")}.get(self.path, (b"", ""))
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = socketserver.TCPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/simple/"
    monkeypatch.setenv("SPARKIMG_PYPI_INDEX", url)
    yield url, sha
    server.shutdown()
    server.server_close()


def test_a_compile_layer_builds_from_an_sdist(tmp_path: Path, capsys: pytest.CaptureFixture[str], demo_base: str,
                                              index: tuple[str, str]) -> None:
    name = f"it-sdist-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "spec.yaml"
    spec.write_text(HEADER.format(name=name, base=demo_base) + """\
sources:
  kernel:
    pypi: demo-kernel
    version: "1.0"
    dist: sdist
layers:
  - name: kernel
    kind: compile
    source: kernel
    command: python3 /src/build_wheel.py --out /out
    env:
      NVCC_GENCODE: "{gencode}"
    memory: 2g
    job_memory: 512m
    pids: 512
""")
    store = tmp_path / "store"
    code, _, err = cli(capsys, store, "lock", str(spec))
    assert code == 0, err
    pin = json.loads((tmp_path / "spec.yaml.lock.json").read_text())["sources"]["kernel"]
    assert (pin["dist"], pin["filename"], pin["sha256"]) == ("sdist", "demo_kernel-1.0.tar.gz", index[1])
    code, built, err = cli(capsys, store, "build", str(spec), "--json")
    assert code == 0, err
    [compiled] = [layer for layer in built["layers"] if layer["name"] == "kernel"]
    assert not compiled["cached"]
    assert "audit kernel: 1 shared object(s), 0 lacking 12.1a" in err
    assert Store(store).has(index[1])


def vllm_spec(folder: Path, base: str, *, patched: bool) -> Path:
    (folder / PATCH).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / PATCH, folder / PATCH)
    spec = folder / "vllm.yaml"
    spec.write_text(HEADER.format(name=f"it-vllm-{uuid.uuid4().hex[:8]}", base=base)
                    + vllm_sdist_body(VLLM_SDIST["version"]) + (f"    source_patches: [{PATCH}]\n" if patched else ""))
    return spec


def test_check_and_plan_catch_vllms_collapse_and_the_patch_fixes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], demo_base: str, vllm_034_sdist: Path) -> None:
    store = tmp_path / "store"
    Store(store).put_file(vllm_034_sdist, expected=VLLM_SDIST["sha256"], what="vllm sdist")  # no second download
    spec = vllm_spec(tmp_path, demo_base, patched=False)
    code, _, err = cli(capsys, store, "lock", str(spec))
    assert code == 0, err
    assert json.loads((tmp_path / "vllm.yaml.lock.json").read_text())["sources"]["vllm"]["sha256"] == \
        VLLM_SDIST["sha256"]
    started = time.monotonic()
    code, _, err = cli(capsys, store, "check", str(spec))
    took = time.monotonic() - started
    assert code == 6, err
    assert "12.1a collapses to 12.0: CMakeLists.txt:129" in err and f"source_patches: [{PATCH}]" in err
    assert "Traceback" not in err
    code, _, err = cli(capsys, store, "plan", str(spec))
    assert code == 6 and "(cached)" in err, err

    spec = vllm_spec(tmp_path, demo_base, patched=True)
    code, _, err = cli(capsys, store, "check", str(spec))
    assert code == 2 and "stale" in err  # the spec changed: lock again first
    code, _, err = cli(capsys, store, "lock", str(spec))
    assert code == 0, err
    code, out, err = cli(capsys, store, "check", str(spec), "--json")
    assert code == 0, err
    assert out["preflight"][0]["mapped"] == {"12.1a": "12.1a"}
    code, _, err = cli(capsys, store, "plan", str(spec))
    assert code == 0, err
    print(f"check with the preflight (uncached): {took:.2f} s")


CUDA_BASE = "127.0.0.1:5000/sparkimg-test/cuda-base:1"


@pytest.fixture(scope="module")
def cuda_base(engine, registry: str, demo_base: str, tmp_path_factory: pytest.TempPathFactory) -> str:  # type: ignore[no-untyped-def]
    """The demo base with the host's real nvcc binary at /usr/local/cuda/bin/nvcc (``nvcc --version``
    needs nothing else), pushed to the loopback registry: a base that brings its own toolkit."""
    import subprocess

    nvcc = Path("/usr/local/cuda/bin/nvcc").resolve()
    if not nvcc.is_file():
        pytest.skip("no nvcc at /usr/local/cuda")
    context = tmp_path_factory.mktemp("cuda-base")
    shutil.copy(nvcc, context / "nvcc")
    (context / "Dockerfile").write_text(f"FROM {demo_base}\nCOPY nvcc /usr/local/cuda/bin/nvcc\n")
    image_build(engine, context, tags=[CUDA_BASE], labels={"dev.sparkimg.test": "cuda-base"})
    subprocess.run([engine.client, "push", "-q", CUDA_BASE], capture_output=True, text=True, check=True)
    return CUDA_BASE


def test_a_base_toolchain_is_named_by_the_bases_own_nvcc(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], cuda_base: str, vllm_034_sdist: Path) -> None:
    """With toolchain cuda: base, fetch asks the base's nvcc once (no network, bounded); the receipt's
    toolchain dependency is nvcc itself, and the preflight reads its CUDA version."""
    from tests.integration.helpers import WHEEL

    host_nvcc = hashlib.sha256(Path("/usr/local/cuda/bin/nvcc").resolve().read_bytes()).hexdigest()
    store = tmp_path / "store"
    Store(store).put_file(vllm_034_sdist, expected=VLLM_SDIST["sha256"], what="vllm sdist")
    header = HEADER.format(name=f"it-basecuda-{uuid.uuid4().hex[:8]}", base=cuda_base).replace(
        "toolchain:\n  cuda: host\n  path: /usr/local/cuda\n", "toolchain:\n  cuda: base\n")
    spec = tmp_path / "base.yaml"
    spec.write_text(header + f"""\
sources:
  vllm:
    pypi: vllm
    version: "{VLLM_SDIST['version']}"
    dist: sdist
layers:
  - name: wheel
    kind: compile
    source: vllm
    command: {json.dumps(WHEEL)}
    memory: 512m
    job_memory: 256m
""")
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    code, _, err = cli(capsys, store, "check", str(spec))
    assert code == 0 and "CUDA version is unknown" in err, err  # nothing asked the base yet
    code, _, err = cli(capsys, store, "fetch", str(spec))
    assert code == 0 and "toolchain: nvcc 13.0" in err, err
    code, _, err = cli(capsys, store, "check", str(spec))
    assert code == 6 and "would not build for 12.1a with CUDA 13.0" in err, err
    code, _, err = cli(capsys, store, "build", str(spec))
    assert code == 6 and "would not build for 12.1a" in err, err  # stopped before any compile

    # A build on that base (a source that is not vLLM): its receipt names the base's nvcc.
    (tmp_path / "kernel").mkdir()
    (tmp_path / "kernel" / "README").write_text("not vLLM\n")
    other = tmp_path / "other.yaml"
    other.write_text(header.replace("name: it-basecuda-", "name: it-basecuda-b-") + f"""\
sources:
  kernel:
    path: kernel
layers:
  - name: wheel
    kind: compile
    source: kernel
    command: {json.dumps(WHEEL)}
    memory: 512m
    job_memory: 256m
""")
    assert cli(capsys, store, "lock", str(other))[0] == 0
    code, built, err = cli(capsys, store, "build", str(other), "--json")
    assert code == 0, err
    receipt = json.loads(Path(built["receipt"]).read_text())
    import base64

    statement = json.loads(base64.b64decode(receipt["payload"]))
    deps = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    [toolchain] = [d for d in deps if d["name"] == "toolchain"]
    assert toolchain["digest"] == {"sha256": host_nvcc}
    assert toolchain["uri"] == "file:/usr/local/cuda/bin/nvcc"
    assert toolchain["annotations"]["cuda"] == "base" and toolchain["annotations"]["nvcc_version"].startswith("13.0")
