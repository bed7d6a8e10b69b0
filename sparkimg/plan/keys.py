"""The plan: a cache key per layer, computed only from what changes its output.

A key covers the base digest, source digests, command, env, CUDA architectures, toolchain
and parent keys; never the job count, the bounds or the time. What a compile layer's container
is given (``compile.container.container_env`` and its mounts) comes only from what its key names,
so one key always means one set of bytes (tests/unit/plan/test_one_key_one_output.py). The plan is pure over the
spec, the lock and the store's records: whether the image is built (in the store, and that
image in the engine) is asked in one place (``image.build.image_state``) and handed in as
``image_built``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from sparkimg.formats.canonical import digest_of
from sparkimg.formats.lockfile import GitPin, PypiPin
from sparkimg.formats.record import LayerRecord
from sparkimg.lock.resolve import Lock
from sparkimg.spec import CompileLayer, Spec, substitute
from sparkimg.store.content import Store

KEY_VERSION = "sparkimg-key/1"
ASSEMBLY_VERSION = "sparkimg-assembly/2"  # 2: sparkimg writes the image (OCI layers), no Dockerfile
# What a compile layer does to its outputs after the command (``build.compile``: wheel zips in one
# form, nvcc's pid out of ELF names); a change here means other bytes for the same inputs.
OUTPUT_FORM = "sparkimg-outputs/1"
KEY_LABEL = "dev.sparkimg.key"
# 1980-01-01T00:00:00Z: the earliest date a zip member can hold (wheels are zips).
ZIP_EPOCH = 315532800
RECORDS = "layers"
FIRST_BUILD = "(first build)"  # what ``changed`` holds for a spec never built with this store


@dataclass(frozen=True)
class PlannedLayer:
    name: str
    kind: str
    key: str
    inputs: dict[str, str]
    cached: bool = False
    changed: tuple[str, ...] = field(default=())

    @property
    def first_build(self) -> bool:
        """No build of this spec recorded its inputs before: nothing to say changed."""
        return self.changed == (FIRST_BUILD,)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "key": self.key, "cached": self.cached}

    def to_plan_json(self) -> dict[str, Any]:
        """``plan --json``'s layer: also which inputs changed since the last build (the table's column)."""
        return {**self.to_json(), "first_build": self.first_build,
                "changed": [] if self.first_build else list(self.changed)}


@dataclass(frozen=True)
class Plan:
    spec: Spec
    lock: Lock
    layers: tuple[PlannedLayer, ...]

    @property
    def image(self) -> PlannedLayer:
        return self.layers[-1]

    @property
    def image_ref(self) -> str:
        return image_ref(self.spec, self.image.key)

    def layer(self, name: str) -> PlannedLayer:
        return next(layer for layer in self.layers if layer.name == name)

    def all_cached(self) -> Plan:
        """The plan of a build that rebuilt nothing."""
        return replace(self, layers=tuple(replace(layer, cached=True) for layer in self.layers))


def image_ref(spec: Spec, key: str) -> str:
    """The local tag of the image a key builds: the spec's image name and the key's first 16 hex digits."""
    return f"{spec.image}:{key[:16]}"


def compile_epoch(lock: Lock, layer: CompileLayer) -> int:
    """The SOURCE_DATE_EPOCH a compile layer builds with and dates its wheels' members by: the
    commit time of its own source when that is a git commit (fixed by the commit its key names),
    else the zip epoch. Never the lock's epoch, which moves with any git source of the spec and
    with the clock for a spec without one: a FlashInfer layer must not change when vLLM moves."""
    source = lock.sources[layer.source]
    return source.committed if isinstance(source, GitPin) else ZIP_EPOCH


def layer_inputs(spec: Spec, lock: Lock) -> list[tuple[str, str, dict[str, str]]]:
    """(name, kind, inputs) for every layer, the image assembly last. Pure: no I/O."""
    base = lock.base
    result: list[tuple[str, str, dict[str, str]]] = []
    keys: dict[str, str] = {}
    variables = spec.variables()
    for layer in spec.layers:
        source = lock.sources[layer.source]
        if isinstance(layer, CompileLayer):
            inputs = {
                "platform": lock.platform,
                "base": base.config_digest,
                "source": digest_of(source.identity),
                "command": digest_of(substitute(layer.command, variables)),
                "cuda_architectures": ";".join(a.text for a in spec.cuda_architectures),
                "toolchain": digest_of(lock.toolchain.to_json()),
                "outputs": layer.outputs,
                "output_form": OUTPUT_FORM,
                "source_date_epoch": str(compile_epoch(lock, layer)),
            }
            for key, value in sorted(layer.env.items()):
                inputs[f"env.{key}"] = digest_of(substitute(value, variables))
            # Patches applied to the source, in order (only when listed: other keys stay as they were).
            for index, written in enumerate(layer.source_patches):
                inputs[f"source_patch.{index}"] = f"{lock.source_patches.get(written, '')} {written}"
            for name in layer.inputs:
                inputs[f"input.{name}"] = digest_of(lock.sources[name].identity)
            if layer.compiler_cache is not None:  # the tool, not its size: sccache's objects are its own
                inputs["compiler_cache"] = digest_of(lock.sources[layer.compiler_cache.source].identity)
            kind = "compile"
        else:
            assert isinstance(source, PypiPin), "the spec checks that a wheel layer takes a pypi source"
            inputs = {"wheel": source.sha256, "filename": source.filename}
            kind = "wheel"
        key = digest_of({"v": KEY_VERSION, "kind": kind, "inputs": inputs})
        keys[layer.name] = key
        result.append((layer.name, kind, inputs))
    image_inputs = {
        "assembly": ASSEMBLY_VERSION,
        "platform": lock.platform,
        "base": f"{base.manifest_digest} {base.config_digest}",
        "spec": spec.digest,
        "lock": lock.digest,
        "source_date_epoch": str(lock.source_date_epoch),
        "image": spec.image,
    }
    for name, key in keys.items():
        image_inputs[f"layer.{name}"] = key
    for set_name, entry in sorted(lock.patches.items()):
        image_inputs[f"patches.{set_name}.mode"] = entry.mode
        for item in entry.files:
            image_inputs[f"patches.{set_name}/{item.file}"] = f"{item.sha256} {item.mount}"
    for key, value in sorted(spec.env.items()):
        image_inputs[f"env.{key}"] = digest_of(value)
    for key, value in sorted(spec.labels.items()):
        image_inputs[f"label.{key}"] = digest_of(value)
    result.append(("image", "image", image_inputs))
    return result


def key_of(kind: str, inputs: dict[str, str]) -> str:
    return digest_of({"v": KEY_VERSION, "kind": kind, "inputs": inputs})


@dataclass(frozen=True)
class Keyed:
    """One layer's key and the inputs it is made of (pure over the spec and the lock)."""

    name: str
    kind: str
    inputs: dict[str, str]
    key: str


