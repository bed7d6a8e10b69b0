"""The pipeline API: one function per user task, each returning a typed result.

The CLI parses arguments, calls one of these and renders what it returns; tests and the
nightly job call them directly. Stages report progress as typed events to ``report``.
Heavy modules (the engine, signing, HTTP) are imported by the task that needs them, so
``sparkimg --version`` and a no-op build stay cheap.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from sparkimg._internal.locations import signing_key_path
from sparkimg.errors import EngineError, SparkimgError, UsageError
from sparkimg.events import Collected, Event, Kind, Phase, Reporter, silent

if TYPE_CHECKING:
    from sparkimg.distribution.archive import Loaded, Saved
    from sparkimg.distribution.pull import Pulled
    from sparkimg.distribution.push import Pushed
    from sparkimg.engine.protocol import Engine
    from sparkimg.fetch.inputs import Fetched
    from sparkimg.formats.nightly import Entry as NightEntry
    from sparkimg.formats.oci import ImageRecord
    from sparkimg.formats.statement import RunMetadata, Statement
    from sparkimg.image.bounds import Budget, Overrides
    from sparkimg.image.check import CheckReport
    from sparkimg.image.image import BuildResult
    from sparkimg.image.stamp import Stamp as NoopAnswer
    from sparkimg.lock.resolve import Lock
    from sparkimg.nightly.history import History, Rolled
    from sparkimg.nightly.run import Night
    from sparkimg.nightly.run import Options as NightOptions
    from sparkimg.nightly.state import State as NightState
    from sparkimg.patches.sums import SumProblem
    from sparkimg.plan.keys import Plan
    from sparkimg.prewarm.targets import Target
    from sparkimg.prewarm.verify import Report as CacheReport
    from sparkimg.prewarm.warm import Events as PrewarmEvents
    from sparkimg.prewarm.warm import Result as PrewarmResult
    from sparkimg.receipts.emit import Emitted
    from sparkimg.receipts.runargs import RunArgs
    from sparkimg.receipts.verify import Report as ReceiptReport
    from sparkimg.signing.dsse import Envelope
    from sparkimg.signing.keys import PrivateKey
    from sparkimg.source.preflight import Verdict
    from sparkimg.spec import Spec
    from sparkimg.store.content import Store
    from sparkimg.store.gc import Collection


__all__ = [
    "BuildOptions",
    "Built",
    "Checked",
    "Cleaned",
    "Collection",
    "NightOptions",
    "NodeRequest",
    "NoopAnswer",
    "Overrides",
    "Planned",
    "PrewarmRequest",
    "PrewarmSetup",
    "ReceiptReport",
    "ReceiptRequest",
    "RunMetadata",
    "Shown",
    "build",
    "check",
    "clean",
    "dockerfile",
    "doctor",
    "engine",
    "fetch",
    "gc",
    "history",
    "keygen",
    "load",
    "load_archive",
    "lock",
    "nightly",
    "noop_build",
    "patches_check",
    "patches_pin",
    "plan",
    "prewarm",
    "prewarm_list",
    "prewarm_verify",
    "promote",
    "pull",
    "push",
    "rollback",
    "run_args",
    "save",
    "sbom",
    "show_receipt",
    "signing_key",
    "verify_node",
    "verify_receipt",
]

# The option and report types a caller of this API builds or reads (the CLI among them), named
# here so that no caller reaches into a stage for them; imported on first use, so that importing
# the API stays cheap for ``--version`` and the no-op build.
_LAZY = {
    "Overrides": ("sparkimg.image.bounds", "Overrides"),
    "RunMetadata": ("sparkimg.formats.statement", "RunMetadata"),
    "NightOptions": ("sparkimg.nightly.run", "Options"),
    "ReceiptReport": ("sparkimg.receipts.verify", "Report"),
    "NoopAnswer": ("sparkimg.image.stamp", "Stamp"),
    "Collection": ("sparkimg.store.gc", "Collection"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _store(root: Path | None) -> Store:
    from sparkimg.store.content import Store

    return Store(root)


def load(spec_path: Path, report: Reporter = silent, store: Store | None = None) -> Spec:
    """The validated spec at ``spec_path`` (SpecError lists every problem); its warnings are reported.
    With a store, the YAML parse is remembered there by the file's sha256 (``_located``)."""
    from sparkimg.spec import load_spec

    spec = load_spec(spec_path, parsed=store.root / "records" / "parsed" if store is not None else None)
    for warning in spec.warnings:
        report(Event(Phase.SPEC, warning, kind=Kind.WARNING))
    return spec


