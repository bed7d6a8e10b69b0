"""The nightly job's two formats: one state entry per night (``sparkimg-nightly-entry/v1``, the
``entry.json`` in its folder) and the drift report (``sparkimg-nightly-report/v1``, the
``report.json`` beside it, whose shape is fixed by the renderer's interface note).

One frozen model per record; ``from_json`` names the file and field that is wrong, ``to_json``
writes what was read. No I/O here: ``sparkimg.nightly.state`` reads and writes entries.
docs/nightly.md is the reference for every field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sparkimg.errors import UsageError
from sparkimg.formats.steps import Step

ENTRY_SCHEMA = "sparkimg-nightly-entry/v1"
REPORT_SCHEMA = "sparkimg-nightly-report/v1"
STATUSES = ("unchanged", "built", "failed")
STAGES = ("resolve", "plan", "build", "check", "sign", "push", "promote")
LAYER_STATUSES = ("rebuilt", "reused", "failed", "skipped")
KINDS = ("git", "image", "pypi", "path")

Status = Literal["unchanged", "built", "failed"]


def _fail(where: str, key: str, what: str, found: Any) -> UsageError:
    return UsageError(f"{where}: {key} must be {what}, found {found!r}",
                      hint="this entry was not written by sparkimg nightly; move it out of the state folder")


def _get(data: Mapping[str, Any], where: str, key: str, types: type | tuple[type, ...], what: str,
         *, null: bool = False) -> Any:
    value = data.get(key)
    if value is None and null:
        return None
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise _fail(where, key, what, value)
    if not isinstance(value, types):
        raise _fail(where, key, what, value)
    return value


def _number(data: Mapping[str, Any], where: str, key: str) -> float | None:
    value = _get(data, where, key, (int, float), "a number or null", null=True)
    return None if value is None else value


@dataclass(frozen=True)
class Moved:
    """One input whose resolution changed: from the current lock to the candidate."""

    input: str
    kind: str
    before: str | None
    after: str
    before_detail: Mapping[str, Any] = field(default_factory=dict)
    after_detail: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"input": self.input, "kind": self.kind, "from": self.before, "to": self.after,
                "from_detail": dict(self.before_detail), "to_detail": dict(self.after_detail)}

    def brief(self) -> dict[str, Any]:
        """What ``sparkimg nightly --json`` prints of it."""
        return {"input": self.input, "from": self.before, "to": self.after}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Moved:
        if not isinstance(data, dict):
            raise _fail(where, "moved[]", "an object", data)
        kind = _get(data, where, "kind", str, "a kind")
        if kind not in KINDS:
            raise _fail(where, "moved[].kind", f"one of {', '.join(KINDS)}", kind)
        return cls(_get(data, where, "input", str, "a name"), kind,
                   _get(data, where, "from", str, "a string or null", null=True),
                   _get(data, where, "to", str, "a string"),
                   dict(_get(data, where, "from_detail", dict, "an object")),
                   dict(_get(data, where, "to_detail", dict, "an object")))


# How many of a rebuilt layer's costliest objects a night keeps (build scripts that report
# per-object figures: the layer record's ``steps``).
OBJECTS_KEPT = 10


@dataclass(frozen=True)
class ObjectCost:
    """One object of a rebuilt layer: its compile's wall time and peak memory, and whether the
    build script scheduled it as heavy."""

    name: str
    wall_s: float | None
    peak_memory_bytes: int | None
    heavy: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "wall_s": self.wall_s, "peak_memory_bytes": self.peak_memory_bytes,
                "heavy": self.heavy}

    @classmethod
    def from_json(cls, data: Any, where: str) -> ObjectCost:
        if not isinstance(data, dict):
            raise _fail(where, "layers[].objects[]", "an object", data)
        peak = _number(data, where, "peak_memory_bytes")
        return cls(_get(data, where, "name", str, "an object name"), _number(data, where, "wall_s"),
                   None if peak is None else int(peak), _get(data, where, "heavy", bool, "true or false"))

    @classmethod
    def costliest(cls, steps: Sequence[Mapping[str, Any]]) -> tuple[ObjectCost, ...]:
        """The ``OBJECTS_KEPT`` slowest steps a layer record holds (anything malformed is skipped)."""
        rows = [cls(str(s["object"]), float(s["wall_s"]),
                    int(s["peak_memory"]) if isinstance(s.get("peak_memory"), int) else None, s.get("heavy") is True)
                for s in steps if isinstance(s.get("object"), str) and isinstance(s.get("wall_s"), (int, float))]
        return tuple(sorted(rows, key=lambda r: (-(r.wall_s or 0), r.name))[:OBJECTS_KEPT])


@dataclass(frozen=True)
class LayerRun:
    """One layer in one night: rebuilt or reused (and why), with what its compile cost."""

    name: str
    status: str
    reason: str
    key: str | None = None
    wall_s: float | None = None
    cpu_s: float | None = None
    peak_memory_bytes: int | None = None
    objects: tuple[ObjectCost, ...] = ()
    # The compiler cache's figures for a rebuilt layer (tool, hits, misses, errors, saved_s).
    compiler_cache: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name, "status": self.status, "reason": self.reason, "key": self.key,
            "wall_s": self.wall_s, "cpu_s": self.cpu_s, "peak_memory_bytes": self.peak_memory_bytes}
        if self.objects:
            data["objects"] = [o.to_json() for o in self.objects]
        if self.compiler_cache:
            data["compiler_cache"] = dict(self.compiler_cache)
        return data

    def report(self) -> dict[str, Any]:
        """The report's layer row (the interface note's fields, no more)."""
        out = self.to_json()
        del out["key"]
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> LayerRun:
        if not isinstance(data, dict):
            raise _fail(where, "layers[]", "an object", data)
        status = _get(data, where, "status", str, "a layer status")
        if status not in LAYER_STATUSES:
            raise _fail(where, "layers[].status", f"one of {', '.join(LAYER_STATUSES)}", status)
        peak = _number(data, where, "peak_memory_bytes")
        objects = _get(data, where, "objects", list, "a list of objects", null=True) or []
        return cls(_get(data, where, "name", str, "a layer name"), status, _get(data, where, "reason", str, "a reason"),
                   _get(data, where, "key", str, "a key or null", null=True), _number(data, where, "wall_s"),
                   _number(data, where, "cpu_s"), None if peak is None else int(peak),
                   tuple(ObjectCost.from_json(o, where) for o in objects[:OBJECTS_KEPT]),
                   cache_figures(data.get("compiler_cache")))


CACHE_FIGURES = ("tool", "hits", "misses", "errors", "saved_s")


def cache_figures(value: Any) -> dict[str, Any]:
    """A layer's compiler cache figures as the report keeps them: the tool's name and numbers, no
    more (anything else in an entry written by hand or by another version is dropped)."""
    if not isinstance(value, dict):
        return {}
    kept = {k: value[k] for k in CACHE_FIGURES[1:]
            if isinstance(value.get(k), int | float) and not isinstance(value.get(k), bool)}
    if isinstance(value.get("tool"), str):
        kept["tool"] = value["tool"][:80]
    return kept


@dataclass(frozen=True)
class ImageOut:
    """The image a night built: its local reference, digests, size and the tags it was given."""

    reference: str
    manifest: str | None
    config: str | None
    size_bytes: int | None
    tags: tuple[str, ...] = ()
    repository: str | None = None  # REGISTRY/REPO it was pushed to, when it was
    registry: Mapping[str, Any] | None = None  # how that registry was reached (push's "registry" record)

    def to_json(self) -> dict[str, Any]:
        return {"reference": self.reference, "manifest": self.manifest, "config": self.config,
                "size_bytes": self.size_bytes, "tags": list(self.tags), "repository": self.repository,
                "registry": dict(self.registry) if self.registry is not None else None}

    def report(self) -> dict[str, Any]:
        out = self.to_json()
        del out["repository"], out["registry"]
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> ImageOut:
        if not isinstance(data, dict):
            raise _fail(where, "image", "an object or null", data)
        tags = _get(data, where, "tags", list, "a list of tags")
        size = _number(data, where, "size_bytes")
        return cls(_get(data, where, "reference", str, "an image reference"),
                   _get(data, where, "manifest", str, "a digest or null", null=True),
                   _get(data, where, "config", str, "a digest or null", null=True), None if size is None else int(size),
                   tuple(str(t) for t in tags), _get(data, where, "repository", str, "a repository or null", null=True),
                   _get(data, where, "registry", dict, "how the registry was reached, or null", null=True))


# How many differing files a failed check keeps (`sparkimg build --check` lists them all; files_total
# says how many there were).
FILES_KEPT = 100
FIRST_ERROR_MAX = 500  # characters of a first error line kept


@dataclass(frozen=True)
class DifferingFile:
    """A file a failed ``--check`` found different between the two builds: where, and how."""

    layer: str
    path: str
    kind: str  # "only in first", "only in second", "metadata", "content"

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer, "path": self.path, "kind": self.kind}

    @classmethod
    def from_json(cls, data: Any, where: str) -> DifferingFile:
        if not isinstance(data, dict):
            raise _fail(where, "failure.files[]", "an object", data)
        return cls(_get(data, where, "layer", str, "a layer name"), _get(data, where, "path", str, "a path"),
                   _get(data, where, "kind", str, "a kind of difference"))


@dataclass(frozen=True)
class Failure:
    """What a failed night shows a person besides its one-line error: the stage, the first line of
    the error that stopped it (a failed compile's first error line, from its log), the layer that
    failed, and for a failed check the files that differ (the first ``FILES_KEPT`` of ``files_total``)."""

    stage: str
    first_error_line: str | None = None
    layer: str | None = None
    files: tuple[DifferingFile, ...] = ()
    files_total: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "first_error_line": self.first_error_line, "layer": self.layer,
                "files": [f.to_json() for f in self.files], "files_total": self.files_total}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Failure:
        if not isinstance(data, dict):
            raise _fail(where, "failure", "an object or null", data)
        stage = _get(data, where, "stage", str, "a stage")
        if stage not in STAGES:
            raise _fail(where, "failure.stage", f"one of {', '.join(STAGES)}", stage)
        files = _get(data, where, "files", list, "a list of files")
        total = _get(data, where, "files_total", int, "a count")
        return cls(stage, _get(data, where, "first_error_line", str, "a line or null", null=True),
                   _get(data, where, "layer", str, "a layer name or null", null=True),
                   tuple(DifferingFile.from_json(f, where) for f in files[:FILES_KEPT]), max(total, len(files)))


@dataclass(frozen=True)
class Entry:
    """One night in the state folder (``entries/ID/entry.json``). A built night keeps the lock it
    built from beside it (``lock.json``, byte for byte), which ``rollback`` restores."""

    entry: str
    spec: str
    started: str
    finished: str
    status: Status
    failed_stage: str | None = None
    error: str | None = None
    moved: tuple[Moved, ...] = ()
    layers: tuple[LayerRun, ...] = ()
    check: Mapping[str, Any] | None = None
    verify: Mapping[str, Any] | None = None
    image: ImageOut | None = None
    receipt: str | None = None
    lock_digest: str | None = None  # sha256 of the lock bytes this night built from
    known_good: bool = False
    schema: str = ENTRY_SCHEMA
    steps: tuple[Step, ...] = ()  # what each step of the night took, in order (absent before issue 36)
    failure: Failure | None = None  # a failed night's detail (absent before issue 40: None)

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "entry": self.entry, "spec": self.spec, "started": self.started,
                "finished": self.finished, "status": self.status, "failed_stage": self.failed_stage,
                "error": self.error, "moved": [m.to_json() for m in self.moved],
                "layers": [layer.to_json() for layer in self.layers],
                "check": None if self.check is None else dict(self.check),
                "verify": None if self.verify is None else dict(self.verify),
                "image": None if self.image is None else self.image.to_json(), "receipt": self.receipt,
                "lock_digest": self.lock_digest, "known_good": self.known_good,
                "steps": [step.to_json() for step in self.steps],
                "failure": None if self.failure is None else self.failure.to_json()}

    def marked(self, known_good: bool) -> Entry:
        return replace(self, known_good=known_good)

    @property
    def rebuilt(self) -> list[str]:
        return [layer.name for layer in self.layers if layer.status == "rebuilt"]

    @classmethod
    def from_json(cls, data: Any, where: str) -> Entry:
        if not isinstance(data, dict) or data.get("schema") != ENTRY_SCHEMA:
            raise UsageError(f"{where}: not a {ENTRY_SCHEMA} entry",
                             hint="this entry was not written by sparkimg nightly; move it out of the state folder")
        status = _get(data, where, "status", str, "a status")
        if status not in STATUSES:
            raise _fail(where, "status", f"one of {', '.join(STATUSES)}", status)
        stage = _get(data, where, "failed_stage", str, "a stage or null", null=True)
        if stage is not None and stage not in STAGES:
            raise _fail(where, "failed_stage", f"one of {', '.join(STAGES)}", stage)
        image, failure = data.get("image"), data.get("failure")
        return cls(
            _get(data, where, "entry", str, "an entry id"), _get(data, where, "spec", str, "a spec file name"),
            _get(data, where, "started", str, "a time"), _get(data, where, "finished", str, "a time"), status, stage,
            _get(data, where, "error", str, "a message or null", null=True),
            tuple(Moved.from_json(m, where) for m in _get(data, where, "moved", list, "a list")),
            tuple(LayerRun.from_json(layer, where) for layer in _get(data, where, "layers", list, "a list")),
            _get(data, where, "check", dict, "an object or null", null=True),
            _get(data, where, "verify", dict, "an object or null", null=True),
            None if image is None else ImageOut.from_json(image, where),
            _get(data, where, "receipt", str, "a path or null", null=True),
            _get(data, where, "lock_digest", str, "a digest or null", null=True),
            bool(_get(data, where, "known_good", bool, "true or false")),
            steps=tuple(_step(s, where) for s in _get(data, where, "steps", list, "a list of steps", null=True) or []),
            failure=None if failure is None else Failure.from_json(failure, where))


def _step(data: Any, where: str) -> Step:
    if not isinstance(data, dict) or not isinstance(data.get("step"), str) \
            or not isinstance(data.get("wall_s"), (int, float)) or not isinstance(data.get("layer"), (str, type(None))):
        raise _fail(where, "steps[]", "an object with step, layer and wall_s", data)
    return Step.from_json(data)


def history_item(entry: Entry) -> dict[str, Any]:
    """An earlier night, as the report's ``history`` lists it."""
    return {"entry": entry.entry, "started": entry.started, "status": entry.status, "known_good": entry.known_good,
            "image_size_bytes": entry.image.size_bytes if entry.image else None,
            "layers": {layer.name: {"wall_s": layer.wall_s, "peak_memory_bytes": layer.peak_memory_bytes}
                       for layer in entry.layers},
            "steps": step_totals(entry.steps)}


def step_totals(steps: Sequence[Step]) -> dict[str, float]:
    """Seconds per kind of step (a layer's compile and writing summed with the others'), for the
    history's trend: which step grows night after night."""
    totals: dict[str, float] = {}
    for step in steps:
        if step.within_assembly:
            continue
        totals[step.name] = round(totals.get(step.name, 0.0) + step.wall_s, 3)
    return totals


def report(entry: Entry, earlier: Sequence[Entry]) -> dict[str, Any]:
    """The drift report of ``entry`` (``sparkimg-nightly-report/v1``), with ``earlier`` nights as
    its history, oldest first; exactly the fields of the interface note, in its order."""
    return {
        "schema": REPORT_SCHEMA,
        "spec": entry.spec,
        "entry": entry.entry,
        "started": entry.started,
        "finished": entry.finished,
        "status": entry.status,
        "failed_stage": entry.failed_stage,
        "error": entry.error,
        "failure": None if entry.failure is None else entry.failure.to_json(),
        "moved": [m.to_json() for m in entry.moved],
        "layers": [layer.report() for layer in entry.layers],
        "steps": [step.to_json() for step in entry.steps],
        "check": None if entry.check is None else dict(entry.check),
        "verify": None if entry.verify is None else dict(entry.verify),
        "image": None if entry.image is None else entry.image.report(),
        "receipt": entry.receipt,
        "history": [history_item(e) for e in earlier if e.entry != entry.entry],
    }


REPORT_KEYS = ("schema", "spec", "entry", "started", "finished", "status", "failed_stage", "error", "failure",
               "moved", "layers", "steps", "check", "verify", "image", "receipt", "history")
