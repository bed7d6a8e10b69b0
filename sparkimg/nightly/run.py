"""One night: re-resolve what moves into a candidate lock, build it in bounds, check, sign, push,
and only when all of that succeeded promote it (the lock, then the moving tag). A failure keeps
the lock and the image in service untouched and records the stage that failed.

Stages (docs/nightly.md): resolve, plan, build, check, sign, push, promote. The night ends with
an entry in the state folder (``state``), its drift report (JSON and HTML) and, when asked, a
hook command told the outcome in its environment.
"""

from __future__ import annotations

import contextlib
import html
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkimg._internal.locations import signing_key_path
from sparkimg._internal.times import rfc3339
from sparkimg._internal.units import format_size
from sparkimg.errors import EngineError, SparkimgError, UsageError
from sparkimg.events import Collected, Event, Kind, Phase, Reporter, silent
from sparkimg.formats.canonical import pretty, sha256_prefixed
from sparkimg.formats.nightly import Entry, ImageOut, LayerRun, Moved, ObjectCost, cache_figures, report
from sparkimg.formats.steps import Step
from sparkimg.lock import resolve as lock_mod
from sparkimg.nightly.failure import failure_of
from sparkimg.nightly.moving import Change, details, layer_changes, moved, moving_inputs
from sparkimg.nightly.state import LOCK_FILE, State, alone, default_folder
from sparkimg.pipeline.build import BuildOptions, Built, build
from sparkimg.pipeline.context import engine_of, spec_of
from sparkimg.spec import CompileLayer, Spec
from sparkimg.store.gc import collect
from sparkimg.store.roots import ROOTS, remember_nightly, root_name

if TYPE_CHECKING:
    from sparkimg._internal.net.registry import RegistryClient
    from sparkimg.compile.bounds import Overrides
    from sparkimg.distribution.push import Pushed
    from sparkimg.engine.protocol import Engine
    from sparkimg.image.check import Difference
    from sparkimg.lock.resolve import Lock
    from sparkimg.store.content import Store

CANDIDATE_FILE = "candidate.lock.json"  # a failed night's candidate, kept to reproduce the failure
RECEIPT_FILE = "receipt.json"  # a copy of the night's signed receipt


@dataclass(frozen=True)
class Options:
    """What ``sparkimg nightly`` takes besides the spec."""

    state: Path | None = None
    key: Path | None = None
    push: str | None = None
    check: bool = False
    overrides: Overrides | None = None
    hook: str | None = None
    keep: int | None = None  # nights kept in the state folder (None: all); see State.prune
    plain_http: bool = False  # for the --push registry (``_internal.net.reach``)
    ca_file: Path | None = None

    def registry(self) -> RegistryClient:
        """The client for the ``push`` registry, reached as ``plain_http`` and ``ca_file`` say."""
        from sparkimg._internal.net.registry import RegistryClient, reach_for

        assert self.push is not None
        return RegistryClient(reach=reach_for(self.push, plain_http=self.plain_http, ca=self.ca_file))


@dataclass(frozen=True)
class Night:
    entry: Entry
    folder: Path

    @property
    def report_json(self) -> Path:
        return self.folder / "report.json"

    @property
    def report_html(self) -> Path:
        return self.folder / "report.html"

    @property
    def exit_code(self) -> int:
        return 1 if self.entry.status == "failed" else 0

    def to_json(self) -> dict[str, Any]:
        e = self.entry
        return {"status": e.status, "entry": e.entry, "failed_stage": e.failed_stage, "error": e.error,
                "failure": None if e.failure is None else e.failure.to_json(),
                "moved": [m.brief() for m in e.moved], "rebuilt": e.rebuilt,
                "image": None if e.image is None else e.image.report(), "receipt": e.receipt,
                "report": {"json": str(self.report_json), "html": str(self.report_html)}}


class _Failed(Exception):
    def __init__(self, stage: str, error: str) -> None:
        super().__init__(error)
        self.stage, self.error = stage, error