def engine(store: Store) -> Engine:
    """The engine, with the client chosen before remembered in the store (no probe while the
    client binaries are unchanged; the daemon is asked by the first operation)."""
    from sparkimg.engine.connect import connect as connect_engine

    return connect_engine(remember=store.record_path("engine", "client"))


# -- check, lock, fetch, plan ----------------------------------------------------------


@dataclass(frozen=True)
class Checked:
    spec: Spec
    lock: Literal["absent", "current"]
    preflight: tuple[Verdict, ...] = ()


def check(spec_path: Path, *, store: Path | None = None, report: Reporter = silent) -> Checked:
    """Validate a spec, and its lock when there is one; with a lock, run the preflight on its
    vLLM sources (PreflightError when vLLM would collapse a requested architecture). No container
    runs; a vLLM source not yet in the store is fetched (verified by its pin) to be read."""
    from sparkimg.lock import resolve as lock_mod
    from sparkimg.source import preflight

    spec = load(spec_path, report)
    if not lock_mod.lock_path(spec).exists():
        return Checked(spec, "absent")
    the_store = _store(store)
    lock = lock_mod.load_checked(spec, the_store)
    return Checked(spec, "current", tuple(preflight.run(spec, lock, the_store, report=report)))


def lock(spec_path: Path, *, store: Path | None = None, update: Sequence[str] = (),
         report: Reporter = silent) -> Lock:
    """Resolve every mutable reference and write ``SPEC.lock.json``."""
    from sparkimg.lock import resolve as lock_mod

    spec = load(spec_path, report)
    previous = lock_mod.load(spec) if lock_mod.lock_path(spec).exists() else None
    model = lock_mod.resolve(spec, _store(store), previous=previous, update=update, report=report)
    return lock_mod.write(spec, model)


def fetch(spec_path: Path, *, store: Path | None = None, report: Reporter = silent) -> Fetched:
    """Fetch every locked input into the store, pull the base by digest, and read the base's
    layers for the SBOM (once per layer; ``sbom.layers``), so that the build needs no network."""
    from sparkimg.fetch.inputs import base_image
    from sparkimg.fetch.inputs import fetch as fetch_inputs
    from sparkimg.lock import resolve as lock_mod
    from sparkimg.sbom.layers import readings

    spec = load(spec_path, report)
    the_store = _store(store)
    lock = lock_mod.load_checked(spec, the_store)
    fetched = fetch_inputs(spec, lock, the_store, engine(the_store), report=report)
    base = base_image(lock, the_store, report=report)
    readings([d.digest for d in base.layers], the_store, base_repository=lock.base.repository,
             base_sizes={d.digest: d.size for d in base.layers}, report=report)
    return fetched


@dataclass(frozen=True)
class Planned:
    plan: Plan
    image_id: str | None


def plan(spec_path: Path, *, store: Path | None = None, report: Reporter = silent) -> Planned:
    """Each layer's key, whether it is built, and what changed since the last build. Without an
    engine the image shows as to build."""
    from sparkimg.image.image import image_state
    from sparkimg.lock import resolve as lock_mod
    from sparkimg.plan.keys import compute, image_key
    from sparkimg.source.preflight import run as run_preflight

    spec = load(spec_path, report)
    the_store = _store(store)
    lock = lock_mod.load_checked(spec, the_store)
    run_preflight(spec, lock, the_store, report=report)
    try:
        state = image_state(the_store, engine(the_store), spec, image_key(spec, lock))
        image_id = state.engine_id if state.built else None
    except EngineError as exc:
        report(Event(Phase.PLAN, f"no engine ({exc.message}); the image layer shows as to build", kind=Kind.WARNING))
        image_id = None
    return Planned(compute(spec, lock, the_store, image_built=image_id is not None), image_id)


def dockerfile(spec_path: Path, *, store: Path | None = None, report: Reporter = silent) -> str:
    """The Dockerfile equivalent of the image sparkimg assembles (FROM the pinned base, the wheels
    installed by pip, the baked patch files, env and labels), for a person to read; it names the
    wheels each compile layer built, so those must be built."""
    from sparkimg.fetch.inputs import base_tag
    from sparkimg.image.assemble import labels
    from sparkimg.image.dockerfile import dockerfile as text
    from sparkimg.image.dockerfile import wheels
    from sparkimg.image.image import compile_records
    from sparkimg.lock import resolve as lock_mod
    from sparkimg.plan.keys import compute

    the_store = _store(store)
    spec = load(spec_path, report, the_store)
    lock = lock_mod.load_checked(spec, the_store)
    plan = compute(spec, lock, the_store)
    records = compile_records(plan, the_store)
    for layer in plan.layers:
        if layer.kind == "compile" and layer.name not in records:
            raise UsageError(f"plan --dockerfile: compile layer {layer.name} is not built yet; the Dockerfile "
                             "names the wheels it builds", hint=f"run `sparkimg build {spec_path}` first")
    return text(plan, base_tag(spec, lock), wheels(plan, records), labels(plan))


