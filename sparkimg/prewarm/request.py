"""``sparkimg prewarm``: which image's kernel set (a spec's built image, an image, a receipt's)
and where it compiles (inside the image, bounded, or in a host Python), resolved once for
listing, compiling and verifying a cache."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sparkimg._internal.units import format_size
from sparkimg.compile.bounds import Budget, Overrides, derive
from sparkimg.engine.connect import connect
from sparkimg.engine.protocol import Engine
from sparkimg.errors import UsageError
from sparkimg.events import Event, Kind, Phase, Reporter, silent
from sparkimg.prewarm import targets
from sparkimg.prewarm.runner import HostRunner, compile_path, runner_for
from sparkimg.prewarm.targets import Target
from sparkimg.prewarm.verify import Expect, verify
from sparkimg.prewarm.verify import Report as CacheReport
from sparkimg.prewarm.warm import Events, Result, list_modules, prewarm
from sparkimg.signing.keys import load_public, signing_key
from sparkimg.spec import Arch, load_spec


@dataclass(frozen=True)
class PrewarmRequest:
    """Which image's kernel set (exactly one of spec, image, receipt) and where it compiles."""

    cache: Path | None
    spec: Path | None = None
    image: str | None = None
    receipt: Path | None = None
    runner: Literal["image", "host"] = "image"
    python: str | None = None
    image_id: str | None = None
    overrides: Overrides | None = None
    store: Path | None = None  # where a ``cuda: wheels`` toolkit is unpacked (the default store when None)


@dataclass(frozen=True)
class Setup:
    target: Target
    budget: Budget
    engine: Engine | None


def cache_of(request: PrewarmRequest) -> Path:
    """The cache folder a prewarm or a verify works on; it is required."""
    if request.cache is None:
        raise UsageError("--cache DIR is required", hint="name the folder the serving container will mount")
    return request.cache


def setup(request: PrewarmRequest, report: Reporter = silent) -> Setup:
    """The target (its kernel set and image), the budget, and the engine when it runs in an image."""
    if request.runner != "host" and (request.image_id or request.python):
        raise UsageError("--image-id and --python go with --runner host",
                         hint="inside an image, sparkimg records the image's own ID and uses its own Python")
    if request.python and shutil.which(request.python) is None and not Path(request.python).is_file():
        raise UsageError(f"--python {request.python}: no such interpreter",
                         hint="pass the interpreter of the environment that serves (with flashinfer-python)")
    engine: Engine | None = None
    spec = load_spec(request.spec) if request.spec is not None else None
    if spec is not None and request.runner == "host":
        target = targets.on_host(targets.target_of_spec(spec), request.image_id)
    else:
        engine = connect()
        if spec is not None:
            target = targets.for_built_spec(spec, engine)
        elif request.receipt is not None:
            target = targets.for_receipt(request.receipt, engine)
        elif request.image is not None:
            target = targets.for_image(request.image, engine)
        else:
            raise UsageError("name the image: --spec, --image or --receipt")
        if request.runner == "host":
            target = targets.on_host(target, request.image_id)
    if spec is not None:
        targets.unpack_toolkit(spec, request.store, report)
    budget = derive(target.kernels.bounds, request.overrides or Overrides(), layer="prewarm")
    return Setup(target, budget, engine)


def listed(request: PrewarmRequest, report: Reporter = silent) -> tuple[Target, Events]:
    """Resolve the kernel set where it will run; compile nothing."""
    found = setup(request, report)
    runner = runner_for(request.runner, found.target, engine=found.engine, budget=found.budget,
                        python=request.python, store=request.store)
    return found.target, list_modules(found.target, runner, report)


def warmed(request: PrewarmRequest, key: Path | None = None, report: Reporter = silent) -> Result:
    """Compile the kernel set into ``request.cache`` and write its (signed) manifest."""
    cache = cache_of(request)
    found = setup(request, report)
    runner = runner_for(request.runner, found.target, engine=found.engine, budget=found.budget,
                        python=request.python, store=request.store)
    signer = signing_key(key)
    target, budget = found.target, found.budget
    where = target.image_ref or f"this Python ({request.python or sys.executable})"
    report(Event(Phase.PREWARM, f"prewarm {len(target.kernels.modules)} modules for {where}: {budget.jobs} job(s), "
                 f"memory {format_size(budget.memory)}" + (", network none" if request.runner == "image" else
                                                          ", no cgroup bound (host runner)"),
                 figures={"modules": len(target.kernels.modules), "jobs": budget.jobs, "memory": budget.memory}))
    result = prewarm(target, runner, cache, budget, signer, report)
    if signer is None:
        report(Event(Phase.PREWARM, f"{result.manifest} is NOT signed; pass --key or set SPARKIMG_KEY",
                     kind=Kind.WARNING))
    return result


def verified(request: PrewarmRequest, key: Path | None, *, quick: bool = False,
             archs: Sequence[str] = ()) -> CacheReport:
    """Check a cache against its signed manifest and the image (``quick``: signature and sizes)."""
    cache = cache_of(request)
    if key is None:
        raise UsageError("--verify needs --key PUB, the trusted public key", hint="the .pub of the signing key")
    target = setup(request).target
    host = request.runner == "host"
    # In an image, the image ID stands for its FlashInfer; a host Python is asked.
    flashinfer = HostRunner(request.python or sys.executable).flashinfer_version() if host and not quick else None
    expect = Expect(tuple(Arch(a) for a in archs) if archs else target.archs, target.image_id, flashinfer,
                    compile_path(request.runner, cache))
    return verify(cache, load_public(key), expect, quick=quick)
