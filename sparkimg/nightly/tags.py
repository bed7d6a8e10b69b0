"""The moving tag (``IMAGE:nightly`` in the engine, ``REPO:nightly`` in the registry): where the
build in service is found. Promotion and rollback move it; nothing else does."""

from __future__ import annotations

import json

from .._registry import MANIFEST_TYPES, ImageRef, RegistryClient
from ..engine import Engine
from ..errors import UsageError
from ..spec import Spec

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
    client = client or RegistryClient()
    ref = ImageRef.parse(repository)
    raw = client.manifest_bytes(repository, manifest)
    media_type = json.loads(raw).get("mediaType") or MANIFEST_TYPES[0]
    client.send("PUT", ref, f"{ref.base_url}/manifests/{MOVING_TAG}", data=raw, ok=(201,), scope="pull,push",
                headers={"Content-Type": str(media_type)})