# -- build -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildOptions:
    """What ``sparkimg build`` takes besides the spec."""

    overrides: Overrides | None = None
    key: Path | None = None
    receipt: Path | None = None
    record_host: bool = False
    prewarm: Path | None = None
    check: bool = False
    # Build from this lock file instead of SPEC.lock.json (the nightly's candidate), leaving the
    # spec's own lock untouched; no no-op stamp is kept for such a build.
    lock: Path | None = None


@dataclass(frozen=True)
class Built:
    result: BuildResult
    receipt: Emitted | None  # None only after ``--check``, whose verdict a receipt it could not write never hides
    prewarm: PrewarmResult | None
    check: CheckReport | None = None
    receipt_error: str | None = None  # why ``receipt`` is None

    def to_json(self) -> dict[str, Any]:
        from sparkimg.sbom.attest import sbom_path

        out = {**self.result.to_json(), "receipt": str(self.receipt.path) if self.receipt else None,
               "sbom": str(sbom_path(self.receipt.path)) if self.receipt else None,
               "signed": bool(self.receipt and self.receipt.signed),
               "prewarm": self.prewarm.to_json() if self.prewarm else None}
        if self.receipt_error is not None:
            out["receipt_error"] = self.receipt_error
        if self.check is not None:
            out["check"] = self.check.to_json()
        return out


def signing_key(path: Path | None) -> PrivateKey | None:
    """The key a build or prewarm signs with (``signing_key_path``), loaded."""
    from sparkimg.signing.keys import load_private

    chosen = signing_key_path(path)
    return load_private(chosen) if chosen else None


def build(spec_path: Path, options: BuildOptions = BuildOptions(), *, store: Path | None = None,
          report: Reporter = silent) -> Built:
    """Fetch, compile in bounds, audit, assemble; then prewarm (when asked) and write the receipt."""
    from sparkimg.lock import resolve as lock_mod
    from sparkimg.plan.keys import plan_keys
    from sparkimg.store.roots import lease, remember_root

    started_ns = time.time_ns()
    said = Collected()  # what this build reports, kept for the no-op stamp

    def tell(event: Event) -> None:
        said(event)
        report(event)
    the_store = _store(store)
    spec = load(spec_path, tell, the_store)
    lock = lock_mod.load(spec) if options.lock is None else lock_mod.load_candidate(spec, options.lock)
    keys = plan_keys(spec, lock)
    # The lease keeps gc off what this build reads and writes; the root, once it is built, after it.
    with lease(the_store, lock=lock.path, keys=keys):
        built = _build(spec, lock, the_store, options, tell, said.events, started_ns)
        if options.lock is None:
            remember_root(the_store, spec.path, lock=lock.path, receipts=spec.root / "receipts", keys=keys)
    return built


