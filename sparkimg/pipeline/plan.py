"""``sparkimg plan``: each layer's key, whether it is built and what changed since the last
build (the image asked of the store and the engine together), and ``--dockerfile``, the
equivalent Dockerfile for a person to read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkimg.errors import EngineError, UsageError
from sparkimg.events import Event, Kind, Phase, Reporter, silent
from sparkimg.fetch.inputs import base_tag
from sparkimg.image.assemble import labels
from sparkimg.image.build import compile_records, image_state
from sparkimg.image.dockerfile import dockerfile, wheels
from sparkimg.lock.resolve import load_checked
from sparkimg.pipeline.context import engine_of, spec_of
from sparkimg.plan.keys import Plan, compute, image_key
from sparkimg.source.preflight import run as run_preflight
from sparkimg.store.content import Store


@dataclass(frozen=True)
class Planned:
    plan: Plan
    image_id: str | None


def planned(spec_path: Path, store: Store, report: Reporter = silent) -> Planned:
    """The plan, after vLLM's preflight; without an engine the image shows as to build."""
    spec = spec_of(spec_path, report)
    lock = load_checked(spec, store)
    run_preflight(spec, lock, store, report=report)
    try:
        state = image_state(store, engine_of(store), spec, image_key(spec, lock))
        image_id = state.engine_id if state.built else None
    except EngineError as exc:
        report(Event(Phase.PLAN, f"no engine ({exc.message}); the image layer shows as to build", kind=Kind.WARNING))
        image_id = None
    return Planned(compute(spec, lock, store, image_built=image_id is not None), image_id)


def dockerfile_of(spec_path: Path, store: Store, report: Reporter = silent) -> str:
    """The Dockerfile equivalent of the image sparkimg assembles (FROM the pinned base, the wheels
    installed by pip, the baked patch files, env and labels); it names the wheels each compile
    layer built, so those must be built."""
    spec = spec_of(spec_path, report, store)
    lock = load_checked(spec, store)
    plan = compute(spec, lock, store)
    records = compile_records(plan, store)
    for layer in plan.layers:
        if layer.kind == "compile" and layer.name not in records:
            raise UsageError(f"plan --dockerfile: compile layer {layer.name} is not built yet; the Dockerfile "
                             "names the wheels it builds", hint=f"run `sparkimg build {spec_path}` first")
    return dockerfile(plan, base_tag(spec, lock), wheels(plan, records), labels(plan))
