"""The build stage: check the lock, fetch, compile what is not cached, assemble the image.

Nothing is rebuilt whose key is already built: an unchanged spec does no engine build at
all, and a patch change rebuilds only the assembly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .. import lock as lock_mod
from ..engine import Engine, LogFn
from ..fetch import fetch
from ..lock import Lock
from ..plan import Plan, compute, is_built, remember
from ..spec import CompileLayer, Spec
from ..store import Store
from .assemble import assemble
from .bounds import Overrides, derive
from .compile import compile_layer

Status = Callable[[str], None]


def _quiet_status(message: str) -> None:
    return None


def _quiet_log(layer: str, phase: str, line: str) -> None:
    return None


@dataclass
class BuildResult:
    plan: Plan
    image_ref: str
    image_id: str | None
    built: list[str] = field(default_factory=list)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    builder: str | None = None
    started: float = 0.0
    finished: float = 0.0
    blobs: dict[str, str] = field(default_factory=dict)
    engine: dict[str, str | None] = field(default_factory=dict)
    receipt: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "image": {"reference": self.image_ref, "id": self.image_id},
            "receipt": self.receipt,
            "layers": [layer.to_json() for layer in self.plan.layers],
        }


def _engine_info(engine: Engine, builder: str | None) -> dict[str, str | None]:
    return {"client": engine.version, "server": engine.server_version(), "builder": builder}


def build(
    spec: Spec,
    lock: Lock,
    store: Store,
    engine: Engine,
    overrides: Overrides | None = None,
    *,
    status: Status = _quiet_status,
    log: LogFn = _quiet_log,
) -> BuildResult:
    started = time.time()
    overrides = overrides or Overrides()
    lock_mod.check(spec, lock)
    plan = compute(spec, lock, store, engine)
    if plan.image.cached:
        # Every layer is in the image already; none is rebuilt and the engine builds nothing.
        plan = replace(plan, layers=tuple(replace(layer, cached=True) for layer in plan.layers))
        kept = {layer.name: store.read_record("layers", plan.layer(layer.name).key) for layer in spec.layers
                if isinstance(layer, CompileLayer)}
        return BuildResult(plan, plan.image_ref, engine.image_id(plan.image_ref),
                           records={k: v for k, v in kept.items() if v is not None}, started=started,
                           finished=time.time(), engine={"client": engine.version})
    fetched = fetch(spec, lock, store, engine, log=status)
    assert fetched.base_tag is not None
    records: dict[str, dict[str, Any]] = {}
    built: list[str] = []
    for layer in spec.layers:
        planned = plan.layer(layer.name)
        if not isinstance(layer, CompileLayer):
            continue
        # One build per key at a time: a concurrent build of the same layer waits, then reuses it.
        with store.lock(f"layer-{planned.key}"):
            if planned.cached or is_built(planned.kind, planned.key, planned.inputs, store, engine, spec):
                record = store.read_record("layers", planned.key)
                assert record is not None
                records[layer.name] = record
                status(f"compile {layer.name}: cached ({planned.key[:12]})")
                continue
            budget = derive(layer.bounds, overrides, layer=layer.name)
            records[layer.name] = compile_layer(
                spec, lock, layer, planned, fetched.blobs[layer.source], lock.base["config_digest"],
                store, engine, budget, log, status,
            )
        built.append(layer.name)
    image = plan.image
    with store.lock(f"image-{image.key}"):
        if is_built(image.kind, image.key, image.inputs, store, engine, spec):
            image_id = engine.image_id(plan.image_ref)
            status(f"assemble {plan.image_ref}: built meanwhile by another build")
            builder = None
        else:
            status(f"assemble {plan.image_ref}")
            image_id, builder = assemble(plan, fetched.base_tag, records, store, engine, log)
            built.append("image")
    # A layer another build finished while this one waited is reported as cached, as it was not rebuilt.
    plan = replace(plan, layers=tuple(
        replace(layer, cached=True) if layer.kind != "wheel" and layer.name not in built else layer
        for layer in plan.layers))
    remember(plan, store)
    return BuildResult(plan, plan.image_ref, image_id, built, records, builder, started, time.time(),
                       blobs=dict(fetched.blobs), engine=_engine_info(engine, builder))