def _build(spec: Spec, lock: Lock, the_store: Store, options: BuildOptions, tell: Reporter, said: list[Event],
           started_ns: int) -> Built:
    """The build itself, under its lease."""
    from sparkimg.image import stamp
    from sparkimg.image.bounds import Overrides
    from sparkimg.image.check import check_built
    from sparkimg.image.image import build as build_image
    from sparkimg.image.image import described
    from sparkimg.prewarm.warm import prewarm_built
    from sparkimg.receipts.emit import RECORDS, default_path, emit, has_statement
    from sparkimg.sbom.attest import made as made_sbom
    from sparkimg.sbom.attest import sbom_path

    overrides = options.overrides or Overrides()
    key = signing_key(options.key)
    the_engine = engine(the_store)
    result = build_image(spec, lock, the_store, the_engine, overrides, report=tell)
    if not result.built and not has_statement(result, the_store):
        result = described(result, the_store, the_engine, tell)  # the receipt is written again: in full
    checked = check_built(result, the_store, the_engine, overrides, tell) if options.check else None
    if checked is not None:
        result.check = checked.to_receipt()
    warmed = prewarm_built(spec, result, the_engine, options.prewarm, overrides, key, tell) \
        if options.prewarm is not None else None
    receipt_file = options.receipt or default_path(result)
    try:
        sbom = made_sbom(result, the_store, key, receipt_file, tell)
        emitted = emit(result, the_store, key, path=receipt_file, record_host=options.record_host,
                       prewarm=warmed[1] if warmed else None, sbom=sbom)
    except SparkimgError as exc:
        if checked is None:
            raise
        # ``--check`` answers whether two builds agree; a receipt it could not update is a warning beside it.
        tell(Event(Phase.RECEIPT, f"receipt not written: {exc}", kind=Kind.WARNING))
        return Built(result, None, warmed[0] if warmed else None, checked, receipt_error=str(exc))
    result.receipt = str(emitted.path)
    if emitted.signed:
        tell(Event(Phase.RECEIPT, f"receipt {emitted.path} signed by {emitted.keyid and emitted.keyid[:16]}"
                   + ("" if emitted.written else " (unchanged)")))
    else:
        tell(Event(Phase.RECEIPT, f"receipt {emitted.path} is NOT signed; pass --key or set SPARKIMG_KEY "
                   "(create one with `sparkimg keygen`)", kind=Kind.WARNING))
    built = Built(result, emitted, warmed[0] if warmed else None, checked)
    where = stamp.location(the_store.root, spec.path)
    if emitted.written or result.built or options.prewarm is not None or options.check \
            or options.lock is not None:
        stamp.forget(where)  # only a no-op of the spec's own lock is stamped
    else:
        stamp.keep_noop(where, spec, lock, the_store, the_engine, result, receipt_file=emitted.path,
                        statement_file=the_store.record_path(RECORDS, result.plan.image.key),
                        sbom_file=sbom_path(emitted.path),
                        output=built.to_json(), said=said, started_ns=started_ns, key=options.key,
                        receipt=options.receipt, record_host=options.record_host)
    return built


def noop_build(spec_path: Path, *, store: Path | None = None, key: Path | None = None,
               receipt: Path | None = None, record_host: bool = False) -> NoopAnswer | None:
    """The answer of a ``build`` that would build nothing, from its stamp (``image.stamp``), without
    loading the spec or the pipeline; None when the build must run. Any failure to read or check
    the stamp is None too: the stamp only ever saves time, so a damaged or unreadable one (or one
    an older sparkimg wrote) sends the build the whole way, which writes a new one."""
    from sparkimg._internal.locations import default_store
    from sparkimg.image import stamp

    root = (store or default_store()).expanduser()
    try:
        found = stamp.read(stamp.location(root, spec_path))
        ctx = stamp.context(root, key=key, receipt=receipt, record_host=record_host)
        return found if found is not None and found.holds(ctx) else None
    except Exception:  # deliberately broad: see the docstring; tests/unit/image/test_stamp.py
        return None


class _Stored(NamedTuple):
    spec: Spec
    store: Store
    lock: Lock
    key: str
    record: ImageRecord


def _stored_image(spec_path: Path, store: Path | None, report: Reporter) -> _Stored:
    """The spec, store, checked lock, image key and the store's record of the image it builds;
    refused, naming the command that makes it, when the store has none."""
    from sparkimg.image.assemble import image_record
    from sparkimg.lock import resolve as lock_mod
    from sparkimg.plan.keys import image_key

    spec = load(spec_path, report)
    the_store = _store(store)
    lock = lock_mod.load_checked(spec, the_store)
    key = image_key(spec, lock)
    record = image_record(the_store, key)
    if record is None:
        raise UsageError(f"{spec_path}: the store has no image for this spec and lock (key {key[:16]})",
                         hint=f"build it first: `sparkimg build {spec_path}`")
    return _Stored(spec, the_store, lock, key, record)


@dataclass(frozen=True)
class ShownSbom:
    """An SBOM as ``sparkimg sbom`` shows it: the SPDX document, where it came from, and the state
    of its signature (checked with ``--key``)."""

    document: dict[str, Any]
    source: str  # "store", the SBOM file read, or the artifact digest in the registry
    signature: str


