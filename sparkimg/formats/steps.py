"""A timed step of a build or a night, as ``--json``, the nightly entry and its report write it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Step:
    """One timed step of a build (fetch, compile, assemble, load, check, prewarm, sbom, sign),
    for one layer where it is a layer's: so the next slow step is visible in ``--json``, the
    layer records and the nightly report."""

    name: str
    wall_s: float
    layer: str | None = None

    @property
    def within_assembly(self) -> bool:
        """One image layer's writing: inside the assembly's own wall time (layers are written
        several at once), so never added to it."""
        return self.name == "assemble" and self.layer is not None

    def to_json(self) -> dict[str, Any]:
        return {"step": self.name, "layer": self.layer, "wall_s": self.wall_s}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Step:
        layer = data.get("layer")
        return cls(str(data["step"]), float(data["wall_s"]), None if layer is None else str(layer))