@dataclass
class _Progress:
    """What the night has found so far; becomes its entry however it ends."""

    moved: list[Moved] = field(default_factory=list)
    layers: list[LayerRun] = field(default_factory=list)
    image: ImageOut | None = None
    receipt: str | None = None
    check: dict[str, Any] | None = None
    lock_bytes: bytes | None = None
    receipt_bytes: bytes | None = None
    verify: dict[str, Any] | None = None
    steps: list[Step] = field(default_factory=list)  # each stage's time; the build's own steps in its place
    stage: str = "resolve"  # the stage under way: where an unforeseen error is recorded
    differences: tuple[Difference, ...] = ()  # a failed check's, for the entry's failure


def run(spec_path: Path, options: Options, *, store: Store, report: Reporter = silent) -> Night:
    """The night for ``spec_path``. Bad input (spec, key, target, a busy state folder) raises before
    the night starts; anything that fails after is recorded as a failed night (exit 1)."""
    from sparkimg.distribution.push import target_of
    from sparkimg.signing.keys import load_private

    spec = spec_of(spec_path, report)
    chosen = signing_key_path(options.key)
    if chosen is None:
        raise UsageError("sparkimg nightly signs every receipt: pass --key or set SPARKIMG_KEY",
                         hint="create a key once with `sparkimg keygen --out ~/.config/sparkimg/nightly`")
    load_private(chosen)  # a missing file, a public key or a key for others to read: refused before the night
    client = options.registry() if options.push else None  # one client (its CA read once) for the night
    if options.push and client is not None:
        target_of(options.push, client.reach)
    if options.keep is not None and options.keep < 1:
        raise UsageError(f"--keep {options.keep}: keep at least the night just run", hint="e.g. --keep 30")
    state = State(options.state or default_folder(spec.path))
    # Its kept nights are roots of the store's gc (``store.roots``).
    remember_nightly(store, spec.path, lock=lock_mod.lock_path(spec), receipts=spec.root / "receipts",
                     folder=state.root)
    # One night per spec at a time, whatever its state folder or store: the candidate lock sits beside
    # the spec and the lock is the spec's.
    with state.locked(), _spec_locked(spec):
        started = time.time()
        entry_id = state.new_id(started)
        said = Collected()

        def tell(event: Event) -> None:
            said(event)
            report(event)

        progress = _Progress()
        status, stage, error = "built", None, None
        try:
            status = _night(spec, options, state, entry_id, store, progress, tell, said, client)
        except _Failed as failed:
            status, stage, error = "failed", failed.stage, failed.error
            tell(Event(Phase.NIGHTLY, f"nightly failed at {stage}: {error}", kind=Kind.WARNING))
        except Exception as exc:  # unforeseen: still a failed night, recorded, with its hook
            status, stage, error = "failed", progress.stage, one_line(f"{type(exc).__name__}: {exc}")
            tell(Event(Phase.NIGHTLY, f"nightly failed at {stage}: {error}", kind=Kind.WARNING))
        finally:
            with contextlib.suppress(FileNotFoundError):
                lock_mod.candidate_path(spec).unlink()
        failure = None if stage is None else failure_of(stage, error or "", progress.layers, said,
                                                        progress.differences)
        entry = Entry(entry_id, spec.path.name, rfc3339(started), rfc3339(time.time()), status,  # type: ignore[arg-type]
                      stage, error, tuple(progress.moved), tuple(progress.layers), progress.check, progress.verify,
                      progress.image, progress.receipt,
                      sha256_prefixed(progress.lock_bytes) if progress.lock_bytes is not None else None,
                      steps=tuple(progress.steps), failure=failure)
        drift = report_of(entry, state)
        files = {"report.json": pretty(drift), "report.html": render_html(drift, tell).encode()}
        if progress.lock_bytes is not None:
            files[LOCK_FILE if status == "built" else CANDIDATE_FILE] = progress.lock_bytes
        if progress.receipt_bytes is not None:
            files[RECEIPT_FILE] = progress.receipt_bytes  # kept with the night: a receipt path may be rewritten
        folder = state.write(entry, files)
        if status == "built":
            state.set_current(entry_id)  # after the entry: a pointer never names a missing entry
        if options.keep is not None:
            try:
                _prune(state, options.keep, lambda: engine_of(store), store, spec.path, tell)
            except (SparkimgError, OSError) as exc:  # the night is recorded; pruning waits for the next
                why = exc.message if isinstance(exc, SparkimgError) else str(exc)
                tell(Event(Phase.NIGHTLY, f"prune: {why}; nothing more was removed", kind=Kind.WARNING))
        night = Night(entry, folder)
    if options.hook:
        _hook(options.hook, night, spec, tell)
    return night


