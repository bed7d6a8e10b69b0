"""The pipeline API: one function per user task, each returning a typed result.

The CLI parses arguments, calls one of these and renders what it returns; tests call them
directly. Each function composes stages in a few lines: a walk that spans several stages (the
build: compile, check, prewarm, SBOM, receipt) is told in ``sparkimg.pipeline``, never here.
Stages report progress as typed events to ``report``. Stage modules are imported by the task
that needs them, so that ``sparkimg --version`` and a no-op build do not pay for the others
(the engine's containers, signing, HTTP).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sparkimg.errors import UsageError
from sparkimg.events import Reporter, silent
from sparkimg.formats.sbom_formats import SPDX

if TYPE_CHECKING:
    from sparkimg.compile.bounds import Overrides
    from sparkimg.distribution.archive import Loaded, Saved
    from sparkimg.distribution.pull import Pulled
    from sparkimg.distribution.push import Pushed, PushedIndex
    from sparkimg.engine.protocol import Engine
    from sparkimg.fetch.inputs import Fetched
    from sparkimg.formats.nightly import Entry as NightEntry
    from sparkimg.formats.statement import RunMetadata
    from sparkimg.image.stamp import Stamp as NoopAnswer
    from sparkimg.lock.resolve import Lock
    from sparkimg.nightly.history import History, Rolled
    from sparkimg.nightly.run import Night
    from sparkimg.nightly.run import Options as NightOptions
    from sparkimg.nightly.state import State as NightState
    from sparkimg.patches.sums import SumProblem
    from sparkimg.pipeline.build import BuildOptions, Built
    from sparkimg.pipeline.plan import Planned
    from sparkimg.pipeline.sbom import ShownSbom
    from sparkimg.prewarm.request import PrewarmRequest
    from sparkimg.prewarm.targets import Target
    from sparkimg.prewarm.verify import Report as CacheReport
    from sparkimg.prewarm.warm import Events as PrewarmEvents
    from sparkimg.prewarm.warm import Result as PrewarmResult
    from sparkimg.receipts.node import NodeRequest
    from sparkimg.receipts.runargs import RunArgs
    from sparkimg.receipts.show import Shown
    from sparkimg.receipts.verify import Report as ReceiptReport
    from sparkimg.signing.keys import PrivateKey
    from sparkimg.source.preflight import Verdict
    from sparkimg.spec import Spec
    from sparkimg.store.content import Store
    from sparkimg.store.fsck import StoreVerified
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
    "ReceiptReport",
    "ReceiptRequest",
    "RunMetadata",
    "Shown",
    "ShownSbom",
    "build",
    "check",
    "clean",
    "dockerfile",
    "doctor",
    "fetch",
    "gc",
    "history",
    "keygen",
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
    "verify_node",
    "verify_receipt",
]

# The option and report types a caller of this API builds or reads (the CLI among them), named
# here so that no caller reaches into a stage for them; imported on first use, so that importing
# the API stays cheap for ``--version`` and the no-op build.
_LAZY = {
    "Planned": ("sparkimg.pipeline.plan", "Planned"),
    "ShownSbom": ("sparkimg.pipeline.sbom", "ShownSbom"),
    "BuildOptions": ("sparkimg.pipeline.build", "BuildOptions"),
    "Built": ("sparkimg.pipeline.build", "Built"),
    "NodeRequest": ("sparkimg.receipts.node", "NodeRequest"),
    "PrewarmRequest": ("sparkimg.prewarm.request", "PrewarmRequest"),
    "Overrides": ("sparkimg.compile.bounds", "Overrides"),
    "RunMetadata": ("sparkimg.formats.statement", "RunMetadata"),
    "NightOptions": ("sparkimg.nightly.run", "Options"),
    "ReceiptReport": ("sparkimg.receipts.verify", "Report"),
    "NoopAnswer": ("sparkimg.image.stamp", "Stamp"),
    "Shown": ("sparkimg.receipts.show", "Shown"),
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


def _spec(spec_path: Path, report: Reporter = silent, store: Store | None = None) -> Spec:
    from sparkimg.pipeline.context import spec_of

    return spec_of(spec_path, report, store)


def _engine(store: Store) -> Engine:
    from sparkimg.pipeline.context import engine_of

    return engine_of(store)


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

    spec = _spec(spec_path, report)
    if not lock_mod.lock_path(spec).exists():
        lock_mod.check_toolkit(spec)  # with a lock, its check refuses the toolkit the same way
        return Checked(spec, "absent")
    the_store = _store(store)
    lock = lock_mod.load_checked(spec, the_store)
    return Checked(spec, "current", tuple(preflight.run(spec, lock, the_store, report=report)))


def lock(spec_path: Path, *, store: Path | None = None, update: Sequence[str] = (), plain_http: bool = False,
         ca_file: Path | None = None, report: Reporter = silent) -> Lock:
    """Resolve every mutable reference and write ``SPEC.lock.json``; the base's registry reached
    over plain HTTP, or verified with ``ca_file``, when asked (``_internal.net.reach``)."""
    from sparkimg.lock import resolve as lock_mod

    spec = _spec(spec_path, report)
    previous = lock_mod.load_lock(spec) if lock_mod.lock_path(spec).exists() else None
    client = lock_mod.base_client(spec, previous.base if previous else None, plain_http=plain_http, ca_file=ca_file)
    model = lock_mod.resolve(spec, _store(store), previous=previous, update=update, registry=client,
                             report=report)
    return lock_mod.write(spec, model)


def fetch(spec_path: Path, *, store: Path | None = None, report: Reporter = silent) -> Fetched:
    """Fetch every locked input into the store, pull the base by digest, and read the base's
    layers for the SBOM, so that the build needs no network (``pipeline.fetch``)."""
    from sparkimg.pipeline.fetch import fetched

    return fetched(spec_path, _store(store), report)


def plan(spec_path: Path, *, store: Path | None = None, report: Reporter = silent) -> Planned:
    """Each layer's key, whether it is built, and what changed since the last build. Without an
    engine the image shows as to build (``pipeline.plan``)."""
    from sparkimg.pipeline.plan import planned

    return planned(spec_path, _store(store), report)


def dockerfile(spec_path: Path, *, store: Path | None = None, report: Reporter = silent) -> str:
    """The Dockerfile equivalent of the image sparkimg assembles, for a person to read; the
    compile layers must be built (``pipeline.plan``)."""
    from sparkimg.pipeline.plan import dockerfile_of

    return dockerfile_of(spec_path, _store(store), report)


# -- build -------------------------------------------------------------------------------


def build(spec_path: Path, options: BuildOptions | None = None, *, store: Path | None = None,
          report: Reporter = silent) -> Built:
    """Fetch, compile in bounds, audit, assemble; then check, prewarm (when asked), the SBOM and
    the receipt (``pipeline.build``)."""
    from sparkimg.pipeline.build import BuildOptions, build

    return build(spec_path, options or BuildOptions(), _store(store), report)


def noop_build(spec_path: Path, *, store: Path | None = None, key: Path | None = None,
               receipt: Path | None = None, record_host: bool = False,
               sbom_format: str = SPDX) -> NoopAnswer | None:
    """The answer of a ``build`` that would build nothing, from its stamp (``image.stamp``), without
    loading the spec or the pipeline; None when the build must run, or when the stamp cannot be
    read or checked (``image.stamp.holding``: a stamp only ever saves time)."""
    from sparkimg.image.stamp import holding

    return holding(str(spec_path), store=str(store) if store is not None else None,
                   key=str(key) if key is not None else None, receipt=str(receipt) if receipt is not None else None,
                   record_host=record_host, sbom_format=sbom_format)


def sbom(source: Path | str, *, key: Path | None = None, store: Path | None = None,
         report: Reporter = silent, sbom_format: str | None = None) -> ShownSbom:
    """The SBOM (an SPDX 2.3 or CycloneDX 1.6 document) of a built image from a SPEC (made from the
    store in ``sbom_format``, default SPDX), a RECEIPT or SBOM file, or a REF in a registry (as
    signed; ``sbom_format`` naming another format is refused); checked with ``key`` (``pipeline.sbom``)."""
    from sparkimg.pipeline.sbom import shown
    from sparkimg.signing.keys import load_public

    return shown(source, load_public(key) if key is not None else None, _store(store), report, sbom_format)


# -- push ------------------------------------------------------------------------------


def push(spec_path: Path, target: str, tags: Sequence[str] = (), *, receipt: Path | None = None,
         store: Path | None = None, compression: str = "none", level: int | None = None,
         threads: int | None = None, also: Sequence[Path] = (), plain_http: bool = False,
         ca_file: Path | None = None, report: Reporter = silent) -> Pushed | PushedIndex:
    """Upload the spec's built image, from the store's OCI data, to ``target`` (REGISTRY/REPO),
    tagged with an immutable dated tag (``YYYYMMDD-KEY12``, the date of the lock's source epoch)
    and ``tags``; its receipt (``receipt``, else where ``build`` wrote it) goes beside it. With
    ``compression`` (gzip or zstd, at ``level``) the new layers leave compressed on ``threads``
    threads (default: every core); the bytes do not depend on the thread count. With ``also``
    (other platforms' specs), each image goes with its own receipt and dated tag, and ``tags``
    name an image index of all (``PushedIndex``). ``target``'s registry is reached over plain HTTP
    (``plain_http``), or verified with ``ca_file``, when asked (``_internal.net.reach``)."""
    from sparkimg._internal.net.registry import RegistryClient, reach_for
    from sparkimg.distribution.compression import chosen, default_threads
    from sparkimg.distribution.push import target_of
    from sparkimg.pipeline.ship import pushed, pushed_platforms

    reached = reach_for(target, plain_http=plain_http, ca=ca_file)
    target_of(target, reached)  # bad input fails before anything is read
    client = RegistryClient(reach=reached)
    compressor = chosen(compression, level)
    if threads is not None and threads < 1:
        raise UsageError(f"--threads {threads}: give 1 or more", hint="leave it out to use every core")
    if also:
        return pushed_platforms([spec_path, *also], _store(store), target, tags, receipt=receipt,
                                compression=compressor, threads=threads or default_threads(), client=client,
                                report=report)
    return pushed(spec_path, _store(store), target, tags, receipt=receipt, compression=compressor,
                  threads=threads or default_threads(), client=client, report=report)


def pull(reference: str, key: Path, *, recipe: Path | None = None, receipt_out: Path | None = None,
         store: Path | None = None, platform: str | None = None, plain_http: bool = False,
         ca_file: Path | None = None, report: Reporter = silent) -> Pulled:
    """Verify the receipt attached to ``reference`` with the public ``key``, then pull it by digest;
    from an image index, ``platform``'s image (default: this machine's), with its own receipt.
    ``reference``'s registry is reached over plain HTTP, or verified with ``ca_file``, when asked;
    the engine pulls with its own configuration (insecure-registries, certs.d)."""
    from sparkimg._internal.net.registry import RegistryClient, reach_for
    from sparkimg.distribution.pull import pull as pull_image
    from sparkimg.signing.keys import load_public

    _platform_given(platform)
    client = RegistryClient(reach=reach_for(reference, plain_http=plain_http, ca=ca_file))
    trusted = load_public(key)
    return pull_image(reference, trusted, _engine(_store(store)), recipe=recipe, receipt_out=receipt_out,
                      client=client, platform=platform, report=report)


def _platform_given(platform: str | None) -> None:
    """A ``--platform`` sparkimg builds for, or bad input."""
    from sparkimg.formats.lockfile import PLATFORMS

    if platform is not None and platform not in PLATFORMS:
        raise UsageError(f"--platform {platform}: not a platform sparkimg builds for",
                         hint=f"give one of {', '.join(PLATFORMS)}")


# -- save, load ------------------------------------------------------------------------


def save(source: Path, output: Path, *, without_base: bool = False, receipt: Path | None = None,
         tag: str | None = None, store: Path | None = None, also: Sequence[Path] = (),
         report: Reporter = silent) -> Saved:
    """Write the image a SPEC built (or a RECEIPT names) and its receipt to ``output``: an OCI image
    layout with Docker's ``manifest.json``, which ``docker load``, ``podman load`` and
    ``sparkimg load`` take. ``without_base`` leaves the base's layers out; ``also``: other
    platforms' specs, each image with its own receipt (``sparkimg load --platform`` picks one)."""
    from sparkimg.distribution.archive import save_receipted
    from sparkimg.pipeline.ship import saved

    if source.suffix == ".json":
        if also:
            raise UsageError("save: --with goes with a SPEC, not a receipt", hint="save SPEC --with OTHER_SPEC -o FILE")
        return save_receipted(source, _store(store), output, tag=tag, without_base=without_base, report=report)
    return saved([source, *also], _store(store), output, receipt=receipt, tag=tag, without_base=without_base,
                 report=report)


def load_archive(path: Path, key: Path, *, recipe: Path | None = None, tag: str | None = None,
                 receipt_out: Path | None = None, store: Path | None = None, platform: str | None = None,
                 report: Reporter = silent) -> Loaded:
    """Verify the receipt in the archive at ``path`` with the public ``key``, then load it and tag
    it: the image for ``platform`` (default: this machine's)."""
    from sparkimg.distribution.archive import load_archive as load_file
    from sparkimg.signing.keys import load_public

    _platform_given(platform)
    trusted = load_public(key)
    the_store = _store(store)
    return load_file(path, trusted, _engine(the_store), the_store, recipe=recipe, tag=tag, receipt_out=receipt_out,
                     platform=platform, report=report)


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


def verify_node(request: NodeRequest, *, store: Path | None = None) -> ReceiptReport:
    """``verify-node``: signature, statement, recipe, the image in this node's engine by digest, the
    patch files, and the prewarmed cache (its quick check: signature, image, sizes)."""
    from sparkimg.receipts.node import verify_node as verified

    _platform_given(request.platform)
    return verified(request, _engine(_store(store)))


def show_receipt(receipt: Path, key: Path | None = None) -> Shown:
    """A receipt's statement and dotted fields, and its signature's state when ``key`` is given."""
    from sparkimg.receipts.show import shown
    from sparkimg.signing.keys import load_public

    return shown(receipt, load_public(key) if key else None)


def run_args(receipt: Path, root: Path, key: Path | None = None, cache: Path | None = None,
             platform: str | None = None) -> RunArgs:
    """The ``docker run`` arguments a receipt implies: read-only patch mounts and a warmed cache;
    the receipt must be for ``platform`` (default: this machine's)."""
    from sparkimg.receipts.runargs import run_args as receipt_args
    from sparkimg.signing.keys import load_public

    _platform_given(platform)
    return receipt_args(receipt, root, load_public(key) if key else None, cache, platform)


# -- prewarm ----------------------------------------------------------------------------


def prewarm_list(request: PrewarmRequest, *, report: Reporter = silent) -> tuple[Target, PrewarmEvents]:
    """Resolve the kernel set where it will run; compile nothing."""
    from sparkimg.prewarm.request import listed

    return listed(request, report)


def prewarm(request: PrewarmRequest, key: Path | None = None, *, report: Reporter = silent) -> PrewarmResult:
    """Compile the kernel set into ``request.cache`` and write its (signed) manifest."""
    from sparkimg.prewarm.request import warmed

    return warmed(request, key, report)


def prewarm_verify(request: PrewarmRequest, key: Path | None, *, quick: bool = False,
                   archs: Sequence[str] = ()) -> CacheReport:
    """Check a cache against its signed manifest and the image (``quick``: signature and sizes)."""
    from sparkimg.prewarm.request import verified

    return verified(request, key, quick=quick, archs=archs)


# -- nightly ---------------------------------------------------------------------------------


def nightly(spec_path: Path, options: NightOptions, *, store: Path | None = None,
            report: Reporter = silent) -> Night:
    """One night: re-resolve what moves into a candidate lock; unless nothing moved, build it in
    bounds, check, sign, push, and only then promote it. A failed night keeps the lock and image in
    service (``Night.exit_code`` 1)."""
    from sparkimg.nightly.run import run

    return run(spec_path, options, store=_store(store), report=report)


def _state(spec_path: Path, state: Path | None) -> NightState:
    from sparkimg.nightly.state import State, default_folder

    return State(state or default_folder(_spec(spec_path).path))


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

    return back(_spec(spec_path), _state(spec_path, state), entry, _engine(_store(store)))


# -- doctor ----------------------------------------------------------------------------------


def doctor(*, store: Path | None = None) -> list[dict[str, Any]]:
    """What this machine can do: engine, cgroups, memory, nvcc, GPU, store (and what gc would reclaim)."""
    from sparkimg.doctor.checks import diagnose

    return diagnose(store)


def store_verify(*, store: Path | None = None, repair: bool = False, report: Reporter = silent) -> StoreVerified:
    """Hash every blob of the store against its name (``store.fsck``); ``repair`` removes the
    damaged ones, so the next build fetches or rebuilds them."""
    from sparkimg.store.fsck import verify_store

    return verify_store(_store(store), repair=repair, report=report)


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
