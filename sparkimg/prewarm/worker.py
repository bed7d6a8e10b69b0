"""The prewarm worker: runs where the cache will be used (inside the image, or the host's
Python) and drives FlashInfer's own JIT, so every name, path and flag is FlashInfer's.

It imports nothing from sparkimg: it is copied into the container and run by the image's
own interpreter. It reads a job file, prints one ``SPARKIMG-EVENT {json}`` line per
event on stdout, and keeps a journal of finished modules under the cache folder. A
module counts as built only when its journal record exists and every file it lists is
still there with the same size and sha256; anything else (an interrupted compile, a
truncated .so) is deleted and compiled again.

Usage: ``python3 worker.py list|build JOB.json``. FlashInfer reads its settings from the
environment the caller sets: FLASHINFER_WORKSPACE_BASE, FLASHINFER_CUDA_ARCH_LIST,
CUDA_HOME, MAX_JOBS.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import hashlib
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

EVENT = "SPARKIMG-EVENT "
STATE = ".sparkimg-prewarm"
JOURNAL = f"{STATE}/modules"
# FlashInfer opens this log for appending at import; in a read-only cache it must point
# somewhere writable, so the finished cache holds a link to the container's /tmp.
LOG_NAME = "flashinfer_jit.log"
LOG_TARGET = "/tmp/flashinfer_jit.log"
# Variables FlashInfer writes into a module's build.ninja (paths, compilers, flags). A
# serving process must see the same values, or FlashInfer rewrites build.ninja and
# ninja recompiles the module; the manifest records them for run-args.
BUILD_ENV = (
    "FLASHINFER_WORKSPACE_BASE", "FLASHINFER_CUDA_ARCH_LIST", "CUDA_HOME", "CUDA_PATH", "CC", "CXX",
    "FLASHINFER_NVCC", "FLASHINFER_CXX_LAUNCHER", "FLASHINFER_NVCC_LAUNCHER", "FLASHINFER_NVCC_THREADS",
    "FLASHINFER_EXTRA_CFLAGS", "FLASHINFER_EXTRA_CUDAFLAGS", "FLASHINFER_EXTRA_LDFLAGS",
    "FLASHINFER_JIT_DEBUG", "FLASHINFER_JIT_LINEINFO",
)
_print_lock = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    with _print_lock:
        sys.stdout.write(EVENT + json.dumps({"event": event, **fields}, sort_keys=True) + "\n")
        sys.stdout.flush()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def argument(value: Any) -> Any:
    """``torch.NAME`` strings become torch attributes (dtypes); everything else is as written."""
    if isinstance(value, str) and value.startswith("torch."):
        import torch

        return getattr(torch, value.split(".", 1)[1])
    return value


def resolve(module: dict[str, Any]) -> Any:
    """The FlashInfer JitSpec for one module entry (calling the generator writes its generated sources)."""
    dotted, _, function = module["generator"].rpartition(".")
    generator = getattr(importlib.import_module(dotted), function)
    args = [argument(a) for a in module.get("args", [])]
    kwargs = {k: argument(v) for k, v in module.get("kwargs", {}).items()}
    return generator(*args, **kwargs)


class Workspace:
    """FlashInfer's cache layout under FLASHINFER_WORKSPACE_BASE, paths relative to that base."""

    def __init__(self) -> None:
        from flashinfer.jit import env as jit_env

        self.env = jit_env
        self.base = Path(jit_env.FLASHINFER_BASE_DIR).resolve()
        self.dir = Path(jit_env.FLASHINFER_WORKSPACE_DIR).resolve()
        self.jit_dir = Path(jit_env.FLASHINFER_JIT_DIR).resolve()

    def rel(self, path: Path) -> str:
        return Path(path).resolve().relative_to(self.base).as_posix()

    def files(self, spec: Any) -> list[Path]:
        """Every file of one module: its build folder, and its generated sources in the workspace."""
        found = [p for p in sorted(Path(spec.build_dir).rglob("*")) if p.is_file() and not p.is_symlink()]
        generated = Path(self.env.FLASHINFER_GEN_SRC_DIR) / spec.name  # attention configs (.inc) it includes
        if generated.is_dir():
            found += [p.resolve() for p in sorted(generated.rglob("*")) if p.is_file() and not p.is_symlink()]
        for source in spec.sources:
            source = Path(source).resolve()
            if self.dir in source.parents and source.is_file() and source not in found:
                found.append(source)
        return found

    def journal(self, name: str) -> Path:
        return self.base / JOURNAL / f"{name}.json"


