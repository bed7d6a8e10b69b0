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
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sparkimg._internal.units import format_size
from sparkimg.compile.bounds import Budget
from sparkimg.engine.protocol import Engine, Mount, RunLimits
from sparkimg.errors import OOMError, UsageError

if TYPE_CHECKING:
    from sparkimg.prewarm.targets import Target

WORKER = Path(__file__).with_name("worker.py")
CONTAINER_BASE = "/var/cache/sparkimg/flashinfer"
LineFn = Callable[[str], None]


def compile_path(runner: str, cache: Path) -> str:
    """FLASHINFER_WORKSPACE_BASE while compiling: the path a cache must be served at."""
    return CONTAINER_BASE if runner == "image" else str(cache.resolve())


class Runner(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def toolchain(self) -> Mount | None:
        """A host CUDA toolkit mounted into the container; serving needs it too, since
        FlashInfer asks nvcc for its version even to load a module it does not compile."""
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

    def flashinfer_version(self) -> str:
        """The FlashInfer this interpreter has (its package metadata: no import, no CUDA)."""
        probe = "import importlib.metadata as m; print(m.version('flashinfer-python'))"
        run = subprocess.run([self.python, "-c", probe], capture_output=True, text=True, check=False)
        return run.stdout.strip() if run.returncode == 0 else "(not installed)"

    def run(self, action: str, job: Mapping[str, Any], cache: Path | None, env: Mapping[str, str],
            on_line: LineFn) -> int:
        folder = _job_folder(job)
        scratch = Path(tempfile.mkdtemp(prefix="sparkimg-list-")) if cache is None else None
        try:
            base = str(scratch) if cache is None else compile_path(self.name, cache)
            merged = {**os.environ, **env, "FLASHINFER_WORKSPACE_BASE": base}
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

    def run(self, action: str, job: Mapping[str, Any], cache: Path | None, env: Mapping[str, str],
            on_line: LineFn) -> int:
        folder = _job_folder(job)
        try:
            mounts = [Mount(folder, "/sparkimg")]
            base = "/tmp/sparkimg-list" if cache is None else compile_path(self.name, cache)
            if cache is not None:
                mounts.append(Mount(cache.resolve(), base, writable=True))
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
                raise OOMError(f"prewarm: the container was killed by the OOM killer at its memory bound "
                               f"{format_size(b.memory)} ({b.jobs} job(s) of {format_size(b.job_memory)} each); "
                               "modules finished before it are kept",
                               hint="raise prewarm.memory (or --memory), or raise prewarm.job_memory so fewer "
                               "jobs run at once; then run prewarm again")
            return result.exit_code
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def runner_for(kind: str, target: Target, *, engine: Engine | None, budget: Budget,
               python: str | None = None, store: Path | None = None) -> Runner:
    """The runner ``--runner KIND`` names: the target's image through ``engine``, or ``python``;
    ``store``: where a ``cuda: wheels`` toolkit is (the default store when None)."""
    toolchain = toolkit_mount(target, store)
    if kind == "host":  # CUDA_HOME: a host toolkit by the spec's own path, the wheels' tree where the store has it
        wheels = toolchain is not None and target.toolchain.get("cuda") == "wheels"
        home = str(toolchain.source) if toolchain is not None and wheels else target.toolchain.get("path")
        return HostRunner(python or sys.executable, home)
    if engine is None or target.image_id is None:
        raise UsageError("the image runner needs an image in the engine", hint="pass --spec, --image or --receipt")
    return ImageRunner(engine, target.image_id, budget, toolchain, gpus=has_gpu())


def toolkit_mount(target: Target, store: Path | None) -> Mount | None:
    """The CUDA toolkit FlashInfer compiles with, mounted read-only where the image's compile
    layers saw it: a host toolkit at its own path, or the toolkit wheels' tree the store unpacked
    for the spec's lock (``compile.toolkit``, at ``toolkit.MOUNT``); None when the image has nvcc."""
    from sparkimg.compile import toolkit
    from sparkimg.store.content import default_root

    toolchain = target.toolchain
    if toolchain.get("cuda") == "host" and (path := toolchain.get("path")):
        return Mount(Path(path).resolve(), path)
    if toolchain.get("cuda") != "wheels":
        return None
    identity, root = toolchain.get("toolkit"), (store or default_root()).expanduser().absolute()
    where = target.image_ref or "the spec"
    if not identity:
        raise UsageError(f"{where}: its toolchain is NVIDIA's toolkit wheels, but it does not say which (an image "
                         "built before sparkimg recorded it)", hint="prewarm with --spec SPEC, or build it again")
    tree = toolkit.at(root, identity)
    if not (tree / "bin" / "nvcc").is_file():
        raise UsageError(f"{where}: its CUDA toolkit ({identity[:16]}, from the lock's toolkit wheels) is not in the "
                         f"store {root}", hint="build the image's spec with this store first (`sparkimg build SPEC`), "
                         "or pass --store with the store that built it")
    return Mount(tree, toolkit.MOUNT)


def has_gpu() -> bool:
    """A GPU is passed to the container only where one is present (``--gpus all`` fails otherwise)."""
    return shutil.which("nvidia-smi") is not None and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True, check=False).returncode == 0
