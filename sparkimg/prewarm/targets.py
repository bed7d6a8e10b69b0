"""What a prewarm is for: the kernel set, its architectures, the image, from a spec, an
image label or a receipt.

The kernel set travels with the image as the label ``dev.sparkimg.prewarm``, so a
node that pulled an image by digest can prewarm it without the spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkimg.errors import UsageError
from sparkimg.events import Reporter, silent
from sparkimg.formats.statement import parse_statement
from sparkimg.image.build import built_image
from sparkimg.lock import resolve as lock_mod
from sparkimg.plan import keys as plan
from sparkimg.signing import dsse
from sparkimg.spec import Arch, KernelSet, Spec
from sparkimg.spec.kernel_label import LABEL, KernelLabel, toolchain_json

if TYPE_CHECKING:
    from sparkimg.engine.protocol import Engine

@dataclass(frozen=True)
class Target:
    """What a cache is for: the kernel set, its architectures, and the image (None on a host)."""

    kernels: KernelSet
    archs: tuple[Arch, ...]
    image_ref: str | None = None
    image_id: str | None = None
    toolchain: dict[str, str | None] = field(default_factory=dict)

    @property
    def arch_list(self) -> str:
        """FLASHINFER_CUDA_ARCH_LIST: space-separated, as FlashInfer reads it."""
        return " ".join(a.text for a in self.archs)

    def image(self) -> dict[str, Any] | None:
        return None if self.image_id is None else {"id": self.image_id, "reference": self.image_ref}


def target_of_spec(spec: Spec, *, image_ref: str | None = None, image_id: str | None = None,
                   lock: lock_mod.Lock | None = None) -> Target:
    """The spec's kernel set; its lock (read here unless given) names a ``cuda: wheels`` toolkit."""
    if spec.prewarm is None:
        raise UsageError(f"{spec.path}: the spec names no prewarm kernel set",
                         hint="add 'prewarm: {modules: [...]}' (see docs/prewarm.md)")
    toolkit = None
    if spec.toolchain.cuda == "wheels":
        toolkit = (lock or lock_mod.load_checked(spec)).toolchain.toolkit
    return Target(spec.prewarm, spec.cuda_architectures, image_ref, image_id, toolchain_json(spec, toolkit))


def target_of_label(text: str | None, *, image_ref: str, image_id: str) -> Target:
    """The target an image's ``dev.sparkimg.prewarm`` label describes."""
    if not text:
        raise UsageError(f"{image_ref}: the image carries no {LABEL} label (built without a prewarm kernel set, "
                         "or not by sparkimg)", hint="pass --spec SPEC to name the kernel set")
    label = KernelLabel.from_label(text, image_ref)
    return Target(label.kernels, label.archs, image_ref, image_id, label.toolchain)


def for_built_spec(spec: Spec, engine: Engine) -> Target:
    """The spec's kernel set, for the image the spec's lock builds (it must be in the engine)."""
    lock = lock_mod.load_checked(spec)
    key = plan.image_key(spec, lock)
    reference = plan.image_ref(spec, key)
    image_id = built_image(engine, spec, key)
    if image_id is None:
        raise UsageError(f"{reference}: the spec's image is not in the engine",
                         hint=f"build it first: sparkimg build {spec.path}")
    return target_of_spec(spec, image_ref=reference, image_id=image_id, lock=lock)


def for_image(reference: str, engine: Engine) -> Target:
    """The kernel set in an image's label, for that image."""
    info = engine.inspect(reference)
    if info is None:
        raise UsageError(f"{reference}: no such image in the engine", hint="build it, or pull it by digest")
    return target_of_label(info.labels.get(LABEL), image_ref=reference, image_id=info.id)


def for_receipt(receipt: Path, engine: Engine) -> Target:
    """The image a receipt names (by image ID), with the kernel set in its label."""
    subject = parse_statement(dsse.read(receipt).payload, str(receipt)).image
    image_id = subject.sha256
    if engine.image_id(image_id) is None:
        raise UsageError(f"{receipt}: its image {image_id} is not in the engine",
                         hint=f"pull or build {subject.name} first")
    return replace(for_image(image_id, engine), image_ref=subject.name)


def on_host(target: Target, image_id: str | None) -> Target:
    """A target compiled in a host Python: it names an image only when the caller says which."""
    return replace(target, image_id=image_id, image_ref=target.image_ref if image_id else None)


def unpack_toolkit(spec: Spec, store: Path | None, report: Reporter = silent) -> None:
    """A ``cuda: wheels`` spec's toolkit, unpacked in the store (its wheels fetched first when the
    store lacks them): what prewarm mounts, even where nothing of the image was built yet."""
    if spec.toolchain.cuda != "wheels":
        return
    from sparkimg.compile import toolkit
    from sparkimg.source.retrieve import fetch_source
    from sparkimg.store.content import Store

    lock, opened = lock_mod.load_checked(spec), Store(store)
    for name in (*spec.toolchain.wheels, *spec.toolchain.headers):
        fetch_source(spec, name, lock.sources[name], opened, report)
    toolkit.tree(opened, lock.toolchain)