def aot_provider(spec: Any) -> dict[str, Any] | None:
    """Where FlashInfer would load this module from instead of compiling it: an AOT build it
    finds itself (its own ``data/aot``, or a ``flashinfer.jit_cache.providers`` wheel such as
    the one sparkimg's AOT layer installs), as ``{"provider", "path"}``; None when it would JIT."""
    if not getattr(spec, "is_aot", False):
        return None
    artifacts = getattr(spec, "aot_artifacts", None) or ()
    if artifacts:
        first = artifacts[0]
        return {"provider": str(getattr(first, "provider_id", "flashinfer")), "path": str(first.path)}
    return {"provider": "flashinfer", "path": str(getattr(spec, "aot_path", ""))}


def describe(workspace: Workspace, spec: Any, module: dict[str, Any], index: int) -> dict[str, Any]:
    provided = aot_provider(spec)
    return {"index": index, "name": spec.name, "library": workspace.rel(spec.jit_library_path),
            "aot": provided is not None, "aot_provider": provided,
            "generator": module["generator"], "args": module.get("args", []), "kwargs": module.get("kwargs", {})}


def environment(workspace: Workspace) -> dict[str, Any]:
    import flashinfer

    try:
        from importlib.metadata import version

        flashinfer_version = version("flashinfer-python")
    except Exception:
        flashinfer_version = getattr(flashinfer, "__version__", "unknown")
    try:
        import torch

        torch_version = str(torch.__version__)
    except Exception:
        torch_version = None
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nvcc = Path(cuda_home) / "bin" / "nvcc"
    nvcc_version = None
    if nvcc.exists():
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=False).stdout
        nvcc_version = out.strip().splitlines()[-1] if out.strip() else None
    return {
        "flashinfer": flashinfer_version, "torch": torch_version, "python": platform.python_version(),
        "machine": platform.machine(), "nvcc": nvcc_version, "cuda_home": cuda_home,
        "cuda_arch_list": os.environ.get("FLASHINFER_CUDA_ARCH_LIST"),
        "base": str(workspace.base), "workspace": workspace.rel(workspace.dir),
        "arch_dir": workspace.dir.name, "build_env": {k: os.environ[k] for k in BUILD_ENV if k in os.environ},
    }


