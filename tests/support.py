"""What tests share besides fixtures: the repository root, the loopback registry, and how a
missing prerequisite is reported (a skip on a laptop, a failure under CI=true)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REGISTRY = "127.0.0.1:5000"
DEMO_BASE = f"{REGISTRY}/sparkimg/demo-base:bookworm"


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"integration prerequisite missing under CI=true: {reason} (run scripts/dev-up)")
    pytest.skip(f"{reason}; run scripts/dev-up")


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
