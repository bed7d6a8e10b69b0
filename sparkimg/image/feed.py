"""The engine applies the image's first layers while sparkimg still writes the others.

Measured at real size (bench/realsize.py: 34 wheel layers, 6.1 GB), the daemon's pull of the
finished image took 79 s and writing the layers 36 s, one after the other. The daemon applies
layers one at a time on one core; sparkimg writes them on the others. So, for a daemon that
pulls from the loopback registry and skips every layer it holds by chain (``Engine.loads_by_chain``
and ``pulls_handoff``: Docker), each time a run of layers from the bottom is written, it is handed
over at once as a partial image (the base and those layers, a config that names them, nothing
else): the daemon applies them while the next are written, and the finished image's own handoff
then sends the config alone. The partial images are named only by their digest under a random
repository; those names are dropped once the image is in the engine (the layers stay: the image
holds them). Feeding is an optimisation only: when a partial pull fails, feeding stops and the
image's own load sends what the engine lacks, as it always did.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence

from sparkimg.engine.protocol import Engine
from sparkimg.errors import EngineError
from sparkimg.events import Event, Kind, Phase, Reporter
from sparkimg.formats import oci
from sparkimg.formats.canonical import hex_of, sha256_prefixed
from sparkimg.store.content import Store

FEED_BYTES = 256 << 20  # an image with fewer new bytes than this is loaded whole: feeding would not pay


def feeds(engine: Engine) -> bool:
    """Whether partial images speed this engine's load (a daemon that pulls from loopback and keeps
    layers by chain)."""
    return engine.pulls_handoff and engine.loads_by_chain


class Feeder:
    """Takes the layers as they are written (``add``, from any thread) and hands each new run of
    them from the bottom to the engine, in a thread of its own; ``finish`` waits for the last
    handoff, ``close`` drops the partial images' names."""

    def __init__(self, engine: Engine, store: Store, base: oci.BaseImage, epoch: int, report: Reporter) -> None:
        self.engine, self.store, self.base, self.epoch, self.report = engine, store, base, epoch, report
        self.written: dict[int, oci.Layer] = {}
        self.handed = 0  # layers from the bottom the engine holds
        self.names: list[str] = []  # the partial images' registry names, dropped at close
        self.failed = False
        self.done = False
        self.work = store.temp_dir("feed.")  # the partial configs, served as blobs
        self.changed = threading.Condition()
        self.worker = threading.Thread(target=self._run, name="feed", daemon=True)
        self.worker.start()

    def add(self, number: int, layer: oci.Layer) -> None:
        with self.changed:
            self.written[number] = layer
            self.changed.notify()

    def finish(self) -> None:
        """Wait until the engine holds every layer handed so far (or feeding gave up)."""
        with self.changed:
            self.done = True
            self.changed.notify()
        self.worker.join()

    def close(self) -> None:
        """Drop the partial images' names (after the image itself is in the engine)."""
        import shutil

        self.finish()
        for name in self.names:
            with contextlib.suppress(EngineError):
                self.engine.untag(name)
        shutil.rmtree(self.work, ignore_errors=True)

    def _ready(self) -> int:
        """How many layers from the bottom are written."""
        ready = self.handed
        while ready in self.written:
            ready += 1
        return ready

    def _run(self) -> None:
        while True:
            with self.changed:
                while not self.failed and self._ready() == self.handed and not self.done:
                    self.changed.wait()
                ready = self._ready()
                if self.failed or ready == self.handed:
                    return  # done, and nothing more to hand over
                layers = [self.written[i] for i in range(ready)]
            try:
                self._hand(layers)
                self.handed = ready
            except (EngineError, OSError) as exc:
                self.failed = True
                why = exc.message if isinstance(exc, EngineError) else str(exc)
                self.report(Event(Phase.ASSEMBLE, f"feeding the engine stopped ({why}); the image is loaded whole",
                                  "image", Kind.LOG))
                return

    def _hand(self, layers: Sequence[oci.Layer]) -> None:
        """The base and ``layers`` as one partial image, pulled by the engine from loopback."""
        from sparkimg.image import handoff

        config = oci.config(self.base, env={}, labels={"dev.sparkimg.partial": "true"}, epoch=self.epoch,
                            layers=layers)
        manifest = oci.manifest(self.base, config, layers)
        config_digest = sha256_prefixed(config)
        config_file = self.work / hex_of(config_digest)
        config_file.write_bytes(config)
        try:
            blobs = {config_digest: config_file,
                     **{layer.descriptor.digest: self.store.blob(hex_of(layer.descriptor.digest)) for layer in layers}}
            with handoff.registry(manifest, sha256_prefixed(manifest), self.base.media_type, config_digest,
                                  blobs) as (reference, served):
                handoff.pull(self.engine, reference, served)
            self.names.append(reference)
            self.report(Event(Phase.ASSEMBLE, f"fed the engine the first {len(layers)} layer(s) "
                              f"({served.layers_sent} new)", "image", Kind.LOG,
                              {"fed": len(layers), "sent": served.layers_sent}))
        finally:
            config_file.unlink(missing_ok=True)