def sbom(source: Path | str, *, key: Path | None = None, store: Path | None = None,
         report: Reporter = silent) -> ShownSbom:
    """The SBOM (an SPDX 2.3 document) of a built image, by what the operator has at hand:

    - a SPEC: made from the store (the image's layers, read once each; the lock; the build
      records), the same bytes for the same lock; unsigned, as nothing signed it yet;
    - a RECEIPT (or the SBOM file itself): the signed SBOM beside it; with ``key``, checked
      against the key and the receipt that names it (``sbom.attest.verified``);
    - a REF (REGISTRY/REPO:TAG or @DIGEST): the SBOM attached beside the image; with ``key``, the
      newest one it signed."""
    from sparkimg.formats import sbom as sbom_format
    from sparkimg.plan.keys import image_ref
    from sparkimg.sbom.attest import UNCHECKED, document_of, signed_file
    from sparkimg.signing import dsse
    from sparkimg.signing.keys import load_public

    path = Path(source)
    trusted = load_public(key) if key is not None else None
    if not path.exists() and "/" in str(source) and not str(source).endswith((".json", ".yaml", ".yml")):
        from sparkimg.distribution.pull import attached_sbom

        artifact, attached = attached_sbom(str(source), trusted)
        return ShownSbom(sbom_format.parse(dsse.parse(attached, artifact).payload, artifact)[1], artifact,
                         "valid" if trusted else UNCHECKED)
    if path.suffix != ".json":
        spec, the_store, lock, image, record = _stored_image(path, store, report)
        return ShownSbom(document_of(spec, lock, the_store, record, image_ref(spec, image), report), "store",
                         "unsigned (made from the store)")
    return ShownSbom(*signed_file(path, trusted))


# -- push ------------------------------------------------------------------------------


def push(spec_path: Path, target: str, tags: Sequence[str] = (), *, receipt: Path | None = None,
         store: Path | None = None, compression: str = "none", level: int | None = None,
         threads: int | None = None, report: Reporter = silent) -> Pushed:
    """Upload the spec's built image, from the store's OCI data, to ``target`` (REGISTRY/REPO),
    tagged with an immutable dated tag (``YYYYMMDD-KEY12``, the date of the lock's source epoch)
    and ``tags``; its receipt (``receipt``, else where ``build`` wrote it) goes beside it. With
    ``compression`` (gzip or zstd, at ``level``) the new layers leave compressed on ``threads``
    threads (default: every core); the bytes do not depend on the thread count."""
    from datetime import UTC, datetime

    from sparkimg.distribution.compression import chosen, default_threads
    from sparkimg.distribution.push import push_built, target_of
    from sparkimg.plan.keys import image_ref
    from sparkimg.receipts.emit import receipt_path

    target_of(target)  # bad input fails before anything is read
    compressor = chosen(compression, level)
    if threads is not None and threads < 1:
        raise UsageError(f"--threads {threads}: give 1 or more", hint="leave it out to use every core")
    spec, the_store, lock, key, record = _stored_image(spec_path, store, report)
    dated = f"{datetime.fromtimestamp(lock.source_date_epoch, UTC):%Y%m%d}-{key[:12]}"
    return push_built(record, lock, the_store, target, [dated, *tags], receipt or receipt_path(spec, key),
                      image_ref(spec, key), receipt_required=receipt is not None, compression=compressor,
                      threads=threads or default_threads(), report=report)


def pull(reference: str, key: Path, *, recipe: Path | None = None, receipt_out: Path | None = None,
         store: Path | None = None, report: Reporter = silent) -> Pulled:
    """Verify the receipt attached to ``reference`` with the public ``key``, then pull it by digest."""
    from sparkimg.distribution.pull import pull as pull_image
    from sparkimg.signing.keys import load_public

    trusted = load_public(key)
    return pull_image(reference, trusted, engine(_store(store)), recipe=recipe, receipt_out=receipt_out,
                      report=report)


# -- save, load ------------------------------------------------------------------------


def save(source: Path, output: Path, *, without_base: bool = False, receipt: Path | None = None,
         tag: str | None = None, store: Path | None = None, report: Reporter = silent) -> Saved:
    """Write the image a SPEC built (or a RECEIPT names) and its receipt to ``output``: an OCI image
    layout with Docker's ``manifest.json``, which ``docker load``, ``podman load`` and
    ``sparkimg load`` take. ``without_base`` leaves the base's layers out."""
    from sparkimg.distribution.archive import save_built
    from sparkimg.image.assemble import image_record
    from sparkimg.plan.keys import image_ref
    from sparkimg.receipts.emit import receipt_path
    from sparkimg.receipts.verify import receipt_facts

    if source.suffix != ".json":
        spec, the_store, _, key, record = _stored_image(source, store, report)
        return save_built(record, the_store, receipt or receipt_path(spec, key), image_ref(spec, key), output,
                          tag=tag, without_base=without_base, report=report)
    if not source.is_file():
        raise UsageError(f"{source}: no receipt there; the archive carries one", hint="pass the receipt `sparkimg "
                         "build` wrote, or the SPEC")
    the_store = _store(store)
    facts = receipt_facts(source)
    key = str(facts.get("image.key") or "")
    found = image_record(the_store, key) if key else None
    if found is None:
        raise UsageError(f"{source}: the store has no image for key {key[:16] or '?'}",
                         hint="build it into this store first: `sparkimg build SPEC`, with the spec and lock the "
                         "receipt was built from")
    return save_built(found, the_store, source, str(facts.get("image.reference") or ""), output, tag=tag,
                      without_base=without_base, report=report)


