"""Typed events: every stage reports what it does as ``Event`` values to one ``Reporter``.

Stages never print. The CLI renders events for a person (rich, on stderr) or as one JSON
object per line (``--json-logs``); the nightly job and tests collect them as data.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sparkimg._internal.units import mib
from sparkimg.formats.steps import Step

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
    # How far one long piece of work is (a download, a base pull): figures ``task`` (what it is,
    # the same on each of its events), ``done`` and ``total`` (bytes; total may be None), and
    # ``finished``. A terminal draws a bar, anything else gets a line every few seconds.
    PROGRESS = "progress"


@dataclass(frozen=True)
class Event:
    phase: Phase
    message: str
    layer: str | None = None
    kind: Kind = Kind.STATUS
    figures: Mapping[str, Figure] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return record(self.kind.value, self.message, phase=self.phase.value, layer=self.layer,
                      figures=self.figures, at=self.time)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Event:
        """An event as ``to_json`` wrote it, reported again now (a replayed no-op)."""
        return cls(Phase(data["phase"]), str(data["message"]), data.get("layer"), Kind(data["kind"]),
                   dict(data.get("figures") or {}))


def record(kind: str, message: str, *, phase: str | None = None, layer: str | None = None,
           figures: Mapping[str, Figure] | None = None, at: float | None = None) -> dict[str, Any]:
    """One ``--json-logs`` line's keys, the same for an event and for what is not one (an error,
    a warning or a mismatch the CLI says): a log collector reads every line alike."""
    return {"time": round(time.time() if at is None else at, 3), "phase": phase, "kind": kind, "layer": layer,
            "message": message, "figures": dict(figures or {})}


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


@dataclass
class Steps:
    """The steps of a build in the order they finished, each timed by ``timed``."""

    done: list[Step] = field(default_factory=list)

    @contextmanager
    def timed(self, name: str, layer: str | None = None) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.done.append(Step(name, round(time.monotonic() - started, 3), layer))

    def took(self, name: str) -> float:
        """The wall time of the step ``name`` finished last."""
        return next(step.wall_s for step in reversed(self.done) if step.name == name)


PROGRESS_EVERY = 0.25  # seconds between two progress events of one task


class Progress:
    """Reports how far one long piece of work is, as ``Kind.PROGRESS`` events: at most every
    ``PROGRESS_EVERY`` seconds, and once when it is done (the reporter decides what to draw)."""

    def __init__(self, report: Reporter, phase: Phase, task: str, total: int | None = None,
                 layer: str | None = None) -> None:
        self.report, self.phase, self.task, self.total, self.layer = report, phase, task, total, layer
        self.done, self.last = 0, time.monotonic()

    def update(self, done: int, total: int | None = None) -> None:
        self.done, self.total = done, total if total is not None else self.total
        if time.monotonic() - self.last >= PROGRESS_EVERY:
            self.last = time.monotonic()
            self._tell(False)

    def advance(self, count: int) -> None:
        self.update(self.done + count)

    def finish(self) -> None:
        """The last event, whenever anything was told of the work (a pull whose engine told
        nothing gets none)."""
        if self.done or self.total:
            self._tell(True)

    def _tell(self, finished: bool) -> None:
        of = f" of {mib(self.total)}" if self.total else ""
        self.report(Event(self.phase, f"{self.task}: {mib(self.done)}{of}" + (" done" if finished else ""),
                          self.layer, Kind.PROGRESS, {"task": self.task, "done": self.done, "total": self.total,
                                                      "finished": finished}))
