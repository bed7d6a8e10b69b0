"""``sparkimg build``, told top-down in one place: under a lease, the build stage (``image``:
fetch, bounded compiles, audit, assembly, load), then what follows it: ``--check`` (``image.check``),
``--prewarm`` (``prewarm.warm``), the SBOM (``sbom.attest``), the receipt (``receipts.emit``) and
the no-op stamp (``image.stamp``). Each step is a stage's; this module only orders them and
gathers what they made into one frozen ``Built``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sparkimg._internal import emulation, signals
from sparkimg.compile.bounds import Overrides
from sparkimg.compile.cache import folder_names
from sparkimg.errors import SparkimgError
from sparkimg.events import Collected, Event, Kind, Phase, Reporter, Steps, silent
from sparkimg.formats.results import result_schema
from sparkimg.formats.sbom import known
from sparkimg.formats.sbom_formats import SPDX
from sparkimg.formats.steps import Step
from sparkimg.image import stamp
from sparkimg.image.build import BuildResult, described
from sparkimg.image.build import build as build_image
from sparkimg.image.check import CheckReport, check_built
from sparkimg.lock.resolve import Lock, load_candidate, load_lock
from sparkimg.pipeline.context import engine_of, spec_of
from sparkimg.plan.keys import Keyed, layer_keys
from sparkimg.prewarm.warm import Result as PrewarmResult
from sparkimg.prewarm.warm import prewarm_built
from sparkimg.receipts.emit import RECORDS, Emitted, default_path, emit, has_statement
from sparkimg.sbom.attest import made as made_sbom
from sparkimg.sbom.attest import sbom_path
from sparkimg.signing.keys import signing_key
from sparkimg.spec import Spec
from sparkimg.store.content import Store
from sparkimg.store.roots import lease, remember_caches, remember_root


@dataclass(frozen=True)
class BuildOptions:
    """What ``sparkimg build`` takes besides the spec."""

    overrides: Overrides | None = None
    key: Path | None = None
    receipt: Path | None = None
    record_host: bool = False
    prewarm: Path | None = None
    check: bool = False
    recheck: bool = False  # with ``check``: rebuild also the image layers an earlier check showed identical
    # Build from this lock file instead of SPEC.lock.json (the nightly's candidate), leaving the
    # spec's own lock untouched; no no-op stamp is kept for such a build.
    lock: Path | None = None
    sbom_format: str = SPDX  # the format of the SBOM signed beside the receipt (``formats.sbom_formats.FORMATS``)

    def __post_init__(self) -> None:
        known(self.sbom_format)  # refused before anything is built


@dataclass(frozen=True)
class Built:
    """One build, whole: what the build stage made, and what followed it."""

    result: BuildResult
    receipt: Emitted | None  # None only after ``--check``, whose verdict a receipt it could not write never hides
    prewarm: PrewarmResult | None = None
    check: CheckReport | None = None
    receipt_error: str | None = None  # why ``receipt`` is None
    after: tuple[Step, ...] = ()  # check, prewarm, SBOM and signing: what each took

    @property
    def steps(self) -> tuple[Step, ...]:
        """Every step of the build, in the order they ran, each with its time."""
        return (*self.result.steps, *self.after)

    def to_json(self) -> dict[str, Any]:
        out = {"schema": result_schema("build"), **self.result.to_json(),
               "receipt": str(self.receipt.path) if self.receipt else None,
               "sbom": str(sbom_path(self.receipt.path)) if self.receipt else None,
               "signed": bool(self.receipt and self.receipt.signed),
               "prewarm": self.prewarm.to_json() if self.prewarm else None,
               "steps": [step.to_json() for step in self.steps]}
        if self.receipt_error is not None:
            out["receipt_error"] = self.receipt_error
        if self.check is not None:
            out["check"] = self.check.to_json()
        return out


def build(spec_path: Path, options: BuildOptions, store: Store, report: Reporter = silent) -> Built:
    """Fetch, compile in bounds, audit, assemble; then check, prewarm (when asked), the SBOM and
    the receipt; the no-op stamp last."""
    started_ns = time.time_ns()
    said = Collected()  # what this build reports, kept for the no-op stamp

    def tell(event: Event) -> None:
        said(event)
        report(event)

    spec = spec_of(spec_path, tell, store)
    lock = load_lock(spec) if options.lock is None else load_candidate(spec, options.lock)
    emulation.require(lock.platform)  # before anything runs: a foreign base's first program would fail
    keyed = layer_keys(spec, lock)
    keys = [layer.key for layer in keyed]
    # The lease keeps gc off what this build reads and writes; the root, once it is built, after it.
    with lease(store, lock=lock.path, keys=keys):
        built = _under_lease(spec, lock, keyed, store, options, tell, said.events, started_ns)
        if options.lock is None:
            remember_root(store, spec.path, lock=lock.path, receipts=spec.root / "receipts", keys=keys,
                          compiler_caches=folder_names(spec, lock))
        else:  # a night's candidate: its caches are the spec's too
            remember_caches(store, spec.path, folder_names(spec, lock))
    return built


def _under_lease(spec: Spec, lock: Lock, keyed: tuple[Keyed, ...], store: Store, options: BuildOptions,
                 tell: Reporter, said: list[Event], started_ns: int) -> Built:
    overrides = options.overrides or Overrides()
    key = signing_key(options.key)
    engine = engine_of(store)
    result = build_image(spec, lock, store, engine, overrides, report=tell, keyed=keyed)
    steps = Steps()
    if not result.built and not has_statement(result, store):
        result = described(result, store, engine, tell)  # the receipt is written again: in full
    checked = warmed = None
    if options.check:
        with steps.timed("check"):
            checked = check_built(result, store, engine, overrides, tell, recheck=options.recheck)
    if options.prewarm is not None:
        with steps.timed("prewarm"):
            warmed = prewarm_built(spec, result, engine, options.prewarm, overrides, key, tell, store.root)
    receipt_file = options.receipt or default_path(result)
    signals.check()  # a stop asked for, whose raise a finalizer swallowed, never gets a signed receipt
    try:
        with steps.timed("sbom"):
            sbom = made_sbom(result, store, key, receipt_file, tell, options.sbom_format)
        with steps.timed("sign"):
            emitted = emit(result, store, key, path=receipt_file, record_host=options.record_host,
                           prewarm=warmed[1] if warmed else None, sbom=sbom,
                           check=checked.to_receipt() if checked is not None else None)
    except SparkimgError as exc:
        if checked is None:
            raise
        # ``--check`` answers whether two builds agree; a receipt it could not update is a warning beside it.
        tell(Event(Phase.RECEIPT, f"receipt not written: {exc}", kind=Kind.WARNING))
        return Built(result, None, warmed[0] if warmed else None, checked, receipt_error=str(exc),
                     after=tuple(steps.done))
    tell(_receipt_said(emitted, unchanged=not emitted.written))
    built = Built(result, emitted, warmed[0] if warmed else None, checked, after=tuple(steps.done))
    where = stamp.location(store.root, spec.path)
    if options.prewarm is not None or options.check or options.lock is not None:
        stamp.forget(where)  # only a build of the spec's own lock is stamped, and only a plain one
        return built
    # The stamp holds what the next build, a no-op, says: this one's words when it was a no-op;
    # after a build that built, loaded the store's image again or wrote its receipt, the no-op's
    # (nothing built, the receipt unchanged), so the first no-op after it is answered at once too.
    noop = built if not (emitted.written or result.built or result.loaded) else Built(
        replace(result, plan=result.plan.all_cached(), built=(), loaded=False, steps=()), emitted,
        after=built.after)
    noop_said = said if noop is built else [
        *(e for e in said if e.phase is Phase.SPEC), _receipt_said(emitted, unchanged=True)]
    stamp.keep_noop(where, spec, lock, store, engine, result, receipt_file=emitted.path,
                    statement_file=store.record_path(RECORDS, result.plan.image.key),
                    sbom_file=sbom_path(emitted.path),
                    output=noop.to_json(), said=noop_said, started_ns=started_ns, key=options.key,
                    receipt=options.receipt, record_host=options.record_host, sbom_format=options.sbom_format)
    return built


def _receipt_said(emitted: Emitted, *, unchanged: bool) -> Event:
    """What a build says of its receipt (a no-op: "unchanged")."""
    if emitted.signed:
        return Event(Phase.RECEIPT, f"receipt {emitted.path} signed by {emitted.keyid and emitted.keyid[:16]}"
                     + (" (unchanged)" if unchanged else ""))
    return Event(Phase.RECEIPT, f"receipt {emitted.path} is NOT signed; pass --key or set SPARKIMG_KEY "
                 "(create one with `sparkimg keygen`)", kind=Kind.WARNING)
