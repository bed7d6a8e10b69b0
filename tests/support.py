"""What tests share besides fixtures: the repository root, the loopback registry, and how a
missing prerequisite is reported (a skip on a laptop, a failure under CI=true)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
REGISTRY = "127.0.0.1:5000"
DEMO_BASE = f"{REGISTRY}/sparkimg/demo-base:bookworm"
ARM64_BASE = f"{REGISTRY}/sparkimg/demo-base:bookworm-arm64"  # scripts/dev-up, debootstrapped under emulation
OLDSIX_BASE = f"{REGISTRY}/sparkimg-test/oldsix-base:1"
# The six wheels the wheel-replacement tests use, by sha256 (PyPI's files).
SIX_WHEELS = {
    "1.15.0": "8b74bedcbbbaca38ff6d7491d76f2b06b3592611af620f8426e82dddb04a5ced",
    "1.16.0": "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254",
}


# vLLM 0.34.0's sdist on PyPI (the preflight's real subject): its sha256, taken from the index's
# JSON API and checked against the downloaded file once (sha256sum vllm-0.34.0.tar.gz).
VLLM_SDIST = {
    "version": "0.34.0",
    "filename": "vllm-0.34.0.tar.gz",
    "sha256": "fcad848b246a9d8652b47e6425af92334dc02492f9802720f54e27b823cf0113",
    "url": "https://files.pythonhosted.org/packages/92/21/6e0b077dc4a0b28f5a8ce8bb352a38d7196650d681fd4faa87f8dc622eff/"
           "vllm-0.34.0.tar.gz",
}


def cache_folder() -> Path:
    """Downloads the tests keep between runs: ``$SPARKIMG_TEST_CACHE``, else ~/.cache/sparkimg-tests."""
    folder = Path(os.environ.get("SPARKIMG_TEST_CACHE") or Path.home() / ".cache" / "sparkimg-tests")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def vllm_sdist() -> Path:
    """vLLM 0.34.0's sdist (51 MB), downloaded once into ``cache_folder()`` and checked against its sha256."""
    import hashlib

    path = cache_folder() / VLLM_SDIST["filename"]
    if not path.is_file():
        import requests

        partial = path.with_suffix(".part")
        try:
            with requests.get(VLLM_SDIST["url"], stream=True, timeout=120) as response:
                response.raise_for_status()
                with open(partial, "wb") as handle:
                    for chunk in response.iter_content(1 << 20):
                        handle.write(chunk)
        except requests.RequestException as exc:
            unavailable(f"cannot download {VLLM_SDIST['filename']}: {exc}")
        partial.replace(path)
    found = hashlib.sha256(path.read_bytes()).hexdigest()
    assert found == VLLM_SDIST["sha256"], f"{path}: sha256 {found}, expected {VLLM_SDIST['sha256']}"
    return path


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"integration prerequisite missing under CI=true: {reason} (run scripts/dev-up)")
    pytest.skip(f"{reason}; run scripts/dev-up")


def six_wheel(version: str, folder: Path) -> Path:
    """six VERSION's wheel from the package index (pip download, with this machine's index
    configuration), checked against its pinned sha256; kept in ``folder`` once downloaded."""
    import hashlib
    import sys

    path = folder / f"six-{version}-py2.py3-none-any.whl"
    if not path.is_file():
        run = subprocess.run([sys.executable, "-m", "pip", "download", f"six=={version}", "--no-deps",
                              "--only-binary=:all:", "--disable-pip-version-check", "-q", "-d", str(folder)],
                             capture_output=True, text=True, check=False)
        if run.returncode != 0 or not path.is_file():
            unavailable(f"cannot download six {version}: {run.stderr.strip()[-300:]}")
    found = hashlib.sha256(path.read_bytes()).hexdigest()
    assert found == SIX_WHEELS[version], f"{path.name}: sha256 {found}, expected {SIX_WHEELS[version]}"
    return path


