"""Helpers for integration tests: run the real CLI in-process and parse its JSON."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkimg.cli import main
from tests.formats import spec_header
from tests.support import unavailable

REPO = Path(__file__).resolve().parents[2]
DEMO_PARTS = ("layers/demo.yaml", "layers/demo.recipe.yaml", "build/demo-kernel", "patches/demo",
              "patches/demo-runtime")

# A shell command that writes a minimal valid wheel to /out.
WHEEL = ("python3 -c \"import zipfile; z = zipfile.ZipFile('/out/t-0-py3-none-any.whl', 'w'); "
         "[z.writestr(n, d) for n, d in [('t.py', ''), ('t-0.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: t"
         "\\nVersion: 0\\n'), ('t-0.dist-info/WHEEL', 'Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: "
         "py3-none-any\\n'), ('t-0.dist-info/RECORD', '')]]\"")

# What every integration spec starts with: a template of its name (with an image of that name)
# and base, built by the one header the unit tests use too.
HEADER = spec_header("{name}", base="{base}", platform="native", image="sparkimg-test/{name}")
SPEC = HEADER + """\
sources:
  kernel:
    path: kernel
layers:
  - name: kernel
    kind: compile
    source: kernel
    command: {command}
    memory: {memory}
    job_memory: {job_memory}
    pids: 256
{extra}"""


def spec_text(base: str, command: str, *, memory: str = "1g", job_memory: str = "256m", extra: str = "") -> str:
    name = f"it-{uuid.uuid4().hex[:10]}"
    return SPEC.format(name=name, base=base, command=json.dumps(command), memory=memory, job_memory=job_memory,
                       extra=extra)


def git(repo: Path, *args: str) -> str:
    """``git -C REPO ARGS`` with a fixed author and committer; what it prints, stripped."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()


def cli(capsys: pytest.CaptureFixture[str], store: Path, *args: str) -> tuple[int, Any, str]:
    """Run ``sparkimg --store STORE ARGS`` in-process; return (exit code, stdout, stderr) with stdout
    parsed when ``--json`` is among the arguments (None if it is not JSON)."""
    capsys.readouterr()
    code = main(["--store", str(store), *args])
    captured = capsys.readouterr()
    if "--json" not in args:
        return code, captured.out, captured.err
    try:
        return code, json.loads(captured.out), captured.err
    except ValueError:
        return code, None, captured.err


def build_ok(capsys: pytest.CaptureFixture[str], store: Path, spec: Path, *args: str) -> dict[str, Any]:
    """``sparkimg build SPEC --json --quiet ARGS`` that must succeed; its JSON result."""
    code, result, err = cli(capsys, store, "build", str(spec), "--json", "--quiet", *args)
    assert code == 0, err
    assert isinstance(result, dict)
    return result


def cached(result: dict[str, Any]) -> dict[str, bool]:
    return {layer["name"]: layer["cached"] for layer in result["layers"]}


def copy_demo(into: Path) -> Path:
    """A copy of the repository's demo (spec, recipe, kernel source, patch sets) with a unique
    image name; returns the spec's path."""
    for part in DEMO_PARTS:
        source, target = REPO / part, into / part
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copyfile)(source, target)
    spec = into / "layers" / "demo.yaml"
    image = f"image: sparkimg-test/demo-{uuid.uuid4().hex[:8]}"
    spec.write_text(spec.read_text().replace("image: sparkimg/demo", image))
    return spec


@dataclass(frozen=True)
class BuiltSpec:
    """A shipped spec locked and built in a folder of its own, with the build's --json output and
    how long each step took."""

    root: Path
    spec: Path
    store: Path
    result: dict[str, Any]
    seconds: dict[str, float]


def dev_script(name: str) -> str:
    """What ``scripts/NAME`` prints last (an image it built and pushed once, a folder it unpacked);
    the test cannot run when the script fails."""
    run = subprocess.run(["bash", str(REPO / "scripts" / name)], capture_output=True, text=True, check=False)
    if run.returncode != 0:
        unavailable(f"scripts/{name} failed: {run.stderr.strip()[-800:]}")
    return run.stdout.strip().splitlines()[-1]


def flashinfer_base() -> str:
    """The FlashInfer base image (scripts/flashinfer-image): built and pushed once, then reused."""
    return dev_script("flashinfer-image")


@contextlib.contextmanager
def own_podman_storage(folder: Path, monkeypatch: pytest.MonkeyPatch, driver: str = "overlay") -> Iterator[Path]:
    """podman pointed (CONTAINERS_STORAGE_CONF) at its own storage under a temporary folder, reset
    and removed afterwards, so the host's podman images are not touched. Fails under CI=true when
    podman is missing (environment.md: Debian has it), else skips."""
    if shutil.which("podman") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("podman is not installed (apt-get install podman)")
        pytest.skip("podman is not installed")
    root = Path(tempfile.mkdtemp(prefix="spk-", dir="/tmp"))  # podman wants a runroot under 50 characters
    storage = folder / "storage.conf"
    storage.write_text(f'[storage]\ndriver = "{driver}"\nrunroot = "{root}/run"\ngraphroot = "{root}/root"\n')
    monkeypatch.setenv("CONTAINERS_STORAGE_CONF", str(storage))
    try:
        yield root
    finally:
        subprocess.run(["podman", "system", "reset", "-f"], capture_output=True, check=False,
                       env={**os.environ, "CONTAINERS_STORAGE_CONF": str(storage)})
        shutil.rmtree(root, ignore_errors=True)