def load_archive(path: Path, key: Path, *, recipe: Path | None = None, tag: str | None = None,
                 receipt_out: Path | None = None, store: Path | None = None, report: Reporter = silent) -> Loaded:
    """Verify the receipt in the archive at ``path`` with the public ``key``, then load it and tag it."""
    from sparkimg.distribution.archive import load as load_file
    from sparkimg.signing.keys import load_public

    trusted = load_public(key)
    the_store = _store(store)
    return load_file(path, trusted, engine(the_store), the_store, recipe=recipe, tag=tag, receipt_out=receipt_out,
                     report=report)


# -- keys, patches, receipts -----------------------------------------------------------


def keygen(prefix: Path, *, force: bool = False) -> PrivateKey:
    """Write an ECDSA P-256 key pair: ``PREFIX.key`` (0600) and ``PREFIX.pub``."""
    from sparkimg.signing.keys import generate

    return generate(prefix, force=force)


def patches_pin(folder: Path) -> dict[str, dict[str, str]]:
    """Write a patch set's MD5SUMS and SHA256SUMS; return each file's digests."""
    from sparkimg.patches import sums as patches

    return patches.pin(folder)


def patches_check(folder: Path) -> tuple[dict[str, dict[str, str]], list[SumProblem]]:
    """A patch set's files against its sums files: (files, mismatches)."""
    from sparkimg.patches import sums as patches

    return patches.check(folder)


@dataclass(frozen=True)
class ReceiptRequest:
    receipt: Path
    key: Path
    recipe: Path | None = None
    image: str | None = None
    patches: Path | None = None
    rehash: bool = False
    sbom: Path | None = None  # default: the SBOM beside the receipt, when there


def verify_receipt(request: ReceiptRequest, *, store: Path | None = None) -> ReceiptReport:
    """Check a receipt against the key, a recipe, the image and the patch files, stage by stage."""
    from sparkimg.receipts.verify import Request, local_image_of, verify
    from sparkimg.signing.keys import load_public

    checked = Request(request.receipt, load_public(request.key), request.recipe, request.image, request.patches,
                      request.rehash, sbom=request.sbom)
    return verify(checked, store=_store(store), local_image=local_image_of)


@dataclass(frozen=True)
class NodeRequest:
    """What a rank's launcher checks before ``docker run``: this receipt, by this key, and what the
    node has (the image by digest, the patch files, the prewarmed cache)."""

    receipt: Path
    key: Path
    recipe: Path | None = None
    patches: Path | None = None
    cache: Path | None = None
    sbom: Path | None = None  # default: the SBOM beside the receipt, when there


def verify_node(request: NodeRequest, *, store: Path | None = None) -> ReceiptReport:
    """``verify-node``: signature, statement, recipe, the image in this node's engine by digest, the
    patch files, and the prewarmed cache (its quick check: signature, image, sizes)."""
    from sparkimg.receipts.verify import Check, Request, verify
    from sparkimg.signing.keys import load_public

    the_engine = engine(_store(store))

    def inspect(reference: str) -> tuple[str, dict[str, str]] | None:
        info = the_engine.inspect(reference)
        return (info.id, info.labels) if info else None

    report = verify(Request(request.receipt, load_public(request.key), request.recipe, None, request.patches,
                            node=inspect, sbom=request.sbom))
    if report.ok and request.cache is not None:
        cached = prewarm_verify(PrewarmRequest(request.cache, receipt=request.receipt), request.key, quick=True)
        said = "; ".join(f"{p['check']}: {p['message']}" for p in cached.problems[:3])
        report.checks.append(Check("cache", "prewarmed cache (signature, image, sizes)", "ok",
                                   "ok" if cached.ok else f"{len(cached.problems)} problem(s)", cached.ok, said))
        if not cached.ok:
            report.failed = "cache"
    return report


@dataclass(frozen=True)
class Shown:
    envelope: Envelope
    signature: str
    statement: Statement
    facts: dict[str, Any]


