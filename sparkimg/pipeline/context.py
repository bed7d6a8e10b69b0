"""What every command starts from: the spec (its warnings said), the store, the engine chosen for
it, and, for the commands that send a built image somewhere, that image's store record."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from sparkimg.engine.connect import connect
from sparkimg.engine.protocol import Engine
from sparkimg.errors import UsageError
from sparkimg.events import Event, Kind, Phase, Reporter, silent
from sparkimg.formats.oci import ImageRecord
from sparkimg.lock.resolve import Lock, load_checked
from sparkimg.spec import Spec, load_spec
from sparkimg.store.content import Store


def spec_of(spec_path: Path, report: Reporter = silent, store: Store | None = None) -> Spec:
    """The validated spec at ``spec_path`` (SpecError lists every problem); its warnings are reported.
    With a store, the YAML parse is remembered there by the file's sha256 (``spec.located``)."""
    spec = load_spec(spec_path, parsed=store.root / "records" / "parsed" if store is not None else None)
    for warning in spec.warnings:
        report(Event(Phase.SPEC, warning, kind=Kind.WARNING))
    return spec


def engine_of(store: Store) -> Engine:
    """The engine, with the client chosen before remembered in the store (no probe while the
    client binaries are unchanged; the daemon is asked by the first operation)."""
    return connect(remember=store.record_path("engine", "client"))


class Stored(NamedTuple):
    """A spec whose image the store holds: the spec, the store, its checked lock, the image key
    and the store's record of the image."""

    spec: Spec
    store: Store
    lock: Lock
    key: str
    record: ImageRecord


def stored_image(spec_path: Path, store: Store, report: Reporter) -> Stored:
    """The spec's image as the store holds it; refused, naming the command that makes it, when
    the store has none (push, save and ``sbom SPEC`` read the store, never the engine)."""
    from sparkimg.image.assemble import image_record
    from sparkimg.plan.keys import image_key

    spec = spec_of(spec_path, report)
    lock = load_checked(spec, store)
    key = image_key(spec, lock)
    record = image_record(store, key)
    if record is None:
        raise UsageError(f"{spec_path}: the store has no image for this spec and lock (key {key[:16]})",
                         hint=f"build it first: `sparkimg build {spec_path}`")
    return Stored(spec, store, lock, key, record)
