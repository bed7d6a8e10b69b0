"""``sparkimg prewarm``: compile the FlashInfer JIT modules an image needs before it serves.

A ``Target`` says what to warm (the kernel set, the architectures, the image); a runner
says where the worker runs (``runner.py``). ``prewarm`` compiles what is missing, in
parallel within the job budget, and writes the signed manifest (``manifest.py``) only
when every module is built; ``verify.py`` checks a cache against it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkimg._internal.fs.hashing import digest_file
from sparkimg.compile.bounds import Budget
from sparkimg.errors import BuildError
from sparkimg.events import Event, Figure, Kind, Phase, Reporter, silent
from sparkimg.formats.canonical import loads
from sparkimg.formats.statement import Descriptor
from sparkimg.prewarm import manifest
from sparkimg.prewarm.runner import Runner
from sparkimg.prewarm.targets import Target
from sparkimg.prewarm.worker import EVENT, JOURNAL
from sparkimg.signing.keys import PrivateKey

if TYPE_CHECKING:
    from sparkimg.compile.bounds import Overrides
    from sparkimg.engine.protocol import Engine
    from sparkimg.image.build import BuildResult
    from sparkimg.spec import Spec


@dataclass
class Events:
    """The worker's events, collected and reported as typed events; other output lines are
    kept as the log tail."""

    report: Reporter = silent
    total: int = 0
    env: dict[str, Any] = field(default_factory=dict)
    modules: list[dict[str, Any]] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)

    def line(self, text: str) -> None:
        if not text.startswith(EVENT):
            self.tail = [*self.tail[-40:], text]
            self.report(Event(Phase.PREWARM, text, kind=Kind.LOG))
            return
        try:
            event = loads(text[len(EVENT):])
        except ValueError:
            return
        kind, name = event.pop("event"), event.get("name", "")
        if kind == "env":
            self.env = event
            self.report(Event(Phase.PREWARM, f"prewarm: FlashInfer {event.get('flashinfer')}, torch "
                              f"{event.get('torch')}, {event.get('nvcc') or 'no nvcc'}, workspace "
                              f"{event.get('base')}/{event.get('workspace')}", figures=_figures(event)))
        elif kind == "module":
            self.modules.append(event)
        elif kind == "start":
            self.status[name] = kind
            self.report(Event(Phase.PREWARM, f"prewarm {name}: compiling", name))
        elif kind in ("cached", "compiled", "failed", "aot"):
            self.status[name] = kind
            if kind == "failed":
                self.errors.append(f"{name}: {event.get('error')}")
            done = sum(1 for state in self.status.values() if state != "start")
            took = f" in {event['seconds']:.1f} s" if kind == "compiled" else ""
            said = (f"provided by the image's AOT build ({event.get('provider')}), not compiled" if kind == "aot"
                    else kind)
            self.report(Event(Phase.PREWARM, f"prewarm [{done}/{self.total}] {name}: {said}{took}", name, Kind.DONE,
                              {**_figures(event), "status": kind, "done": done, "total": self.total}))
        elif kind == "error":
            self.errors.append(event["message"])


def _figures(event: dict[str, Any]) -> dict[str, Figure]:
    """The scalar fields of a worker event, as event figures."""
    return {k: v for k, v in event.items() if isinstance(v, (int, float, str, bool)) or v is None}


@dataclass(frozen=True)
class Result:
    manifest: Path
    modules: list[dict[str, Any]]
    env: dict[str, Any]
    seconds: float
    workers: int
    jobs_per_module: int
    signed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"manifest": str(self.manifest), "modules": self.modules, "flashinfer": self.env.get("flashinfer"),
                "seconds": round(self.seconds, 3), "workers": self.workers, "jobs_per_module": self.jobs_per_module,
                "signed": self.signed}


def split_jobs(budget: Budget, modules: int) -> tuple[int, int]:
    """(modules compiled at once, ninja jobs each): the job budget spread over modules first,
    since one module's few sources leave most of its own ninja jobs idle."""
    workers = max(1, min(budget.jobs, modules))
    return workers, max(1, math.floor(budget.jobs / workers))


def worker_env(target: Target, jobs_per_module: int) -> dict[str, str]:
    """The spec's own prewarm env (FlashInfer flags, LIBRARY_PATH), then what sparkimg sets."""
    return {**target.kernels.env, "FLASHINFER_CUDA_ARCH_LIST": target.arch_list, "MAX_JOBS": str(jobs_per_module),
            "PYTHONUNBUFFERED": "1"}


def _job(target: Target, workers: int) -> dict[str, Any]:
    """The worker's job file: the modules to resolve, and how many to compile at once."""
    return {"modules": [m.to_json() for m in target.kernels.modules], "workers": workers}


def list_modules(target: Target, runner: Runner, report: Reporter = silent) -> Events:
    """Resolve the kernel set where it will run: each module's name and library path as FlashInfer sees them."""
    events = Events(report, len(target.kernels.modules))
    code = runner.run("list", _job(target, 1), None, worker_env(target, 1), events.line)
    if code == NO_FLASHINFER and not events.env:
        return _unresolved(target, runner, events, report)
    _raise_for(code, events, "list the kernel set")
    return events


