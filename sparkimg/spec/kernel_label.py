"""The image label ``dev.sparkimg.prewarm``: a spec's FlashInfer kernel set, carried by the
image so a node that pulled it by digest can prewarm it without the spec.

The build writes it (``to_label``) and prewarm reads it back (``from_label``); both sides
import this module, never each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sparkimg.errors import UsageError
from sparkimg.formats.canonical import canonical, loads
from sparkimg.spec.model import Arch, Bounds, KernelModule, KernelSet, Spec

LABEL = "dev.sparkimg.prewarm"


@dataclass(frozen=True)
class KernelLabel:
    """What the label holds: the kernel set, its architectures and the spec's toolchain."""

    kernels: KernelSet
    archs: tuple[Arch, ...]
    toolchain: dict[str, str | None]

    def to_label(self) -> str:
        return canonical({
            "cuda_architectures": [a.text for a in self.archs],
            "modules": [m.to_json() for m in self.kernels.modules],
            "bounds": asdict(self.kernels.bounds),
            "toolchain": self.toolchain,
            "env": dict(self.kernels.env),
        }).decode()

    @classmethod
    def from_label(cls, text: str, where: str) -> KernelLabel:
        """Parse a label's text; a damaged label is bad input naming ``where``."""
        try:
            data = loads(text)
            kernels = KernelSet(tuple(KernelModule(m["generator"], tuple(m["args"]), dict(m["kwargs"]))
                                      for m in data["modules"]), Bounds(**data["bounds"]), dict(data.get("env") or {}))
            archs = tuple(Arch(a) for a in data["cuda_architectures"])
            toolchain = dict(data.get("toolchain") or {})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UsageError(f"{where}: label {LABEL} is not a kernel set ({exc})") from None
        return cls(kernels, archs, toolchain)


def of_spec(spec: Spec, toolkit: str | None = None) -> KernelLabel | None:
    """The label a spec's image carries; None when the spec names no kernel set. ``toolkit``: the
    identity of the locked toolkit wheels (``cuda: wheels``), which a node's prewarm mounts."""
    if spec.prewarm is None:
        return None
    return KernelLabel(spec.prewarm, spec.cuda_architectures, toolchain_json(spec, toolkit))


def toolchain_json(spec: Spec, toolkit: str | None) -> dict[str, str | None]:
    """The spec's toolchain as the label and prewarm carry it, with the toolkit wheels' identity."""
    found = spec.toolchain.to_json()
    if spec.toolchain.cuda == "wheels" and toolkit:
        found["toolkit"] = toolkit
    return found
