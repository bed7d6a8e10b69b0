"""``sparkimg fetch``: every locked input into the store, the base pulled by digest, and the
base's layers read for the SBOM (once per layer; ``sbom.layers``), so that the build needs no
network."""

from __future__ import annotations

from pathlib import Path

from sparkimg.events import Reporter, silent
from sparkimg.fetch.inputs import Fetched, base_image, fetch
from sparkimg.lock.resolve import load_checked
from sparkimg.pipeline.context import engine_of, spec_of
from sparkimg.sbom.layers import readings
from sparkimg.store.content import Store
from sparkimg.store.roots import remember_root


def fetched(spec_path: Path, store: Store, report: Reporter = silent) -> Fetched:
    spec = spec_of(spec_path, report)
    lock = load_checked(spec, store)
    found = fetch(spec, lock, store, engine_of(store), report=report)
    base = base_image(lock, store, report=report)
    readings([d.digest for d in base.layers], store, base=lock.base, base_sizes={d.digest: d.size for d in base.layers},
             report=report)
    # Fetched now, built later (offline): the spec's root names its lock, so gc keeps what the
    # lock pins until the next lock, built or not.
    remember_root(store, spec.path, lock=lock.path, receipts=spec.root / "receipts", keys=())
    return found
