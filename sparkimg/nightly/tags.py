"""The moving tag (``IMAGE:nightly`` in the engine, ``REPO:nightly`` in the registry): where the
build in service is found. Promotion and rollback move it; nothing else does."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator

from sparkimg._internal.net.registry import MANIFEST_TYPES, ImageRef, RegistryClient
from sparkimg.engine.protocol import Engine
from sparkimg.errors import ResolveError, UsageError
from sparkimg.spec import Spec

MOVING_TAG = "nightly"


def engine_tag(spec: Spec) -> str:
    return f"{spec.image}:{MOVING_TAG}"


def point_engine(engine: Engine, spec: Spec, reference: str) -> str:
    """Tag the local image ``reference`` as the spec's moving tag; the image ID it now names."""
    image_id = engine.image_id(reference)
    if image_id is None:
        raise UsageError(f"{reference}: not in this engine any more",
                         hint="pull it again by digest from the registry it was pushed to, or build that "
                         "entry's lock with `sparkimg build`")
    engine.tag(reference, engine_tag(spec))
    return image_id


def point_registry(repository: str, manifest: str, *, client: RegistryClient | None = None) -> None:
    """Point ``repository``'s moving tag at the manifest ``manifest`` it already holds (the
    manifest's bytes are read by digest and written again under the tag: its digest is unchanged)."""
    from sparkimg.distribution.push import put_manifest

    client = client or RegistryClient()
    raw = client.manifest_bytes(repository, manifest)
    media_type = json.loads(raw).get("mediaType") or MANIFEST_TYPES[0]
    put_manifest(client, ImageRef.parse(repository), MOVING_TAG, raw, str(media_type), manifest)


class _Mover:
    """Moves the moving tags and remembers where they were (see ``moved_back``)."""

    def __init__(self, engine: Engine, spec: Spec, repository: str | None, client: RegistryClient | None) -> None:
        self._engine, self._spec, self._repository, self._client = engine, spec, repository, client
        self._undo: list[Callable[[], None]] = []

    def registry(self, manifest: str) -> None:
        assert self._repository is not None
        repository, client = self._repository, self._client or RegistryClient()
        try:
            before: str | None = client.tagged(repository, MOVING_TAG)
        except ResolveError:
            before = None  # no moving tag yet: a registry cannot remove a tag, so it is left on the new one
        point_registry(repository, manifest, client=client)
        if before is not None and before != manifest:
            self._undo.append(lambda: point_registry(repository, before, client=client))

    def engine(self, reference: str) -> None:
        tag = engine_tag(self._spec)
        before = self._engine.image_id(tag)
        point_engine(self._engine, self._spec, reference)
        self._undo.append(lambda: self._engine.tag(before, tag) if before is not None
                          else self._engine.remove_image(tag))

    def undo(self) -> None:
        for step in reversed(self._undo):
            with contextlib.suppress(Exception):  # best effort: the original failure is what is reported
                step()


@contextlib.contextmanager
def moved_back(engine: Engine, spec: Spec, repository: str | None,
               client: RegistryClient | None = None) -> Iterator[_Mover]:
    """Move the moving tags inside the block (the registry's with ``client``: reached as the push
    was); should the block fail, each tag it moved is put back where it was, so a failed promotion
    or rollback leaves the build in service named as it was."""
    mover = _Mover(engine, spec, repository, client)
    try:
        yield mover
    except BaseException:
        mover.undo()
        raise