def _prune(state: State, keep: int, connect: Callable[[], Engine], store: Store, spec_path: Path,
           tell: Reporter) -> None:
    """Drop the nights past ``keep`` (``State.prune``), their receipts, and untag, in the engine,
    each image only those nights named: the layers of an image nothing names are then the
    engine's to free; then collect the store's garbage (``store.gc``), so what only those nights
    reached leaves the disk. The registry's tags are left to the registry's own retention."""
    removed, kept = state.prune(keep)
    if not removed:
        return
    _drop_receipts(removed, kept, store, spec_path)
    named = {e.image.reference for e in kept if e.image is not None}
    orphans = sorted({e.image.reference for e in removed if e.image is not None} - named)
    untagged = 0
    if orphans:
        engine = connect()
        for reference in orphans:
            try:
                engine.untag(reference)
                untagged += 1
            except EngineError as exc:
                tell(Event(Phase.NIGHTLY, f"prune: could not untag {reference}: {exc.message}", kind=Kind.LOG))
    tell(Event(Phase.NIGHTLY, f"pruned {len(removed)} night(s) past the newest {keep} "
               f"({removed[0].entry} .. {removed[-1].entry}); untagged {untagged} image(s) only they named",
               figures={"pruned": len(removed), "untagged": untagged}))
    collected = collect(store)
    tell(Event(Phase.NIGHTLY, f"gc: removed {len(collected.removed)} store entries "
               f"({format_size(collected.removed_bytes)}) no kept night, receipt or spec reaches",
               figures={"removed_bytes": collected.removed_bytes}))


def _drop_receipts(removed: Sequence[Entry], kept: Sequence[Entry], store: Store, spec_path: Path) -> None:
    """The receipt files only pruned nights named, and the SBOMs beside them (they would keep their
    images in the store for ever: every file under ``receipts/`` is a gc root), except the spec's
    own build's."""
    from sparkimg.sbom.attest import sbom_path

    named = {e.receipt for e in kept if e.receipt}
    own = store.read_record(ROOTS, root_name(spec_path))
    image_key = str(((own or {}).get("keys") or [""])[-1])
    for entry in removed:
        path = Path(entry.receipt) if entry.receipt else None
        if path is None or entry.receipt in named or (image_key and path.name.startswith(image_key[:16])):
            continue
        sbom_path(path).unlink(missing_ok=True)
        path.unlink(missing_ok=True)


def report_of(entry: Entry, state: State) -> dict[str, Any]:
    return report(entry, state.entries(tolerant=True))


@contextlib.contextmanager
def _spec_locked(spec: Spec) -> Iterator[None]:
    """An exclusive, non-blocking flock beside the spec (``SPEC.nightly.lock``)."""
    path = spec.path.with_name(spec.path.name + ".nightly.lock")
    with alone(path, f"{spec.path}: another sparkimg nightly of this spec is running (it holds {path})",
               "wait for it; two nights of one spec never run at once"):
        yield