def show_receipt(receipt: Path, key: Path | None = None) -> Shown:
    """A receipt's statement and dotted fields, and its signature's state when ``key`` is given."""
    from sparkimg.formats.statement import facts, load
    from sparkimg.signing import dsse
    from sparkimg.signing.keys import load_public

    envelope = dsse.read(receipt)
    signature = "not checked (pass --key)"
    if key:
        why = envelope.check_signature(load_public(key))
        signature = "valid" if why is None else f"INVALID: {why}"
    data = load(envelope.payload, str(receipt))
    return Shown(envelope, signature, data, facts(data))


def run_args(receipt: Path, root: Path, key: Path | None = None, cache: Path | None = None) -> RunArgs:
    """The ``docker run`` arguments a receipt implies: read-only patch mounts and a warmed cache."""
    from sparkimg.receipts.runargs import run_args as receipt_args
    from sparkimg.signing.keys import load_public

    return receipt_args(receipt, root, load_public(key) if key else None, cache)


# -- prewarm ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PrewarmRequest:
    """Which image's kernel set (exactly one of spec, image, receipt) and where it compiles."""

    cache: Path | None
    spec: Path | None = None
    image: str | None = None
    receipt: Path | None = None
    runner: Literal["image", "host"] = "image"
    python: str | None = None
    image_id: str | None = None
    overrides: Overrides | None = None


@dataclass(frozen=True)
class PrewarmSetup:
    target: Target
    budget: Budget
    engine: Engine | None


def _cache_of(request: PrewarmRequest) -> Path:
    """The cache folder a prewarm or a verify works on; it is required."""
    if request.cache is None:
        raise UsageError("--cache DIR is required", hint="name the folder the serving container will mount")
    return request.cache


def _prewarm_setup(request: PrewarmRequest) -> PrewarmSetup:
    from sparkimg.engine.connect import connect as connect_engine
    from sparkimg.image.bounds import Overrides, derive
    from sparkimg.prewarm import targets

    if request.runner != "host" and (request.image_id or request.python):
        raise UsageError("--image-id and --python go with --runner host",
                         hint="inside an image, sparkimg records the image's own ID and uses its own Python")
    engine: Engine | None = None
    if request.spec is not None and request.runner == "host":
        target = targets.on_host(targets.target_of_spec(load(request.spec)), request.image_id)
    else:
        engine = connect_engine()
        if request.spec is not None:
            target = targets.for_built_spec(load(request.spec), engine)
        elif request.receipt is not None:
            target = targets.for_receipt(request.receipt, engine)
        elif request.image is not None:
            target = targets.for_image(request.image, engine)
        else:
            raise UsageError("name the image: --spec, --image or --receipt")
        if request.runner == "host":
            target = targets.on_host(target, request.image_id)
    budget = derive(target.kernels.bounds, request.overrides or Overrides(), layer="prewarm")
    return PrewarmSetup(target, budget, engine)


def prewarm_list(request: PrewarmRequest, *, report: Reporter = silent) -> tuple[Target, PrewarmEvents]:
    """Resolve the kernel set where it will run; compile nothing."""
    from sparkimg.prewarm.runner import runner_for
    from sparkimg.prewarm.warm import list_modules

    setup = _prewarm_setup(request)
    runner = runner_for(request.runner, setup.target, engine=setup.engine, budget=setup.budget,
                        python=request.python)
    return setup.target, list_modules(setup.target, runner, report)


def prewarm(request: PrewarmRequest, key: Path | None = None, *, report: Reporter = silent) -> PrewarmResult:
    """Compile the kernel set into ``request.cache`` and write its (signed) manifest."""
    from sparkimg._internal.units import format_size
    from sparkimg.prewarm.runner import runner_for
    from sparkimg.prewarm.warm import prewarm as warm

    cache = _cache_of(request)
    setup = _prewarm_setup(request)
    runner = runner_for(request.runner, setup.target, engine=setup.engine, budget=setup.budget,
                        python=request.python)
    signer = signing_key(key)
    target, budget = setup.target, setup.budget
    where = target.image_ref or f"this Python ({request.python or sys.executable})"
    report(Event(Phase.PREWARM, f"prewarm {len(target.kernels.modules)} modules for {where}: {budget.jobs} job(s), "
                 f"memory {format_size(budget.memory)}" + (", network none" if request.runner == "image" else
                                                          ", no cgroup bound (host runner)"),
                 figures={"modules": len(target.kernels.modules), "jobs": budget.jobs, "memory": budget.memory}))
    result = warm(target, runner, cache, budget, signer, report)
    if signer is None:
        report(Event(Phase.PREWARM, f"{result.manifest} is NOT signed; pass --key or set SPARKIMG_KEY",
                     kind=Kind.WARNING))
    return result


