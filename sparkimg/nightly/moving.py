"""What moves in a spec, what moved between two locks, and which layers that touches.

``moving_inputs`` and ``moved`` and ``layer_changes`` are pure (spec and locks in, names out);
``details`` asks git, the registry and the index for dates and subjects, best effort: a
question that fails leaves ``{}`` and never fails the night.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkimg.formats.lockfile import BasePin, GitPin, LockFile, PathPin, PypiPin, SourcePin
from sparkimg.formats.nightly import Moved
from sparkimg.lock.resolve import Lock
from sparkimg.plan.keys import key_of, layer_inputs
from sparkimg.spec import GitSource, PypiSource, Spec
from sparkimg.store.content import Store


def moving_inputs(spec: Spec) -> list[str]:
    """The inputs a lock pins from something that moves: the base named by a tag with no digest,
    a git ``ref`` with no ``commit``, a PyPI ``version: latest``."""
    names = ["base"] if spec.base.digest is None else []
    names += [name for name, source in spec.sources.items()
              if isinstance(source, GitSource | PypiSource) and source.moving]
    return names


def _value(pin: BasePin | SourcePin) -> tuple[str, str]:
    """(kind, what a person compares) of one pin."""
    if isinstance(pin, BasePin):
        return "image", pin.manifest_digest
    if isinstance(pin, GitPin):
        return "git", pin.commit
    if isinstance(pin, PypiPin):
        return "pypi", pin.version
    return "path", f"sha256:{pin.sha256}"


def _same(before: BasePin | SourcePin, after: BasePin | SourcePin) -> bool:
    if isinstance(before, BasePin) and isinstance(after, BasePin):
        return (before.manifest_digest, before.config_digest) == (after.manifest_digest, after.config_digest)
    if isinstance(before, PypiPin) and isinstance(after, PypiPin):
        return (before.version, before.sha256) == (after.version, after.sha256)
    if isinstance(before, GitPin | PathPin) and isinstance(after, GitPin | PathPin):
        return before.identity == after.identity
    return False


@dataclass(frozen=True)
class Change:
    """One input whose pin differs between the current lock and the candidate."""

    input: str
    kind: str
    before: BasePin | SourcePin | None
    after: BasePin | SourcePin

    def plain(self) -> Moved:
        """The move without details (dates, subjects)."""
        return Moved(self.input, self.kind, None if self.before is None else _value(self.before)[1],
                     _value(self.after)[1])


def moved(current: LockFile | None, candidate: LockFile) -> list[Change]:
    """Every input whose resolution changed, base first, then sources in the spec's order; with no
    current lock, none (a first night has nothing to compare with)."""
    if current is None:
        return []
    changes: list[Change] = []
    if not _same(current.base, candidate.base):
        changes.append(Change("base", "image", current.base, candidate.base))
    for name, pin in candidate.sources.items():
        before = current.sources.get(name)
        if before is None or not _same(before, pin):
            changes.append(Change(name, _value(pin)[0], before, pin))
    return changes


def _reason_of(name: str, changed: list[str], sources: Mapping[str, str]) -> str:
    """Why a layer's key changed, from the names of its inputs that differ."""
    said: list[str] = []
    for key in changed:
        if key == "base":
            text = "base moved"
        elif key == "source":
            text = f"source {sources.get(name, name)} moved"
        elif key.startswith("input."):
            text = f"input {key.removeprefix('input.')} moved"
        elif key in ("wheel", "filename"):
            text = f"source {sources.get(name, name)} moved"
        elif key.startswith("layer."):
            text = f"layer {key.removeprefix('layer.')} changed"
        elif key in ("lock", "spec", "source_date_epoch"):
            continue  # every move changes the lock: the image's other inputs say which
        else:
            text = f"{key} changed"
        if text not in said:
            said.append(text)
    return ", ".join(said) or "lock changed"


def layer_changes(spec: Spec, current: Lock | None, candidate: Lock) -> dict[str, tuple[str, str | None]]:
    """Each layer (the image last) -> (its key under the candidate, why it differs from the current
    lock's, or None when it is the same key). With no current lock every layer is new."""
    sources = {layer.name: layer.source for layer in spec.layers}
    before = {name: inputs for name, _, inputs in layer_inputs(spec, current)} if current is not None else {}
    out: dict[str, tuple[str, str | None]] = {}
    for name, kind, inputs in layer_inputs(spec, candidate):
        old = before.get(name)
        if old is None:
            out[name] = (key_of(kind, inputs), "first build")
            continue
        changed = sorted(k for k in set(old) | set(inputs) if old.get(k) != inputs.get(k))
        out[name] = (key_of(kind, inputs), _reason_of(name, changed, sources) if changed else None)
    return out


# -- details: dates and subjects, best effort --------------------------------------------------


def details(change: Change, spec: Spec, store: Store) -> Moved:
    """``change`` with the dates (and commit subjects) of both sides, where they can be found."""
    plain = change.plain()
    return Moved(plain.input, plain.kind, plain.before, plain.after,
                 _detail(change.before, spec, store) if change.before is not None else {},
                 _detail(change.after, spec, store))


def _detail(pin: BasePin | SourcePin, spec: Spec, store: Store) -> dict[str, Any]:
    import requests

    from sparkimg.errors import SparkimgError

    try:
        if isinstance(pin, GitPin):
            from sparkimg._internal.net import git as _git

            return _git.describe(_git.mirror_path(store, pin.url), pin.commit)
        if isinstance(pin, BasePin):
            from sparkimg._internal.net.registry import RegistryClient

            client = RegistryClient.for_base(pin.repository, pin.transport)
            _, config = client.inspect(pin.repository, pin.manifest_digest, pin.platform)
            created = config.get("created")
            return {"date": created, "config": pin.config_digest} if isinstance(created, str) \
                else {"config": pin.config_digest}
        if isinstance(pin, PypiPin):
            from sparkimg._internal.net import pypi as _pypi

            uploaded = _pypi.upload_time(pin.package, pin.filename)
            return {"date": uploaded, "sha256": pin.sha256} if uploaded else {"sha256": pin.sha256}
    except (SparkimgError, OSError, requests.RequestException, ValueError, KeyError):
        return {}
    return {}
