"""Shared fixtures. Integration tests use the real engine and registry from scripts/dev-up.

A probe skips them when no engine is present, except under CI=true, where a missing
engine fails them instead.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.support import DEMO_BASE, REGISTRY, REPO, unavailable


@pytest.fixture(scope="session")
def engine():  # type: ignore[no-untyped-def]
    from sparkimg.engine import Engine
    from sparkimg.errors import EngineError

    try:
        return Engine.connect()
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


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    from sparkimg.store import Store

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
