"""The nights kept, a known-good mark, and rolling back to a known-good night.

``promote`` records the operator's own qualification of a built night; ``rollback`` puts a
known-good night back in service: its lock (byte for byte, so its image key is the same), its
image under the moving tag in the engine and, where it was pushed, in the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg._internal.fs.atomic import write_atomic
from sparkimg._internal.net.reach import recorded
from sparkimg._internal.net.registry import RegistryClient
from sparkimg.engine.protocol import Engine
from sparkimg.errors import UsageError
from sparkimg.formats.canonical import sha256_prefixed
from sparkimg.formats.nightly import Entry
from sparkimg.lock import resolve as lock_mod
from sparkimg.nightly.state import State
from sparkimg.nightly.tags import MOVING_TAG, engine_tag, moved_back
from sparkimg.spec import Spec


@dataclass(frozen=True)
class History:
    entries: tuple[Entry, ...]
    current: str | None
    folder: Path

    def to_json(self) -> dict[str, Any]:
        return {"state": str(self.folder), "current": self.current,
                "entries": [{**e.to_json(), "current": e.entry == self.current} for e in self.entries]}


def history(state: State) -> History:
    return History(tuple(state.entries()), state.current(), state.root)


def promote(state: State, entry_id: str) -> Entry:
    """Mark a built night known-good (rollback goes only to those)."""
    with state.locked():
        entry = state.get(entry_id)
        if entry.status != "built":
            raise UsageError(f"nightly entry {entry_id} is {entry.status}, not built: only a built image can be "
                             "known-good", hint="list the built ones with `sparkimg history SPEC`")
        marked = entry.marked(True)
        state.update(marked)
        return marked


@dataclass(frozen=True)
class Rolled:
    entry: Entry
    lock: Path
    tags: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"entry": self.entry.entry, "lock": str(self.lock), "lock_digest": self.entry.lock_digest,
                "image": None if self.entry.image is None else self.entry.image.report(), "tags": list(self.tags)}


def rollback(spec: Spec, state: State, entry_id: str, engine: Engine) -> Rolled:
    """Put the known-good night ``entry_id`` back in service. Everything is checked before anything
    moves; then the registry's moving tag, the engine's, the lock, and the state's pointer."""
    with state.locked():
        entry = state.get(entry_id)
        if entry.status != "built" or entry.image is None:
            raise UsageError(f"nightly entry {entry_id} is {entry.status}: there is no build to go back to",
                             hint="pick a built, known-good entry from `sparkimg history SPEC`")
        if not entry.known_good:
            raise UsageError(f"nightly entry {entry_id} is not marked known-good",
                             hint=f"qualify it, then `sparkimg promote {spec.path} {entry_id}`")
        raw = state.lock_bytes(entry_id)
        if raw is None or sha256_prefixed(raw) != entry.lock_digest:
            raise UsageError(f"{state.folder(entry_id)}: its lock.json is missing or not the lock it built from",
                             hint="pick another known-good entry")
        if entry.spec != spec.path.name or _spec_digest(raw) != spec.digest:
            raise UsageError(f"nightly entry {entry_id} was built from {entry.spec} as it was then, not from "
                             f"{spec.path} as it is now", hint="roll back with the state folder of this spec; "
                             "after a spec change, build the entry's lock with its own spec")
        found = engine.image_id(entry.image.reference)
        if found is None:
            raise UsageError(f"{entry.image.reference}: the image of {entry_id} is no longer in this engine",
                             hint=f"pull it by digest ({entry.image.repository or 'its registry'}@"
                             f"{entry.image.manifest}) and tag it {entry.image.reference}, then roll back again")
        if entry.image.config is not None and found not in (entry.image.config, entry.image.manifest):
            raise UsageError(f"{entry.image.reference} is {found} in this engine, not the image {entry.image.config} "
                             f"entry {entry_id} built", hint="pull the entry's image by digest and tag it so")
        tags = []
        repository = entry.image.repository if entry.image.manifest is not None else None
        with moved_back(engine, spec, repository, RegistryClient(reach=recorded(entry.image.registry))) as move:
            if repository is not None and entry.image.manifest is not None:
                move.registry(entry.image.manifest)
                tags.append(f"{repository}:{MOVING_TAG}")
            move.engine(entry.image.reference)
            tags.append(engine_tag(spec))
            write_atomic(lock_mod.lock_path(spec), raw)
        state.set_current(entry_id)
        return Rolled(entry, lock_mod.lock_path(spec), tuple(tags))


def _spec_digest(raw: bytes) -> str | None:
    """The spec digest a lock's bytes record (None when they are no lock)."""
    from sparkimg.formats.canonical import loads

    try:
        found = loads(raw).get("spec", {}).get("digest")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None