def _night(spec: Spec, options: Options, state: State, entry_id: str, store: Store,
           progress: _Progress, tell: Reporter, said: Collected, client: RegistryClient | None) -> str:
    """The stages; returns the status ("unchanged" or "built"), raises _Failed. ``client``: the
    ``--push`` registry's, when there is one."""

    def _stage(name: str, work: Callable[[], Any]) -> Any:
        progress.stage = name
        started = time.monotonic()
        try:
            return _run_stage(name, work)
        finally:
            if name != "build":  # the build's own steps (fetch, compile, ..., sign) say where its time went
                # The night's "sign" stage verifies what the build signed.
                progress.steps.append(Step("verify" if name == "sign" else name, round(time.monotonic() - started, 3)))
    current, candidate, changes = _stage("resolve", lambda: _resolve(spec, store, tell))
    progress.moved = [details(change, spec, store) for change in changes]
    raw = pretty(candidate.to_json())
    served = _served(state)
    if current is not None and sha256_prefixed(raw) == current.digest == served:
        tell(Event(Phase.RESOLVE, f"nothing moved ({', '.join(moving_inputs(spec)) or 'no moving inputs'}); "
                   f"{spec.image}:nightly stays", kind=Kind.DONE))
        return "unchanged"
    progress.lock_bytes = raw
    for move in progress.moved:
        tell(Event(Phase.RESOLVE, f"{move.input} moved: {move.before} -> {move.after}"))
    path = lock_mod.candidate_path(spec)
    cand = _stage("plan", lambda: _candidate(spec, path, raw, store))
    changed = layer_changes(spec, _comparable(spec, current), cand)
    try:
        built = _stage("build", lambda: build(spec.path, BuildOptions(options.overrides, options.key,
                                                                      check=options.check, lock=path), store, tell))
    except _Failed:
        progress.layers = _failed_rows(spec, changed, said)
        raise
    progress.layers = _rows(spec, changed, built)
    progress.steps.extend(built.steps)
    if built.receipt is None:
        raise _Failed("sign", built.receipt_error or "no receipt was written")
    progress.receipt = str(built.receipt.path)
    progress.receipt_bytes = built.receipt.path.read_bytes()
    result = built.result
    image = _image_out(result, cand, store)
    progress.image = image  # built and tagged: recorded whatever follows (so --keep can untag it)
    if built.check is not None:
        progress.check = {"identical": built.check.identical, "differences": len(built.check.differences)}
        if not built.check.identical:
            progress.differences = built.check.differences
            raise _Failed("check", f"the rebuild from scratch differs in {len(built.check.differences)} place(s); "
                          "see `sparkimg build --check` on the candidate")
    if not built.receipt.signed:
        raise _Failed("sign", f"{built.receipt.path} is not signed")
    progress.verify = _stage("sign", lambda: _verify(built.receipt.path, options.key, result.image_ref, store))
    if not progress.verify["ok"]:
        raise _Failed("sign", f"the signed receipt does not verify: {progress.verify['message']}")
    pushed = _stage("push", lambda: _push(result, cand, store, options.push, entry_id, built, client, tell)) \
        if options.push else None
    if pushed is not None:
        image = ImageOut(image.reference, image.manifest, image.config, image.size_bytes,
                         (*image.tags, *(f"{pushed.repository}:{t}" for t in pushed.tags)), pushed.repository,
                         pushed.reached.to_json() if pushed.reached is not None else None)
    in_place = current.digest if current is not None else None
    progress.image = _stage("promote", lambda: _promote(spec, raw, in_place, image, engine_of(store), client,
                                                                tell))
    return "built"


def _run_stage(name: str, work: Callable[[], Any]) -> Any:
    """Run one stage; a SparkimgError (or a file that cannot be read or written) becomes the
    night's failure at ``name``."""
    try:
        return work()
    except SparkimgError as exc:
        raise _Failed(name, one_line(exc.message) or type(exc).__name__) from exc
    except OSError as exc:
        raise _Failed(name, f"{exc.filename or 'a file'}: {exc.strerror or exc}") from exc