def is_done(workspace: Workspace, name: str) -> dict[str, Any] | None:
    """The journal record of a finished module, if every file it lists is still intact."""
    try:
        record = json.loads(workspace.journal(name).read_text())
        for item in record["files"]:
            path = workspace.base / item["path"]
            if path.stat().st_size != item["size"] or sha256_of(path) != item["sha256"]:
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if isinstance(record, dict) else None


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def compile_one(workspace: Workspace, spec: Any, entry: dict[str, Any]) -> dict[str, Any]:
    """Compile one module from a clean folder, then record its files in the journal."""
    workspace.journal(spec.name).unlink(missing_ok=True)
    shutil.rmtree(spec.build_dir, ignore_errors=True)
    started = time.monotonic()
    emit("start", name=spec.name)
    spec.build(verbose=False)
    seconds = round(time.monotonic() - started, 3)
    files = [{"path": workspace.rel(p), "size": p.stat().st_size, "sha256": sha256_of(p)}
             for p in workspace.files(spec)]
    record = {"name": spec.name, "module": entry, "files": files, "seconds": seconds,
              "library": workspace.rel(spec.jit_library_path)}
    write_atomic(workspace.journal(spec.name), (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    emit("compiled", name=spec.name, seconds=seconds)
    return record


def finish(workspace: Workspace) -> None:
    """Leave the cache usable read-only: FlashInfer's lock folder exists, its log points to /tmp."""
    (workspace.jit_dir / "tmp").mkdir(parents=True, exist_ok=True)
    log = workspace.dir / LOG_NAME
    if not (log.is_symlink() and os.readlink(log) == LOG_TARGET):
        temp = log.with_name(f".{LOG_NAME}.link")
        temp.unlink(missing_ok=True)
        temp.symlink_to(LOG_TARGET)
        os.replace(temp, log)


def watch_lease() -> None:
    """In a container sparkimg started, stop when that sparkimg is gone: it holds an flock on
    $SPARKIMG_LEASE while it waits for us, and the kernel lets go of it when it dies."""
    lease = os.environ.get("SPARKIMG_LEASE")
    if not lease or not Path(lease).is_file():
        return

    def watch() -> None:
        try:
            with open(lease, "rb") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # blocks while sparkimg holds it
        except OSError:
            return
        emit("error", message="the sparkimg that started this container is gone; stopping")
        os._exit(137)
    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("list", "build"):
        print(__doc__, file=sys.stderr)
        return 2
    job = json.loads(Path(argv[2]).read_text())
    watch_lease()
    try:
        workspace = Workspace()
    except ImportError as exc:
        emit("error", message=f"FlashInfer is not importable here ({exc}); prewarm needs the serving environment")
        return 3
    emit("env", **environment(workspace))
    if argv[1] == "list":
        return 0 if resolve_all(workspace, job) is not None else 3
    # One prewarm per cache at a time, held by whoever compiles: a container keeps it even
    # when the sparkimg that started it was killed, so a rerun waits instead of racing it.
    lock_path = workspace.base / STATE / "lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        specs = resolve_all(workspace, job)  # generators write their generated sources: under the lock
        return 3 if specs is None else build(workspace, specs, int(job.get("workers", 1)))


def resolve_all(workspace: Workspace, job: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]] | None:
    """Every module's JitSpec, each announced; None (after an error event) if one cannot be made."""
    specs = []
    for index, entry in enumerate(job["modules"]):
        try:
            spec = resolve(entry)
        except Exception as exc:
            emit("error", message=f"module {index} ({entry['generator']}): {type(exc).__name__}: {exc}")
            return None
        if not hasattr(spec, "build_dir"):
            emit("error", message=f"module {index} ({spec.name}) is not an nvcc JIT module; sparkimg prewarms those")
            return None
        specs.append((spec, entry))
        emit("module", **describe(workspace, spec, entry, index))
    return specs


def build(workspace: Workspace, specs: list[tuple[Any, dict[str, Any]]], workers: int) -> int:
    """Compile every module without an intact journal record, ``workers`` at a time. A module
    FlashInfer loads from an AOT build is not compiled: it is reported as ``aot``."""
    missing = []
    for spec, entry in specs:
        provided = aot_provider(spec)
        if provided is not None:
            # A copy compiled before the image had the AOT build would never be loaded: drop it.
            workspace.journal(spec.name).unlink(missing_ok=True)
            shutil.rmtree(spec.build_dir, ignore_errors=True)
            emit("aot", name=spec.name, **provided)
            continue
        record = is_done(workspace, spec.name)
        if record is not None:
            emit("cached", name=spec.name, seconds=record.get("seconds"))
        else:
            missing.append((spec, entry))
    failed = 0
    workers = max(1, min(workers, len(missing) or 1))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(compile_one, workspace, spec, entry): spec for spec, entry in missing}
        for future in concurrent.futures.as_completed(futures):
            spec = futures[future]
            try:
                future.result()
            except Exception as exc:
                failed += 1
                tail = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-8:]
                emit("failed", name=spec.name, error="\n".join(tail))
    if not failed:
        finish(workspace)
    emit("finished", ok=not failed, failed=failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