def flashinfer_env() -> str:
    """The FlashInfer JIT environment's interpreter (scripts/flashinfer-env makes it once), with
    LIBRARY_PATH set for its link step; what the script prints is applied to this process."""
    run = subprocess.run(["bash", str(REPO / "scripts" / "flashinfer-env")], capture_output=True, text=True,
                         check=False)
    if run.returncode != 0:
        unavailable(f"scripts/flashinfer-env failed: {run.stderr.strip()[-500:]}")
    for line in run.stdout.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        os.environ[name] = os.path.expandvars(value.replace("${LIBRARY_PATH:+:$LIBRARY_PATH}", ""))
    return os.environ["SPARKIMG_FLASHINFER_PYTHON"]


class FakeEngineApi:
    """A Docker Engine API on a unix socket that knows one image, ``name`` (``image`` is what
    ``GET /images/NAME/json`` answers, compact, in its order, as moby writes it: ``Id`` first); ``status``
    forces every answer's status."""

    def __init__(self, path: Path, image: dict[str, Any], status: int = 200, name: str = "present") -> None:
        import http.server
        import socketserver
        import threading

        body, fixed = json.dumps(image, separators=(",", ":")).encode(), status

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                found = self.path == f"/images/{name}/json"
                code = fixed if fixed != 200 else (200 if found else 404)
                payload = body if code == 200 else b'{"message": "no such image"}'
                self.send_response(code)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                return None

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

            def get_request(self) -> tuple[Any, Any]:
                request, _ = super().get_request()
                return request, ("local", 0)  # http.server wants a (host, port) client address

        self.server = Server(str(path), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def installed_bytes(staged: Any, image_path: str) -> bytes:
    """What ``image.wheels.install_wheels`` put at ``image_path``: its bytes, or its wheel member's."""
    import zipfile

    entry = staged.files[image_path]
    if entry.member is None:
        return bytes(entry.data)
    with zipfile.ZipFile(entry.member.archive) as archive:
        return archive.read(entry.member.name)


def write_installed(staged: Any, root: Path) -> None:
    """Every file ``install_wheels`` installed, written under ``root`` (each at its image path)."""
    for image_path, entry in staged.files.items():
        target = root / image_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(installed_bytes(staged, image_path))
        target.chmod(entry.mode)


def folder_entries(root: Path, *, directory: Any = lambda path: True) -> list[Any]:
    """Every file, link and directory under ``root`` as layer entries, as sparkimg made a layer
    of a staging folder before it wrote wheels' layers straight from the wheels: the reference
    the layer writer is held to. ``directory(path)`` says whether a folder gets an entry."""
    import stat

    from sparkimg.image.layer import Entry

    found: list[Entry] = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                found.append(Entry(rel, "symlink", 0o777, target=os.readlink(path)))
            elif stat.S_ISDIR(info.st_mode):
                if directory(rel):
                    found.append(Entry(rel, "dir", 0o755))
            else:
                found.append(Entry(rel, "file", 0o755 if info.st_mode & 0o111 else 0o644, source=path))
    return found


def image_build(engine: Any, context: Path, *, tags: list[str], labels: dict[str, str] | None = None) -> None:
    """``docker build`` of ``context/Dockerfile`` with no network, for the images a test needs
    (a base with an old wheel, a base re-pushed with a new digest); sparkimg itself never builds
    with a Dockerfile. buildx where the client has it, else the BuildKit built into ``docker build``."""
    args = [engine.client, *(["buildx", "build", "--load", "--provenance=false"] if engine.builder == "buildx"
                             else ["build"]), "--network", "none", "--progress", "plain"]
    for tag in tags:
        args += ["--tag", tag]
    for key, value in sorted((labels or {}).items()):
        args += ["--label", f"{key}={value}"]
    done = subprocess.run([*args, str(context)], capture_output=True, text=True, check=False,
                          env={**os.environ, "DOCKER_BUILDKIT": "1"})
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


def rot(path: Path, how: str) -> None:
    """Damage a store blob as a disk would: one bit flipped in the middle (``flip``), or the
    tail cut off (``cut``); its read-only mode is kept."""
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[len(data) // 2] ^= 0x01
    else:
        del data[-100:]
    path.write_bytes(bytes(data))
    os.chmod(path, 0o444)
