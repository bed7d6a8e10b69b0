"""The layer record: what one compile layer produced, kept in the store by layer key.

``build.compile`` writes it; the plan (is the layer built?), assembly (which wheels),
the receipt (byproducts, bounds) and the CLI (figures) read it through this model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkimg.errors import UsageError


@dataclass(frozen=True)
class Output:
    """One wheel the layer wrote to /out, admitted to the store."""

    filename: str
    sha256: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"filename": self.filename, "sha256": self.sha256, "size": self.size}


@dataclass(frozen=True)
class Metrics:
    """What the compile cost: wall and CPU seconds, peak memory of its cgroup."""

    wall_s: float
    cpu_s: float | None
    peak_memory: int | None

    def to_json(self) -> dict[str, Any]:
        return {"wall_s": self.wall_s, "cpu_s": self.cpu_s, "peak_memory": self.peak_memory}


@dataclass(frozen=True)
class LayerRecord:
    """A built compile layer: outputs, figures, the budget it ran under and its audit."""

    layer: str
    key: str
    outputs: tuple[Output, ...]
    metrics: Metrics
    budget: Mapping[str, Any]
    audit: tuple[Mapping[str, Any], ...]
    finished: str | None
    # Per-object figures a build script reported (``/sparkimg/meta/steps.json``: object, wall_s,
    # peak_memory, heavy), for the layers whose cost is in a few objects (build/vllm-ext).
    steps: tuple[Mapping[str, Any], ...] = ()
    # The compiler cache's figures for this build (``compile.cache.summary``: tool, folder, hits,
    # misses, errors, requests, not_cached, saved_s, bytes); empty when the layer compiled without one.
    compiler_cache: Mapping[str, Any] = field(default_factory=dict)
    # Where the layer's time went, in seconds (``source`` unpacked and patched, ``inputs`` and the
    # toolkit staged, the ``container``, ``normalise``, ``audit``, ``admit``): the compile step's
    # wall time is more than the command's, and the rest is visible here.
    phases: Mapping[str, float] = field(default_factory=dict)

    @property
    def jobs(self) -> int:
        return int(self.budget.get("jobs") or 1)

    def to_json(self) -> dict[str, Any]:
        data = {"layer": self.layer, "key": self.key, "outputs": [o.to_json() for o in self.outputs],
                "metrics": self.metrics.to_json(), "budget": dict(self.budget),
                "audit": [dict(a) for a in self.audit], "finished": self.finished}
        if self.steps:
            data["steps"] = [dict(s) for s in self.steps]
        if self.compiler_cache:
            data["compiler_cache"] = dict(self.compiler_cache)
        if self.phases:
            data["phases"] = dict(self.phases)
        return data

    @classmethod
    def from_json(cls, data: Any, where: str) -> LayerRecord:
        """A record from the store; a damaged one is bad input naming ``where``."""
        try:
            metrics = data["metrics"]
            return cls(
                str(data["layer"]), str(data["key"]),
                tuple(Output(str(o["filename"]), str(o["sha256"]), int(o["size"])) for o in data["outputs"]),
                Metrics(float(metrics["wall_s"]), _opt_float(metrics.get("cpu_s")),
                        _opt_int(metrics.get("peak_memory"))),
                dict(data["budget"]), tuple(dict(a) for a in data["audit"]), data.get("finished"),
                tuple(dict(s) for s in data.get("steps") or ()), dict(data.get("compiler_cache") or {}),
                {str(k): float(v) for k, v in (data.get("phases") or {}).items()})
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where}: not a sparkimg layer record ({exc.__class__.__name__}: {exc})",
                             hint="remove it; the next build compiles the layer again") from None


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