def _served(state: State) -> str | None:
    """The lock digest of the night in service; None when none is (or its entry was removed)."""
    in_service = state.current()
    try:
        return state.get(in_service).lock_digest if in_service else None
    except UsageError:
        return None


def one_line(message: str, limit: int = 500) -> str:
    """An error message as one line a report shows: its first line, and when that introduces more
    ("...; last output:"), the last line of what follows (the tool's own last word)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return ""
    said = lines[0]
    if len(lines) > 1 and said.endswith(":"):
        said = f"{said} {lines[-1]}"
    return said if len(said) <= limit else said[: limit - 1] + "…"


def _resolve(spec: Spec, store: Store, tell: Reporter) -> tuple[Lock | None, Any, list[Change]]:
    current = lock_mod.load_lock(spec) if lock_mod.lock_path(spec).exists() else None
    candidate = lock_mod.resolve(spec, store, previous=current, update=moving_inputs(spec), report=tell)
    return current, candidate, moved(current.model if current else None, candidate)


def _candidate(spec: Spec, path: Path, raw: bytes, store: Store) -> Lock:
    """The candidate written beside the spec's lock, read back and checked against the spec."""
    from sparkimg._internal.fs.atomic import write_atomic

    write_atomic(path, raw)
    cand = lock_mod.load_candidate(spec, path)
    lock_mod.check(spec, cand, store)
    return cand


def _comparable(spec: Spec, current: Lock | None) -> Lock | None:
    """The current lock when its layers can be keyed for this spec (a spec edited since has no
    comparable keys: every layer then reads as new)."""
    if current is None:
        return None
    try:
        layer_changes(spec, None, current)
    except (KeyError, AssertionError):
        return None
    return current


def _rows(spec: Spec, changed: Mapping[str, tuple[str, str | None]], built: Built) -> list[LayerRun]:
    """Each layer, rebuilt or reused and why, with its compile's cost when it was rebuilt."""
    result = built.result
    kinds = {layer.name: layer.kind for layer in result.plan.layers}
    rows = []
    for name, (key, why) in changed.items():
        record = result.records.get(name)
        rebuilt = name in result.built or (kinds.get(name) == "wheel" and why is not None and "image" in result.built)
        if rebuilt and record is not None and name in result.built:
            m = record.metrics
            rows.append(LayerRun(name, "rebuilt", why or "not in the store", key, m.wall_s, m.cpu_s, m.peak_memory,
                                 ObjectCost.costliest(record.steps), cache_figures(record.compiler_cache)))
        elif rebuilt:
            rows.append(LayerRun(name, "rebuilt", why or "not in the store", key))
        else:
            rows.append(LayerRun(name, "reused", "unchanged" if why is None else f"built before ({why})", key))
    return rows


def _failed_rows(spec: Spec, changed: Mapping[str, tuple[str, str | None]], said: Collected) -> list[LayerRun]:
    """The rows of a build that failed, from what it reported: the layers it finished, the first it
    did not (failed) and those after it (skipped)."""
    done = {e.layer: e for e in said.of(Phase.COMPILE, Kind.DONE) if e.layer}
    cached = {e.layer for e in said.of(Phase.COMPILE) if e.layer and f"{e.layer}: cached (" in e.message}
    compile_layers = {layer.name for layer in spec.layers if isinstance(layer, CompileLayer)}
    rows, failed = [], False
    for name, (key, why) in changed.items():
        if name in done:
            f = done[name].figures
            rows.append(LayerRun(name, "rebuilt", why or "not in the store", key, _num(f.get("wall_s")),
                                 _num(f.get("cpu_s")), _int(f.get("peak_memory"))))
        elif name in cached or (why is None and name != "image"):
            rows.append(LayerRun(name, "reused", "unchanged" if why is None else f"built before ({why})", key))
        elif name in compile_layers and not failed:
            failed = True
            rows.append(LayerRun(name, "failed", why or "not in the store", key))
        else:
            rows.append(LayerRun(name, "skipped", why or "not in the store", key))
    return rows


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _verify(receipt: Path, key: Path | None, image_ref: str, store: Store) -> dict[str, Any]:
    """The receipt just signed, verified as a node would (``verify-receipt --image``): the
    signature by the key's public half, the statement, and the image in the engine."""
    from sparkimg.receipts.verify import Request, local_image_of, verify
    from sparkimg.signing.keys import load_private

    chosen = signing_key_path(key)
    assert chosen is not None, "run() refuses a night without a key"
    checked = verify(Request(receipt, load_private(chosen).public, image=image_ref), store=store,
                     local_image=local_image_of)
    if checked.ok:
        return {"ok": True, "message": f"signature, statement and {image_ref} verified ({len(checked.checks)} checks)"}
    return {"ok": False, "message": "; ".join(checked.reasons()[:3]) or f"failed at {checked.failed}"}


