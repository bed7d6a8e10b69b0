"""``push`` and ``save`` of a spec's built image: the image out of the store, with its receipt
and the SBOM beside it (``distribution.attached``), under a dated tag that never moves."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from sparkimg._internal.net.registry import RegistryClient
from sparkimg.distribution.archive import Saved, save, to_save
from sparkimg.distribution.compression import Compressor
from sparkimg.distribution.push import Pushed, PushedIndex, push_built, push_index
from sparkimg.errors import UsageError
from sparkimg.events import Reporter, silent
from sparkimg.pipeline.context import Stored, stored_image
from sparkimg.plan.keys import image_ref
from sparkimg.receipts.emit import receipt_path
from sparkimg.store.content import Store


def pushed(spec_path: Path, store: Store, target: str, tags: Sequence[str], *, receipt: Path | None,
           compression: Compressor | None, threads: int, client: RegistryClient | None = None,
           report: Reporter = silent) -> Pushed:
    """The spec's image to ``target`` (REGISTRY/REPO), tagged ``YYYYMMDD-KEY12`` (the date of the
    lock's source epoch) and ``tags``; its receipt (``receipt``, else where ``build`` wrote it,
    which may be absent) goes beside it."""
    return _pushed(stored_image(spec_path, store, report), target, tags, receipt=receipt, compression=compression,
                   threads=threads, client=client, report=report)


def _pushed(stored: Stored, target: str, tags: Sequence[str], *, receipt: Path | None,
            compression: Compressor | None, threads: int, client: RegistryClient | None,
            report: Reporter) -> Pushed:
    spec, the_store, lock, key, record = stored
    dated = f"{datetime.fromtimestamp(lock.source_date_epoch, UTC):%Y%m%d}-{key[:12]}"
    return push_built(record, lock, the_store, target, [dated, *tags], receipt or receipt_path(spec, key),
                      image_ref(spec, key), receipt_required=receipt is not None, compression=compression,
                      threads=threads, client=client, report=report)


def pushed_platforms(spec_paths: Sequence[Path], store: Store, target: str, tags: Sequence[str], *,
                     receipt: Path | None, compression: Compressor | None, threads: int,
                     client: RegistryClient | None = None, report: Reporter = silent) -> PushedIndex:
    """One image per spec (each built for its own platform) to ``target`` with its own receipt and
    SBOM and its dated tag, then an image index of all under ``tags`` (``receipt``: the first
    spec's, if not where ``build`` wrote it). Two specs for one platform are refused before
    anything is sent."""
    images = _one_per_platform(spec_paths, store, "push", report)
    done = [(stored.lock.platform, _pushed(stored, target, (), receipt=receipt if number == 0 else None,
                                           compression=compression, threads=threads, client=client,
                                           report=report))
            for number, stored in enumerate(images)]
    return push_index(done, target, tags, client=client, report=report)


def saved(spec_paths: Sequence[Path], store: Store, output: Path, *, receipt: Path | None, tag: str | None,
          without_base: bool, report: Reporter = silent) -> Saved:
    """The specs' images (the first, then other platforms' with ``save --with``), each with its
    receipt (the first's ``receipt``, else where ``build`` wrote each) to ``output``. Two specs for
    one platform are refused before anything is written."""
    images = _one_per_platform(spec_paths, store, "save", report)
    the_store = images[0].store
    return save(the_store, [to_save(record, the_store, (receipt if number == 0 else None) or receipt_path(spec, key),
                                    image_ref(spec, key), tag=tag if number == 0 else None, report=report)
                            for number, (spec, _, _, key, record) in enumerate(images)], output,
                without_base=without_base, report=report)


def _one_per_platform(spec_paths: Sequence[Path], store: Store, command: str, report: Reporter) -> list[Stored]:
    """Each spec's stored image; two specs for one platform are refused before anything is sent
    or written (an index or an archive holds one image per platform)."""
    images = [stored_image(spec_path, store, report) for spec_path in spec_paths]
    platforms = [stored.lock.platform for stored in images]
    twice = sorted({p for p in platforms if platforms.count(p) > 1})
    if twice:
        raise UsageError(f"{command}: two of the specs are for {twice[0]}; one image per platform",
                         hint="give one spec per platform (the spec and each --with)")
    return images
