"""The plan: a cache key per layer, computed only from what changes its output.

A key covers the base digest, source digests, command, env, CUDA architectures, toolchain
and parent keys; never the job count, the bounds or the time. ``plan`` also says which
layers are already built and which inputs changed since the last build of the spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .formats.canonical import digest_of
from .lock import Lock
from .spec import CompileLayer, Spec, substitute
from .store import Store

if TYPE_CHECKING:
    from .engine import Engine

KEY_VERSION = "sparkimg-key/1"
ASSEMBLY_VERSION = "sparkimg-assembly/1"
KEY_LABEL = "dev.sparkimg.key"


@dataclass(frozen=True)
class PlannedLayer:
    name: str
    kind: str
    key: str
    inputs: dict[str, str]
    cached: bool = False
    changed: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "key": self.key, "cached": self.cached}


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
        return f"{self.spec.image}:{self.image.key[:16]}"

    def layer(self, name: str) -> PlannedLayer:
        return next(layer for layer in self.layers if layer.name == name)


def layer_inputs(spec: Spec, lock: Lock) -> list[tuple[str, str, dict[str, str]]]:
    """(name, kind, inputs) for every layer, the image assembly last. Pure: no I/O."""
    base = lock.base
    result: list[tuple[str, str, dict[str, str]]] = []
    keys: dict[str, str] = {}
    variables = spec.variables()
    for layer in spec.layers:
        source = lock.sources[layer.source]
        if isinstance(layer, CompileLayer):
            identity = {"commit": source["commit"], "tree": source["tree"]} if source["kind"] == "git" \
                else {"sha256": source["sha256"]}
            inputs = {
                "platform": lock.platform,
                "base": base["config_digest"],
                "source": digest_of(identity),
                "command": digest_of(substitute(layer.command, variables)),
                "cuda_architectures": ";".join(a.text for a in spec.cuda_architectures),
                "toolchain": digest_of(lock.toolchain),
                "outputs": layer.outputs,
            }
            for key, value in sorted(layer.env.items()):
                inputs[f"env.{key}"] = digest_of(substitute(value, variables))
            kind = "compile"
        else:
            inputs = {"wheel": source["sha256"], "filename": source["filename"]}
            kind = "wheel"
        key = digest_of({"v": KEY_VERSION, "kind": kind, "inputs": inputs})
        keys[layer.name] = key
        result.append((layer.name, kind, inputs))
    image_inputs = {
        "assembly": ASSEMBLY_VERSION,
        "platform": lock.platform,
        "base": f"{base['manifest_digest']} {base['config_digest']}",
        "spec": spec.digest,
        "lock": lock.digest,
        "source_date_epoch": str(lock.source_date_epoch),
        "image": spec.image,
    }
    for name, key in keys.items():
        image_inputs[f"layer.{name}"] = key
    for set_name, entry in sorted(lock.patches.items()):
        image_inputs[f"patches.{set_name}.mode"] = entry["mode"]
        for item in entry["files"]:
            image_inputs[f"patches.{set_name}/{item['file']}"] = f"{item['sha256']} {item['mount']}"
    for key, value in sorted(spec.env.items()):
        image_inputs[f"env.{key}"] = digest_of(value)
    for key, value in sorted(spec.labels.items()):
        image_inputs[f"label.{key}"] = digest_of(value)
    result.append(("image", "image", image_inputs))
    return result


def key_of(kind: str, inputs: dict[str, str]) -> str:
    return digest_of({"v": KEY_VERSION, "kind": kind, "inputs": inputs})


def compute(spec: Spec, lock: Lock, store: Store, engine: Engine | None) -> Plan:
    """Keys, cached state and changes since the last build of this spec."""
    previous = (store.read_record("state", spec.name) or {}).get("layers", {})
    planned: list[PlannedLayer] = []
    for name, kind, inputs in layer_inputs(spec, lock):
        key = key_of(kind, inputs)
        cached = is_built(kind, key, inputs, store, engine, spec)
        changed = _changed(previous.get(name), inputs)
        planned.append(PlannedLayer(name, kind, key, inputs, cached, changed))
    return Plan(spec, lock, tuple(planned))


def is_built(kind: str, key: str, inputs: dict[str, str], store: Store, engine: Engine | None, spec: Spec) -> bool:
    if kind == "compile":
        record = store.read_record("layers", key)
        return bool(record) and all(store.has(o["sha256"]) for o in record["outputs"])  # type: ignore[index]
    if kind == "wheel":
        return store.has(inputs["wheel"])
    if engine is None:
        return False
    reference = f"{spec.image}:{key[:16]}"
    if engine.image_id(reference) is None:
        return False
    return engine.image_labels(reference).get(KEY_LABEL) == key


def remember(plan: Plan, store: Store) -> None:
    """Record this build's inputs so the next plan can say what changed."""
    store.write_record("state", plan.spec.name, {
        "layers": {layer.name: layer.inputs for layer in plan.layers},
        "image": plan.image_ref,
    })


def _changed(before: dict[str, str] | None, now: dict[str, str]) -> tuple[str, ...]:
    if before is None:
        return ("(first build)",)
    names = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
    return tuple(names)