def _image_out(result: Any, cand: Lock, store: Store) -> ImageOut:
    from sparkimg.fetch.inputs import base_image

    size = None
    if result.oci is not None:
        with contextlib.suppress(SparkimgError):
            base = base_image(cand, store)
            size = sum(d.size for d in base.layers) + sum(layer.descriptor.size for layer in result.oci.layers)
    return ImageOut(result.image_ref, result.oci.manifest_digest if result.oci else None,
                    result.oci.config_digest if result.oci else result.image_id, size, (result.image_ref,))


def _push(result: Any, cand: Lock, store: Store, target: str | None, entry_id: str, built: Built,
          client: RegistryClient | None, tell: Reporter) -> Pushed:
    """The image to ``target`` under its dated tag (``nightly-ENTRY``), with its receipt and SBOM
    (``sparkimg push``'s own path); the moving tag is moved only at promotion."""
    from sparkimg.distribution.push import push_built
    from sparkimg.image.assemble import image_record

    assert target is not None and built.receipt is not None, "the night refuses a build without its receipt"
    record = image_record(store, result.plan.image.key)
    if record is None:
        raise UsageError(f"the store has no OCI record of {result.image_ref} to push")
    return push_built(record, cand, store, target, [f"nightly-{entry_id}"], built.receipt.path, result.image_ref,
                      receipt_required=True, client=client, report=tell)


def _promote(spec: Spec, raw: bytes, in_place: str | None, image: ImageOut, engine: Engine,
             client: RegistryClient | None, tell: Reporter) -> ImageOut:
    """The registry's moving tag, the engine's, then the lock (the candidate's bytes written onto
    it, so the image key is the one just built); all or nothing: should a step fail, the tags
    already moved are put back where they were. The lock must still be the one the night resolved
    from (a `sparkimg lock` run meanwhile is not overwritten)."""
    from sparkimg._internal.fs.atomic import write_atomic
    from sparkimg.nightly.tags import MOVING_TAG, engine_tag, moved_back

    lock = lock_mod.lock_path(spec)
    now = sha256_prefixed(lock.read_bytes()) if lock.exists() else None
    if now != in_place:
        raise UsageError(f"{lock} changed while the night ran (it is {now}, the night resolved from {in_place})",
                         hint="the night promotes nothing over a lock written meanwhile; the next night starts "
                         "from the new lock")
    repository = image.repository if image.manifest is not None else None
    with moved_back(engine, spec, repository, client) as move:
        tags = list(image.tags)
        if repository is not None and image.manifest is not None:
            move.registry(image.manifest)
            tags.append(f"{repository}:{MOVING_TAG}")
        move.engine(image.reference)
        tags.append(engine_tag(spec))
        write_atomic(lock, raw)
    tell(Event(Phase.PUSH, f"promoted: {lock.name} and {engine_tag(spec)} now name {image.reference}",
               kind=Kind.DONE))
    return ImageOut(image.reference, image.manifest, image.config, image.size_bytes, tuple(tags), image.repository,
                    image.registry)