NO_FLASHINFER = 3  # the worker's exit when FlashInfer is not importable (before it says its env)


def _unresolved(target: Target, runner: Runner, events: Events, report: Reporter) -> Events:
    """The kernel set as the spec gives it, where FlashInfer cannot be imported (a build host, a
    laptop): each module's generator and arguments, with no name or library path, which only
    FlashInfer can tell. Said as a warning, not a failure: what the spec asks for is known."""
    report(Event(Phase.PREWARM, f"{'; '.join(events.errors) or 'FlashInfer is not importable'} "
                 f"({runner.name} runner): the {len(target.kernels.modules)} module(s) are listed as the spec "
                 "gives them, unresolved (no name, library or AOT provider); list them where they are served "
                 "(--runner image, or --runner host --python PY with flashinfer-python) to resolve them",
                 kind=Kind.WARNING))
    return replace(events, errors=[], modules=[{**m.to_json(), "name": None, "resolved": False}
                                               for m in target.kernels.modules])


def prewarm(target: Target, runner: Runner, cache: Path, budget: Budget, key: PrivateKey | None,
            report: Reporter = silent) -> Result:
    """Compile every missing module into ``cache``, then write its signed manifest."""
    started = time.monotonic()
    cache.mkdir(parents=True, exist_ok=True)
    workers, per_module = split_jobs(budget, len(target.kernels.modules))
    events = Events(report, len(target.kernels.modules))
    # The worker holds the cache's lock while it compiles (a container outlives a killed
    # sparkimg); the manifest is replaced only after every module is built.
    code = runner.run("build", _job(target, workers), cache, worker_env(target, per_module), events.line)
    _raise_for(code, events, "prewarm")
    records = [aot_record(module) if events.status.get(module["name"]) == "aot"
               else {**_journal(cache, module["name"]), "aot": False} for module in events.modules]
    data = manifest.statement(env=events.env, modules=records, archs=[a.text for a in target.archs],
                              image=target.image(), runner=runner.name, toolchain=runner.toolchain)
    path, _ = manifest.write(cache, data, key)
    modules = [{"name": m["name"], "status": events.status.get(m["name"], "unknown")} for m in events.modules]
    return Result(path, modules, events.env, time.monotonic() - started, workers, per_module, key is not None)


def aot_record(module: dict[str, Any]) -> dict[str, Any]:
    """The manifest entry of a module the image provides ahead of time: no files in the cache;
    its library is the AOT build's path inside the image (the manifest is bound to that image's ID)."""
    provided = module.get("aot_provider") or {}
    return {"name": module["name"], "library": str(provided.get("path", "")), "files": [], "aot": True,
            "seconds": None, "module": {"generator": module["generator"], "args": list(module.get("args", [])),
                                        "kwargs": dict(sorted(dict(module.get("kwargs", {})).items()))}}


def receipt_entry(result: Result) -> Descriptor:
    """The receipt byproduct that records a prewarm run as part of a build."""
    return Descriptor("prewarm", f"file:{result.manifest}", {"sha256": digest_file(result.manifest)["sha256"]},
                      media_type="application/vnd.dsse.envelope.v1+json",
                      annotations={"predicateType": manifest.PREDICATE_TYPE, "flashinfer": result.env.get("flashinfer"),
                                   "modules": [m["name"] for m in result.modules]})


def _journal(cache: Path, name: str) -> dict[str, Any]:
    try:
        data: dict[str, Any] = loads((cache / JOURNAL / f"{name}.json").read_text())
    except (OSError, ValueError):
        raise BuildError(f"prewarm: module {name} reported built, but its journal record is missing") from None
    return data


def _raise_for(code: int, events: Events, what: str) -> None:
    if code == 0 and not events.errors:
        return
    detail = "\n".join(f"    {e}" for e in events.errors) or "\n".join(f"    {t}" for t in events.tail[-15:])
    hint = ("run it in the serving environment (the image, or --runner host --python PY with flashinfer-python)"
            if code == 3 else "see the compile output above; a rerun resumes with the modules already built")
    raise BuildError(f"{what} failed (worker exit {code}):\n{detail}", hint=hint)


def prewarm_built(spec: Spec, result: BuildResult, engine: Engine, cache: Path, overrides: Overrides,
                  key: PrivateKey | None, report: Reporter, store: Path | None = None) -> tuple[Result, Descriptor]:
    """``build --prewarm``: the spec's kernel set compiled inside the image just built; the result
    and its entry for the receipt."""
    from sparkimg.compile.bounds import derive
    from sparkimg.prewarm.runner import runner_for
    from sparkimg.prewarm.targets import target_of_spec, unpack_toolkit

    unpack_toolkit(spec, store, report)
    target = target_of_spec(spec, image_ref=result.image_ref, image_id=result.image_id)
    budget = derive(target.kernels.bounds, overrides, layer="prewarm")
    runner = runner_for("image", target, engine=engine, budget=budget, store=store)
    warmed = prewarm(target, runner, cache, budget, key, report)
    return warmed, receipt_entry(warmed)
