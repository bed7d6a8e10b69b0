"""Shared fixtures. Integration tests use the real engine and registry from scripts/dev-up.

A probe skips them when no engine is present, except under CI=true, where a missing
engine fails them instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from sparkimg._internal.locations import DOWNLOAD_CACHE_ENV
from tests.support import (
    ARM64_BASE,
    DEMO_BASE,
    OLDSIX_BASE,
    REGISTRY,
    REPO,
    image_build,
    six_wheel,
    unavailable,
    vllm_sdist,
)

_MANIFESTS = ", ".join(["application/vnd.docker.distribution.manifest.v2+json",
                        "application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json",
                        "application/vnd.docker.distribution.manifest.list.v2+json"])


@pytest.fixture(scope="session", autouse=True)
def shared_downloads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One download cache for the session (``store.downloads``): each test has a store of its own,
    and the demo's CUDA toolkit wheels (100 MB) are downloaded once, not once per test. A test of
    the download itself takes the variable away (``monkeypatch.delenv``)."""
    folder = tmp_path_factory.mktemp("downloads")
    before = os.environ.get(DOWNLOAD_CACHE_ENV)
    os.environ[DOWNLOAD_CACHE_ENV] = str(folder)
    yield folder
    if before is None:
        os.environ.pop(DOWNLOAD_CACHE_ENV, None)
    else:
        os.environ[DOWNLOAD_CACHE_ENV] = before


@pytest.fixture(scope="session")
def engine():  # type: ignore[no-untyped-def]
    from sparkimg.engine.connect import connect as connect_engine
    from sparkimg.errors import EngineError

    try:
        return connect_engine()
    except EngineError as exc:
        unavailable(f"no Docker engine: {exc.message}")


@pytest.fixture(scope="session")
def registry() -> str:
    try:
        requests.get(f"http://{REGISTRY}/v2/", timeout=3).raise_for_status()
    except requests.RequestException as exc:
        unavailable(f"no registry on {REGISTRY}: {exc}")
    return REGISTRY


@pytest.fixture(scope="session")
def demo_base(engine, registry) -> str:  # type: ignore[no-untyped-def]
    response = requests.get(f"http://{REGISTRY}/v2/sparkimg/demo-base/manifests/bookworm", timeout=5,
                            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    if response.status_code != 200:
        unavailable(f"no demo base {DEMO_BASE}")
    return DEMO_BASE


@pytest.fixture(scope="session")
def arm64_base(engine, registry) -> str:  # type: ignore[no-untyped-def]
    """The arm64 demo base, whose programs run here under emulation (both from scripts/dev-up)."""
    from sparkimg._internal import emulation

    said = emulation.verdict("linux/arm64")
    if not said.ok:
        unavailable(f"linux/arm64 does not run here: {said.detail}")
    response = requests.get(f"http://{REGISTRY}/v2/sparkimg/demo-base/manifests/bookworm-arm64", timeout=5,
                            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    if response.status_code != 200:
        unavailable(f"no arm64 demo base {ARM64_BASE}")
    return ARM64_BASE


@pytest.fixture(scope="session")
def six_wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The six 1.15.0 and 1.16.0 wheels from the package index, checked by sha256."""
    folder = tmp_path_factory.mktemp("six-wheels")
    return {version: six_wheel(version, folder) for version in ("1.15.0", "1.16.0")}


@pytest.fixture(scope="session")
def oldsix_base(engine, registry, demo_base, six_wheels, tmp_path_factory) -> str:  # type: ignore[no-untyped-def]
    """The demo base with six 1.15.0 installed by the base's own pip (as root, no network), pushed
    to the loopback registry as OLDSIX_BASE so that specs can lock against it. Reused when the
    registry has the tag already (pulled if the engine lacks it)."""
    repository, _, tag = OLDSIX_BASE.removeprefix(f"{REGISTRY}/").rpartition(":")
    known = requests.get(f"http://{REGISTRY}/v2/{repository}/manifests/{tag}", timeout=5,
                         headers={"Accept": _MANIFESTS})
    if known.status_code == 200:
        if engine.inspect(OLDSIX_BASE) is None:
            engine.pull(OLDSIX_BASE)
        return OLDSIX_BASE
    context = tmp_path_factory.mktemp("oldsix-base")
    (context / "w").mkdir()
    shutil.copy(six_wheels["1.15.0"], context / "w")
    (context / "Dockerfile").write_text(
        f"FROM {demo_base}\nCOPY w/ /w/\n"
        "RUN python3 -m pip install --break-system-packages --no-index --no-deps --disable-pip-version-check "
        "/w/*.whl && rm -rf /w\n")
    image_build(engine, context, tags=[OLDSIX_BASE], labels={"dev.sparkimg.test": "oldsix-base"})
    subprocess.run([engine.client, "push", "-q", OLDSIX_BASE], capture_output=True, text=True, check=True)
    return OLDSIX_BASE


@pytest.fixture(scope="session")
def vllm_034_sdist() -> Path:
    """vLLM 0.34.0's sdist from PyPI, downloaded once into the test cache and checked by sha256."""
    return vllm_sdist()


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    from sparkimg.store.content import Store

    return Store(tmp_path / "store")


@pytest.fixture
def project(tmp_path: Path) -> Callable[..., Path]:
    """Write a spec (dedented) into a fresh project folder with the demo kernel and patches."""

    def make(text: str, name: str = "spec.yaml") -> Path:
        root = tmp_path / "project"
        if not root.exists():
            shutil.copytree(REPO / "build" / "demo-kernel", root / "kernel")
            shutil.copytree(REPO / "patches" / "demo", root / "patches" / "demo")
        path = root / name
        path.write_text(textwrap.dedent(text))
        return path

    return make