def prewarm_verify(request: PrewarmRequest, key: Path | None, *, quick: bool = False,
                   archs: Sequence[str] = ()) -> CacheReport:
    """Check a cache against its signed manifest and the image (``quick``: signature and sizes)."""
    from sparkimg.prewarm.runner import HostRunner, compile_path
    from sparkimg.prewarm.verify import Expect, verify
    from sparkimg.signing.keys import load_public
    from sparkimg.spec import Arch

    cache = _cache_of(request)
    if key is None:
        raise UsageError("--verify needs --key PUB, the trusted public key", hint="the .pub of the signing key")
    target = _prewarm_setup(request).target
    host = request.runner == "host"
    # In an image, the image ID stands for its FlashInfer; a host Python is asked.
    flashinfer = HostRunner(request.python or sys.executable).flashinfer_version() if host and not quick else None
    expect = Expect(tuple(Arch(a) for a in archs) if archs else target.archs, target.image_id, flashinfer,
                    compile_path(request.runner, cache))
    return verify(cache, load_public(key), expect, quick=quick)


# -- nightly ---------------------------------------------------------------------------------


def nightly(spec_path: Path, options: NightOptions, *, store: Path | None = None,
            report: Reporter = silent) -> Night:
    """One night: re-resolve what moves into a candidate lock; unless nothing moved, build it in
    bounds, check, sign, push, and only then promote it. A failed night keeps the lock and image in
    service (``Night.exit_code`` 1)."""
    from sparkimg.nightly.run import Pipeline, run

    the_store = _store(store)

    def build_from(lock: Path, night: NightOptions, tell: Reporter) -> Built:
        return build(spec_path, BuildOptions(night.overrides, night.key, check=night.check, lock=lock),
                     store=the_store.root, report=tell)

    return run(spec_path, options, Pipeline(load, build_from, lambda: engine(the_store)), store=the_store,
               report=report)


def _state(spec_path: Path, state: Path | None) -> NightState:
    from sparkimg.nightly.state import State, default_folder

    return State(state or default_folder(load(spec_path).path))


def history(spec_path: Path, *, state: Path | None = None) -> History:
    """The nights kept for a spec, oldest first, and which one is in service."""
    from sparkimg.nightly.history import history as nights

    return nights(_state(spec_path, state))


def promote(spec_path: Path, entry: str, *, state: Path | None = None) -> NightEntry:
    """Mark a built night known-good (after the operator's own qualification)."""
    from sparkimg.nightly.history import promote as mark

    return mark(_state(spec_path, state), entry)


def rollback(spec_path: Path, entry: str, *, state: Path | None = None, store: Path | None = None) -> Rolled:
    """Put a known-good night back in service: its lock, and the moving tag in the engine and registry."""
    from sparkimg.nightly.history import rollback as back

    spec = load(spec_path)
    return back(spec, _state(spec_path, state), entry, engine(_store(store)))


# -- doctor ----------------------------------------------------------------------------------


def doctor(*, store: Path | None = None) -> list[dict[str, Any]]:
    """What this machine can do: engine, cgroups, memory, nvcc, GPU, store (and what gc would reclaim)."""
    from sparkimg.doctor.checks import diagnose

    return diagnose(store)


def gc(*, store: Path | None = None, keep: Sequence[Path] = (), keep_storage: int | None = None,
       dry_run: bool = False) -> Collection:
    """Remove from the store what no root reaches (``store.gc``): blobs, layer and image records,
    compressed caches, dead work folders; ``keep_storage`` removes only the least recently used
    of it, until the blobs left fit; ``dry_run`` removes nothing and says what it would."""
    from sparkimg.store.gc import collect

    for path in keep:
        if not path.exists():
            raise UsageError(f"--keep-root {path}: no such file or folder",
                             hint="name a receipt, a lock file or a folder of them")
    return collect(_store(store), keep=keep, keep_storage=keep_storage, dry_run=dry_run)


@dataclass(frozen=True)
class Cleaned:
    containers: list[str]
    folders: int


def clean(*, store: Path | None = None) -> Cleaned:
    """Remove what runs that died (kill -9) left: their containers, found by the owner label whose
    process is gone, and their leased work folders in the store (``Store`` sweeps those on open)."""
    from sparkimg.engine.connect import connect as connect_engine

    the_store = _store(store)
    return Cleaned(connect_engine().reap_orphans(), the_store.swept + the_store.sweep())
