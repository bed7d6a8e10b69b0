"""Typed events: every stage reports what it does as ``Event`` values to one ``Reporter``.

Stages never print. The CLI renders events for a person (rich, on stderr) or as one JSON
object per line (``--json-logs``); the nightly job and tests collect them as data.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

Figure = int | float | str | bool | None


class Phase(StrEnum):
    """Where in the pipeline an event comes from."""

    SPEC = "spec"
    RESOLVE = "resolve"
    FETCH = "fetch"
    PLAN = "plan"
    COMPILE = "compile"
    AUDIT = "audit"
    ASSEMBLE = "assemble"
    RECEIPT = "receipt"
    PREWARM = "prewarm"
    VERIFY = "verify"
    CHECK = "check"
    PUSH = "push"
    PULL = "pull"
    SAVE = "save"
    LOAD = "load"
    PREFLIGHT = "preflight"
    NIGHTLY = "nightly"


class Kind(StrEnum):
    """What an event is: a step a person follows, a line of a tool's output, a warning, or a
    finished piece of work with its figures."""

    STATUS = "status"
    LOG = "log"
    WARNING = "warning"
    DONE = "done"


@dataclass(frozen=True)
class Event:
    phase: Phase
    message: str
    layer: str | None = None
    kind: Kind = Kind.STATUS
    figures: Mapping[str, Figure] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {"time": round(self.time, 3), "phase": self.phase.value, "kind": self.kind.value,
                "layer": self.layer, "message": self.message, "figures": dict(self.figures)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Event:
        """An event as ``to_json`` wrote it, reported again now (a replayed no-op)."""
        return cls(Phase(data["phase"]), str(data["message"]), data.get("layer"), Kind(data["kind"]),
                   dict(data.get("figures") or {}))


Reporter = Callable[[Event], None]


def silent(event: Event) -> None:
    """The reporter of a caller that wants no progress."""
    return None


@dataclass
class Collected:
    """A reporter that keeps every event (tests, the nightly report)."""

    events: list[Event] = field(default_factory=list)

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, phase: Phase, kind: Kind | None = None) -> list[Event]:
        return [e for e in self.events if e.phase is phase and (kind is None or e.kind is kind)]
