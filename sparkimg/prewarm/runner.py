"""Where the prewarm worker runs: inside the image (bounded container) or in a host Python.

Both runners start ``worker.py`` with the same job file and environment and hand every
line it prints to ``on_line``; the worker's events are parsed by the caller. The image
runner mounts the cache at one fixed container path, because FlashInfer writes absolute
paths into each module's build.ninja: the serving container must see the cache at the
path it was compiled under, or ninja rebuilds it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..build.bounds import Budget
from ..engine import Engine, Mount, RunLimits
from ..errors import UsageError

WORKER = Path(__file__).with_name("worker.py")
CONTAINER_BASE = "/var/cache/sparkimg/flashinfer"
LineFn = Callable[[str], None]


class Runner(Protocol):
    name: str
    # A host CUDA toolkit mounted into the container; serving needs it too, since FlashInfer
    # asks nvcc for its version even to load a module it does not compile.
    toolchain: Mount | None

    def base(self, cache: Path) -> str:
        """FLASHINFER_WORKSPACE_BASE as the worker sees ``cache``."""
        ...

    def run(self, action: str, job: Mapping[str, Any], cache: Path | None, env: Mapping[str, str],
            on_line: LineFn) -> int:
        """Run ``worker.py ACTION``; ``cache`` None means a throwaway workspace (for ``list``)."""
        ...


def _job_folder(job: Mapping[str, Any]) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="sparkimg-prewarm-"))
    shutil.copy2(WORKER, folder / "worker.py")
    (folder / "job.json").write_text(json.dumps(job, indent=2, sort_keys=True))
    folder.chmod(0o755)
    return folder


@dataclass(frozen=True)
class HostRunner:
    """The worker in a Python environment on this machine (bare metal, or a test venv)."""

    python: str
    cuda_home: str | None = None
    name: str = "host"
    toolchain: Mount | None = None

    def base(self, cache: Path) -> str:
        return str(cache.resolve())

    def run(self, action: str, job: Mapping[str, Any], cache: Path | None, env: Mapping[str, str],
            on_line: LineFn) -> int:
        if shutil.which(self.python) is None and not Path(self.python).is_file():
            raise UsageError(f"--python {self.python}: no such interpreter",
                             hint="pass the interpreter of the environment that serves (with flashinfer-python)")
        folder = _job_folder(job)
        scratch = Path(tempfile.mkdtemp(prefix="sparkimg-list-")) if cache is None else None
        try:
            merged = {**os.environ, **env, "FLASHINFER_WORKSPACE_BASE": str(scratch or self.base(cache or Path()))}
            if self.cuda_home and "CUDA_HOME" not in os.environ:
                merged.update({"CUDA_HOME": self.cuda_home, "PATH": f"{self.cuda_home}/bin:{merged.get('PATH', '')}"})
            proc = subprocess.Popen([self.python, str(folder / "worker.py"), action, str(folder / "job.json")],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=merged, text=True)
            assert proc.stdout is not None
            for line in proc.stdout:
                on_line(line.rstrip("\n"))
            return proc.wait()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)


@dataclass(frozen=True)
class ImageRunner:
    """The worker inside the serving image: its FlashInfer, torch and nvcc, no network, bounded."""

    engine: Engine
    image: str
    budget: Budget
    toolchain: Mount | None = None
    gpus: bool = False
    name: str = "image"

    def base(self, cache: Path) -> str:
        return CONTAINER_BASE

    def run(self, action: str, job: Mapping[str, Any], cache: Path | None, env: Mapping[str, str],
            on_line: LineFn) -> int:
        folder = _job_folder(job)
        try:
            mounts = [Mount(folder, "/sparkimg")]
            base = "/tmp/sparkimg-list" if cache is None else CONTAINER_BASE
            if cache is not None:
                mounts.append(Mount(cache.resolve(), CONTAINER_BASE, writable=True))
            full_env = {**env, "FLASHINFER_WORKSPACE_BASE": base}
            if self.toolchain is not None:
                # CUDA_HOME only: FlashInfer runs $CUDA_HOME/bin/nvcc, and PATH stays the image's
                # (its Python environment, with ninja).
                mounts.append(self.toolchain)
                full_env["CUDA_HOME"] = self.toolchain.target
            b = self.budget
            result = self.engine.run_bounded(
                self.image, ["python3", "/sparkimg/worker.py", action, "/sparkimg/job.json"],
                limits=RunLimits(b.memory, b.cpus, b.cpuset, b.pids, b.cgroup_parent), mounts=mounts,
                env=full_env, gpus=self.gpus, log=lambda _layer, _phase, line: on_line(line),
                layer="prewarm", phase=action)
            if result.oom_killed:
                on_line(f"the prewarm container was killed by the OOM killer at its memory bound ({b.memory} bytes)")
            return result.exit_code
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def has_gpu() -> bool:
    """A GPU is passed to the container only where one is present (``--gpus all`` fails otherwise)."""
    return shutil.which("nvidia-smi") is not None and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True, check=False).returncode == 0
