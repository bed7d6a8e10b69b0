"""Each layer of an image read once for the SBOM, and the reading kept in the store by the
layer's digest (records ``sbom-layers``): a base layer is read once, whatever is built on it,
and a rebuild reads only the layers it made.

A layer in the store (every layer sparkimg writes) is read from its blob. A base layer the
store lacks is streamed from the base's registry, read as it arrives, and checked against its
digest before its reading is kept; nothing of it is stored (a serving image's base is several
GB, and the engine holds it already).
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator, Mapping, Sequence

from sparkimg._internal.fs.tars import BoundedTarInfo
from sparkimg.errors import FetchError, ResolveError
from sparkimg.events import Event, Phase, Reporter, silent
from sparkimg.formats.canonical import hex_of
from sparkimg.formats.lockfile import BasePin
from sparkimg.sbom.contents import LayerReading, read_layer, read_layer_file
from sparkimg.store.content import Store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sparkimg._internal.net.registry import RegistryClient

READINGS = "sbom-layers"


class _ChunkFile:
    """A readable file over an iterator of byte chunks (what ``tarfile``'s stream mode reads)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.pending = chunks, b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self.pending) < size:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.pending += chunk
        cut = len(self.pending) if size < 0 else size
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out

    def drain(self) -> None:
        """Read to the end (the digest is checked there)."""
        self.pending = b""
        for _ in self.chunks:
            pass


def readings(digests: Sequence[str], store: Store, *, base: BasePin, base_sizes: Mapping[str, int],
             report: Reporter = silent) -> list[LayerReading]:
    """The readings of the layers ``digests`` (base first): kept ones, else read from the store's
    blob, else (a base layer, listed in ``base_sizes``) streamed from the locked ``base``'s
    registry, reached as the lock says (one client for them all, as ``archive.layers_in_store``)."""
    from sparkimg._internal.net.registry import RegistryClient

    client: RegistryClient | None = None
    found = []
    for digest in digests:
        reading = LayerReading.from_json(store.read_record(READINGS, hex_of(digest)))
        if reading is None:
            if store.has(hex_of(digest)):
                reading = read_layer_file(store.blob(hex_of(digest)))
            elif digest in base_sizes:
                client = client or RegistryClient.for_base(base.repository, base.transport)
                reading = _streamed(client, base.repository, digest, base_sizes[digest], report)
            else:
                raise FetchError(f"layer {digest} of the image is not in the store",
                                 hint="build the spec again: the build writes its layers into the store")
            store.write_record(READINGS, hex_of(digest), reading.to_json())
        found.append(reading)
    return found


def _streamed(client: RegistryClient, repository: str, digest: str, size: int, report: Reporter) -> LayerReading:
    from sparkimg._internal.net.registry import client_stream

    report(Event(Phase.FETCH, f"reading base layer {digest[:19]} ({size} bytes) from {repository} for the SBOM"))
    source = _ChunkFile(client_stream(client, client.ref(repository), digest, size))
    try:
        with tarfile.open(fileobj=source, mode="r|*", tarinfo=BoundedTarInfo) as archive:  # type: ignore[call-overload]
            reading = read_layer(archive)
        source.drain()  # the digest is checked at the end of the stream: no reading of other bytes is kept
    except ResolveError as exc:
        raise FetchError(f"base layer {digest}: {exc.message}", hint=exc.hint) from None
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise FetchError(f"base layer {digest} from {repository}: cannot read it: {exc}",
                         hint="the registry serves a damaged layer; nothing was kept") from None
    return reading
