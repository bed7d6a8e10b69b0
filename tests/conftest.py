"""Shared fixtures. Integration tests use the real engine and registry from scripts/dev-up.

A probe skips them when no engine is present, except under CI=true, where a missing
engine fails them instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[1]
REGISTRY = "127.0.0.1:5000"
DEMO_BASE = f"{REGISTRY}/sparkimg/demo-base:bookworm"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"integration prerequisite missing under CI=true: {reason} (run scripts/dev-up)")
    pytest.skip(f"{reason}; run scripts/dev-up")


def flashinfer_env() -> str:
    """The FlashInfer JIT environment's interpreter (scripts/flashinfer-env makes it once), with
    LIBRARY_PATH set for its link step; what the script prints is applied to this process."""
    run = subprocess.run(["bash", str(REPO / "scripts" / "flashinfer-env")], capture_output=True, text=True,
                         check=False)
    if run.returncode != 0:
        _unavailable(f"scripts/flashinfer-env failed: {run.stderr.strip()[-500:]}")
    for line in run.stdout.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        os.environ[name] = os.path.expandvars(value.replace("${LIBRARY_PATH:+:$LIBRARY_PATH}", ""))
    return os.environ["SPARKIMG_FLASHINFER_PYTHON"]


@pytest.fixture(scope="session")
def engine():  # type: ignore[no-untyped-def]
    from sparkimg.engine import Engine
    from sparkimg.errors import EngineError

    try:
        return Engine.connect()
    except EngineError as exc:
        _unavailable(f"no Docker engine: {exc.message}")


@pytest.fixture(scope="session")
def registry() -> str:
    try:
        requests.get(f"http://{REGISTRY}/v2/", timeout=3).raise_for_status()
    except requests.RequestException as exc:
        _unavailable(f"no registry on {REGISTRY}: {exc}")
    return REGISTRY


@pytest.fixture(scope="session")
def demo_base(engine, registry) -> str:  # type: ignore[no-untyped-def]
    response = requests.get(f"http://{REGISTRY}/v2/sparkimg/demo-base/manifests/bookworm", timeout=5,
                            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    if response.status_code != 200:
        _unavailable(f"no demo base {DEMO_BASE}")
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
