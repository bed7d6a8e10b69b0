"""The build stage: check the lock, fetch, compile what is not cached, assemble the image.

Nothing is rebuilt whose key is already built; a patch change rebuilds only the assembly.
"Built" has one truth, the store's image record (manifest, config and new layer blobs, all
present: ``assemble.image_record``); the engine's copy is derived from it. So an unchanged
spec builds nothing when the store holds the record and the engine the same image; when the
engine lost the image the store's record is handed to it again, nothing compiled; when the
store lost the record (a new ``--store``, a cleaned cache, gc) the record is made again, from
the store's cached layers where it has them, even though the engine still holds the image:
push, save and ``build --check`` read the store, never the engine.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sparkimg.compile.bounds import Overrides, derive
from sparkimg.engine.protocol import Engine
from sparkimg.events import Event, Kind, Phase, Reporter, Steps, silent
from sparkimg.formats.oci import BaseImage, ImageRecord
from sparkimg.formats.record import LayerRecord
from sparkimg.formats.scheme import BaseScheme
from sparkimg.formats.steps import Step
from sparkimg.lock import resolve as lock_mod
from sparkimg.lock.resolve import Lock
from sparkimg.plan.keys import KEY_LABEL, Keyed, Plan, compute, image_ref, is_built, layer_keys, layer_record, remember
from sparkimg.spec import CompileLayer, Spec
from sparkimg.store.content import Store

BUILDER = "sparkimg-oci"  # what assembles the image: sparkimg itself, no Dockerfile


@dataclass(frozen=True)
class BuildResult:
    """What the build stage made (or found made): the plan, the image in the engine and in the
    store, which layers it built and their records. Made once; the check, prewarm, SBOM and
    receipt that follow are told beside it (``pipeline.build.Built``)."""

    plan: Plan
    image_ref: str
    image_id: str | None
    built: tuple[str, ...] = ()
    records: Mapping[str, LayerRecord] = field(default_factory=dict)
    builder: str | None = None
    started: float = 0.0
    finished: float = 0.0
    blobs: Mapping[str, str] = field(default_factory=dict)
    engine: Mapping[str, str | None] = field(default_factory=dict)
    oci: ImageRecord | None = None
    loaded: bool = False  # nothing built: the store's image handed to an engine that had lost it
    steps: tuple[Step, ...] = ()  # fetch, compile and assemble per layer, load: what each took

    def to_json(self) -> dict[str, Any]:
        return {
            "image": {"reference": self.image_ref, "id": self.image_id},
            "loaded_from_store": self.loaded,
            "oci": None if self.oci is None else {"manifest": self.oci.manifest_digest,
                                                  "config": self.oci.config_digest,
                                                  "diff_ids": [layer.diff_id for layer in self.oci.layers]},
            "layers": [{**layer.to_json(), "written": self.written(layer.name),
                        "wall_s": self.layer_seconds(layer.name)} for layer in self.plan.layers],
        }

    def written(self, name: str) -> bool:
        """Whether this build wrote the image layer(s) of spec layer ``name`` (``cached`` says only
        that its input, a wheel or a compile's outputs, was in the store: a layer blob removed by
        ``store verify --repair`` is written again from a cached wheel); "image": whether the image
        was built."""
        if name == "image":
            return "image" in self.built
        return any(s.within_assembly for s in self._steps_of(name))

    def layer_seconds(self, name: str) -> float | None:
        """What this build spent on a spec layer (its compile, and the writing of its image layers;
        "image": the load), or None when it spent nothing on it."""
        found = [s.wall_s for s in self._steps_of(name)] if name != "image" else \
            [s.wall_s for s in self.steps if s.name in ("assemble", "load") and s.layer is None]
        return round(sum(found), 3) if found else None

    def _steps_of(self, name: str) -> list[Step]:
        """The steps of spec layer ``name``: its compile, and the writing of its image layers (``NAME``,
        and ``NAME/WHEEL`` for a compile layer's large wheel)."""
        return [s for s in self.steps if s.layer is not None and (s.layer == name or s.layer.startswith(name + "/"))]


def built_image(engine: Engine, spec: Spec, key: str) -> str | None:
    """The one place that asks the engine whether it holds an image key: the image ID when the
    key's tag is there and carries that key in its label, else None (one engine call)."""
    info = engine.inspect(image_ref(spec, key))
    if info is None or info.labels.get(KEY_LABEL) != key:
        return None
    return info.id


@dataclass(frozen=True)
class ImageState:
    """Where an image key is: the store's record of it (the truth) and the engine's copy."""

    record: ImageRecord | None
    engine_id: str | None

    @property
    def built(self) -> bool:
        """In the store, and the engine holds that very image: nothing to do."""
        return self.record is not None and self.engine_id is not None \
            and _matching(self.record, self.engine_id) is not None


def image_state(store: Store, engine: Engine, spec: Spec, key: str) -> ImageState:
    from sparkimg.image.assemble import image_record

    return ImageState(image_record(store, key), built_image(engine, spec, key))


def _engine_info(engine: Engine, builder: str | None) -> dict[str, str | None]:
    return {"client": engine.version, "server": engine.server_version(), "builder": builder}


def described(result: BuildResult, store: Store, engine: Engine, report: Reporter = silent) -> BuildResult:
    """A no-op's result with what a fresh build records besides: the store entries of its inputs
    (fetched again where missing, with no engine needed) and the engine that built it. For a
    receipt written again after its statement was lost, so it carries the same fields."""
    from sparkimg.fetch.inputs import fetch

    fetched = fetch(result.plan.spec, result.plan.lock, store, None, report=report)
    return replace(result, blobs=dict(fetched.blobs),
                   engine=_engine_info(engine, BUILDER if result.oci is not None else engine.builder))


def compile_records(plan: Plan, store: Store) -> dict[str, LayerRecord]:
    """The store's record of each compile layer of the plan that is built (those not built are absent)."""
    found = {layer.name: layer_record(store, plan.layer(layer.name).key) for layer in plan.spec.layers
             if isinstance(layer, CompileLayer)}
    return {name: record for name, record in found.items() if record is not None}


def build(
    spec: Spec,
    lock: Lock,
    store: Store,
    engine: Engine,
    overrides: Overrides | None = None,
    *,
    report: Reporter = silent,
    keyed: tuple[Keyed, ...] | None = None,
) -> BuildResult:
    """Build the image of ``spec`` and ``lock`` (``keyed``: its layers' keys, when the caller has
    them already), compiling only what is not in the store; nothing at all when the store holds
    its record and the engine that very image."""
    started = time.time()
    overrides = overrides or Overrides()
    lock_mod.check(spec, lock, store)
    keyed = keyed or layer_keys(spec, lock)
    key = keyed[-1].key
    state = image_state(store, engine, spec, key)
    if state.built:
        # Every layer is in the image already; none is rebuilt and the engine builds nothing.
        plan = compute(spec, lock, store, image_built=True, keyed=keyed).all_cached()
        return BuildResult(plan, plan.image_ref, state.engine_id, records=compile_records(plan, store),
                           started=started, finished=time.time(), engine={"client": engine.version},
                           oci=state.record)
    if state.record is not None:
        return _load_again(compute(spec, lock, store, image_built=True, keyed=keyed).all_cached(), store, engine,
                           state.record, started, report)
    if state.engine_id is not None:
        report(Event(Phase.ASSEMBLE, f"{image_ref(spec, key)}: the engine holds it but the store "
                     f"({store.root}) has no record of it; building the store's record again", "image", Kind.LOG))
    # What a rebuild needs, imported only when there is one (a no-op build stays cheap to start).
    from sparkimg.fetch.inputs import fetch
    from sparkimg.image.assemble import image_record

    steps = Steps()
    plan = compute(spec, lock, store, keyed=keyed)
    with steps.timed("fetch"):
        fetched = fetch(spec, lock, store, engine, report=report)
    # vLLM's own architecture selection, before any compile starts (answered from the store when
    # asked before): a collapse fails here in a second instead of at the audit hours later.
    if any(not plan.layer(layer.name).cached for layer in spec.layers if isinstance(layer, CompileLayer)):
        from sparkimg.source.preflight import run as run_preflight

        with steps.timed("preflight"):
            run_preflight(spec, lock, store, report=report)
    assert fetched.base_tag is not None
    records: dict[str, LayerRecord] = {}
    built: list[str] = []
    for layer in spec.layers:
        planned = plan.layer(layer.name)
        if not isinstance(layer, CompileLayer):
            continue
        # One build per key at a time: a concurrent build of the same layer waits, then reuses it.
        with store.lock(f"layer-{planned.key}"):
            if planned.cached or is_built(planned.kind, planned.key, planned.inputs, store):
                record = layer_record(store, planned.key)
                assert record is not None
                records[layer.name] = record
                report(Event(Phase.COMPILE, f"compile {layer.name}: cached ({planned.key[:12]})", layer.name))
                continue
            from sparkimg.compile.container import (
                compile_layer,  # only when a layer compiles: a patch-only build skips it
            )

            budget = derive(layer.bounds, overrides, layer=layer.name)
            with steps.timed("compile", layer.name):
                records[layer.name] = record = compile_layer(
                    spec, lock, layer, planned, fetched.blobs[layer.source], lock.base.config_digest,
                    store, engine, budget, report, fetched.blobs,
                )
            report(Event(Phase.COMPILE, f"compile {layer.name}: built in {record.metrics.wall_s:.1f} s",
                         layer.name, Kind.DONE, {**record.metrics.to_json(), "jobs": record.jobs}))
        built.append(layer.name)
    image = plan.image
    oci_record: ImageRecord | None = None
    with store.lock(f"image-{image.key}"):
        oci_record = image_record(store, image.key)
        if oci_record is not None:
            report(Event(Phase.ASSEMBLE, f"assemble {plan.image_ref}: built meanwhile by another build", "image"))
            image_id = into_engine(plan, oci_record, fetched.base_tag, store, engine, report, steps=steps)
            builder = None
        else:
            report(Event(Phase.ASSEMBLE, f"assemble {plan.image_ref}", "image"))
            oci_record, image_id = assemble_and_load(plan, fetched.base_tag, records, store, engine, report, steps)
            builder = BUILDER
            built.append("image")
    # A layer another build finished while this one waited is reported as cached, as it was not rebuilt.
    plan = replace(plan, layers=tuple(
        replace(layer, cached=True) if layer.kind != "wheel" and layer.name not in built else layer
        for layer in plan.layers))
    remember(plan, store)
    return BuildResult(plan, plan.image_ref, image_id, tuple(built), records, builder, started, time.time(),
                       blobs=dict(fetched.blobs), engine=_engine_info(engine, builder), oci=oci_record,
                       steps=tuple(steps.done))


def _matching(record: ImageRecord | None, image_id: str) -> ImageRecord | None:
    """The store's record of an image only when it is the image the engine holds: one engine may
    serve several stores, and a record from another build must not name this image."""
    if record is None or image_id not in (record.config_digest, record.manifest_digest):
        return None
    return record


def assemble_and_load(plan: Plan, base_tag: str, records: dict[str, LayerRecord], store: Store, engine: Engine,
                      report: Reporter, steps: Steps) -> tuple[ImageRecord, str]:
    """Write the image into the store (``assemble``) and load it into the engine; the record and
    the engine's name for the image. Where it pays, the engine is fed the first layers while the
    others are written (``image.feed``)."""
    from sparkimg.fetch.inputs import base_image
    from sparkimg.image import feed
    from sparkimg.image.assemble import assemble

    base = base_image(plan.lock, store, report=report)
    feeder = feed.Feeder(engine, store, base, plan.lock.source_date_epoch, report) \
        if feed.feeds(engine) and _new_bytes(plan, records) >= feed.FEED_BYTES else None
    try:
        with steps.timed("assemble"):
            record = assemble(plan, records, store, lambda: base_scheme_of(engine, base_tag, plan, store), base,
                              report, steps=steps, on_layer=feeder.add if feeder is not None else None)
        if feeder is not None:
            with steps.timed("feed"):  # the engine finishing what it was fed while the layers were written
                feeder.finish()
        return record, into_engine(plan, record, base_tag, store, engine, report, base, steps=steps)
    finally:
        if feeder is not None:
            feeder.close()


def _new_bytes(plan: Plan, records: dict[str, LayerRecord]) -> int:
    """About how many bytes the image's new layers hold (their wheels' sizes): whether feeding pays."""
    from sparkimg.formats.lockfile import PypiPin

    total = sum(o.size for record in records.values() for o in record.outputs)
    for layer in plan.spec.layers:
        source = plan.lock.sources.get(layer.source)
        if not isinstance(layer, CompileLayer) and isinstance(source, PypiPin):
            total += source.size or 0
    return total


def into_engine(plan: Plan, record: ImageRecord, base_tag: str, store: Store, engine: Engine,
                report: Reporter, base: BaseImage | None = None, *, steps: Steps) -> str:
    """The engine's ID of ``record`` under the plan's tag: loaded from the store unless the engine
    holds that very image already (the store's record was made again for an image it kept)."""
    from sparkimg.fetch.inputs import base_image
    from sparkimg.image.load import load_image

    held = built_image(engine, plan.spec, plan.image.key)
    if held is not None and _matching(record, held) is not None:
        report(Event(Phase.ASSEMBLE, f"load {plan.image_ref}: the engine holds this very image already", "image"))
        return held
    previous = (store.read_record("state", plan.spec.name) or {}).get("image")
    known = [base_tag] + ([previous] if isinstance(previous, str) else [])
    base = base or base_image(plan.lock, store, report=report)
    with steps.timed("load"):
        return load_image(engine, store, record, base, plan.image_ref, known, report).image_id


def _load_again(plan: Plan, store: Store, engine: Engine, record: ImageRecord, started: float,
                report: Reporter) -> BuildResult:
    """The store holds the image and the engine does not (removed, pruned, a fresh node): hand the
    store's record to the engine again; nothing is compiled or assembled."""
    from sparkimg.fetch.inputs import fetch

    spec, lock = plan.spec, plan.lock
    report(Event(Phase.ASSEMBLE, f"{plan.image_ref}: in the store, not in the engine; loading it again, "
                 "nothing built", "image"))
    steps = Steps()
    with steps.timed("fetch"):
        fetched = fetch(spec, lock, store, engine, report=report)
    assert fetched.base_tag is not None
    image_id = into_engine(plan, record, fetched.base_tag, store, engine, report, steps=steps)
    remember(plan, store)
    return BuildResult(plan, plan.image_ref, image_id, records=compile_records(plan, store), started=started,
                       finished=time.time(), blobs=dict(fetched.blobs), engine=_engine_info(engine, BUILDER),
                       oci=record, loaded=True, steps=tuple(steps.done))


def base_scheme_of(engine: Engine, base_tag: str, plan: Plan, store: Store) -> BaseScheme:
    from sparkimg.base.pyscheme import base_scheme

    return base_scheme(engine, base_tag, plan.lock.base.config_digest, store)