def layer_keys(spec: Spec, lock: Lock) -> tuple[Keyed, ...]:
    """Every layer's key, the image's last: computed once per build, for its lease
    (``store.roots``) and its plan (``compute``)."""
    return tuple(Keyed(name, kind, inputs, key_of(kind, inputs)) for name, kind, inputs in layer_inputs(spec, lock))


def compute(spec: Spec, lock: Lock, store: Store, *, image_built: bool = False,
            keyed: tuple[Keyed, ...] | None = None) -> Plan:
    """Keys (``keyed``, when the caller has them), cached state and changes since the last build
    of this spec. Pure over the spec, the lock and the store's records; ``image_built`` is
    ``image_state(...).built`` for the image key."""
    previous = (store.read_record("state", spec.name) or {}).get("layers", {})
    planned: list[PlannedLayer] = []
    for layer in keyed if keyed is not None else layer_keys(spec, lock):
        cached = image_built if layer.kind == "image" else is_built(layer.kind, layer.key, layer.inputs, store)
        planned.append(PlannedLayer(layer.name, layer.kind, layer.key, layer.inputs, cached,
                                    _changed(previous.get(layer.name), layer.inputs)))
    return Plan(spec, lock, tuple(planned))


def image_key(spec: Spec, lock: Lock) -> str:
    """The image layer's key alone: what a no-op build compares before anything else."""
    _, kind, inputs = layer_inputs(spec, lock)[-1]
    return key_of(kind, inputs)


def layer_record(store: Store, key: str) -> LayerRecord | None:
    """A compile layer's record from the store, typed; None when it was never built."""
    data = store.read_record(RECORDS, key)
    return None if data is None else LayerRecord.from_json(data, f"{store.root}/records/{RECORDS}/{key}")


def is_built(kind: str, key: str, inputs: dict[str, str], store: Store) -> bool:
    """A compile layer is built when its record and every output are in the store; a wheel when
    its file is. The image is asked of the store and the engine together (``image.build.image_state``)."""
    if kind == "compile":
        record = layer_record(store, key)
        return record is not None and all(store.has(o.sha256) for o in record.outputs)
    if kind == "wheel":
        return store.has(inputs["wheel"])
    raise ValueError(f"is_built: the {kind} layer is asked of the engine")


def remember(plan: Plan, store: Store) -> None:
    """Record this build's inputs so the next plan can say what changed."""
    store.write_record("state", plan.spec.name, {
        "layers": {layer.name: layer.inputs for layer in plan.layers},
        "image": plan.image_ref,
    })


def _changed(before: dict[str, str] | None, now: dict[str, str]) -> tuple[str, ...]:
    if before is None:
        return (FIRST_BUILD,)
    names = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
    return tuple(names)