# -- the HTML page ------------------------------------------------------------------------------


def render_html(drift: Mapping[str, Any], tell: Reporter = silent) -> str:
    """The self-contained HTML page of a report (``sparkimg.nightly.html``). Should the renderer
    fail, a plain escaped page instead, and a warning: a page never costs the record of a night."""
    try:
        from sparkimg.nightly.html import render

        return render(drift)
    except Exception as exc:  # any failure of the page: the entry must still be written
        tell(Event(Phase.NIGHTLY, f"the report page could not be drawn ({type(exc).__name__}: {exc}); "
                   "a plain page was written instead", kind=Kind.WARNING))
        return _plain_html(drift)


def _plain_html(drift: Mapping[str, Any]) -> str:
    """A minimal page: every value escaped (git subjects and error messages are untrusted)."""
    e = html.escape
    rows = "".join(f"<tr><td>{e(str(m.get('input')))}</td><td>{e(str(m.get('from')))}</td>"
                   f"<td>{e(str(m.get('to')))}</td></tr>" for m in drift.get("moved", []))
    layers = "".join(f"<tr><td>{e(str(layer.get('name')))}</td><td>{e(str(layer.get('status')))}</td>"
                     f"<td>{e(str(layer.get('reason')))}</td><td>{e(str(layer.get('wall_s')))}</td></tr>"
                     for layer in drift.get("layers", []))
    error = ""
    if drift.get("status") == "failed":
        found = drift.get("failure")
        failure: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        error = f"<p>failed at {e(str(drift.get('failed_stage')))}: {e(str(drift.get('error')))}</p>"
        if failure.get("first_error_line"):
            error += f"<p>first error line: <code>{e(str(failure['first_error_line']))}</code></p>"
        files = "".join(f"<li>{e(str(f.get('layer')))}: {e(str(f.get('path')))}</li>"
                        for f in failure.get("files") or [] if isinstance(f, Mapping))
        error += f"<ul>{files}</ul>" if files else ""
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>sparkimg nightly "
            f"{e(str(drift.get('entry')))}</title></head><body><h1>{e(str(drift.get('spec')))}: "
            f"{e(str(drift.get('status')))}</h1>{error}<h2>moved</h2><table><tr><th>input</th><th>from</th>"
            f"<th>to</th></tr>{rows}</table><h2>layers</h2><table><tr><th>layer</th><th>status</th><th>reason</th>"
            f"<th>wall s</th></tr>{layers}</table></body></html>\n")


# -- the hook -----------------------------------------------------------------------------------


def _hook(command: str, night: Night, spec: Spec, tell: Reporter) -> None:
    """Run ``command`` (``sh -c``) with the outcome in its environment; its failure is a warning."""
    env = {**os.environ, "SPARKIMG_NIGHTLY_STATUS": night.entry.status, "SPARKIMG_NIGHTLY_ENTRY": night.entry.entry,
           "SPARKIMG_NIGHTLY_REPORT": str(night.report_json), "SPARKIMG_NIGHTLY_HTML": str(night.report_html),
           "SPARKIMG_NIGHTLY_FAILED_STAGE": night.entry.failed_stage or "",
           "SPARKIMG_NIGHTLY_SPEC": str(spec.path), "SPARKIMG_NIGHTLY_EXIT": str(night.exit_code)}
    try:
        done = subprocess.run(["sh", "-c", command], env=env, check=False, timeout=600, capture_output=True, text=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        tell(Event(Phase.NIGHTLY, f"--hook {command!r}: {exc}", kind=Kind.WARNING))
        return
    if done.returncode != 0:
        tell(Event(Phase.NIGHTLY, f"--hook {command!r} exited {done.returncode}: {done.stderr.strip()[-300:]}",
                   kind=Kind.WARNING))
