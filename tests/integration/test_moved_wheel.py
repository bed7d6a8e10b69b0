"""A moved wheel sends the engine one layer, on every load path (issue 36): the real image's
commonest night is a new vLLM wheel on top of unchanged torch and CUDA wheels, and the engine
holds the previous image. Three small PyPI wheels (on a wheel of the run's own) stand in for the
34 of layers/vllm-env.yaml.

Before issue 36 a new layer's files were dated by the lock's epoch, which a fresh lock of a spec
with no git source takes from the clock: the same pins then gave other layer bytes, and the
engine was sent every layer again (the issue measured 31 of 32 at real size).
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sparkimg.engine.protocol import Engine
from sparkimg.events import Collected, Phase
from tests.formats import spec_header

from .helpers import own_podman_storage

# A wheel of this run's own (a compile layer at the bottom): every layer's chain above it is new to
# the engine, however many earlier runs loaded the same PyPI wheels, so "sent" counts are exact.
OWN = ("python3 -c \"import sys, zipfile; z = zipfile.ZipFile('/out/own-0-py3-none-any.whl', 'w'); "
       "[z.writestr(n, d) for n, d in [('own.py', sys.argv[1]), ('own-0.dist-info/METADATA', 'Metadata-Version: 2.1"
       "\\nName: own\\nVersion: 0\\n'), ('own-0.dist-info/WHEEL', 'Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\n"
       "Tag: py3-none-any\\n'), ('own-0.dist-info/RECORD', '')]]\" {name}")
SPEC = spec_header("{name}", base="{base}", platform="native", image="sparkimg-test/{name}") + """\
sources:
  own:
    path: own
  six:
    pypi: six
    version: "1.16.0"
  idna:
    pypi: idna
    version: "3.7"
  top:
    pypi: packaging
    version: "{top}"
layers:
  - name: own
    kind: compile
    source: own
    command: {command}
    memory: 1g
    job_memory: 256m
    pids: 256
  - name: six
    kind: wheel
    source: six
  - name: idna
    kind: wheel
    source: idna
  - name: top
    kind: wheel
    source: top
"""


def _sent(events: Collected) -> list[int]:
    """The layers each load of the build sent the engine (one load per build; not the feeding's)."""
    return [int(e.figures["sent"] or 0) for e in events.of(Phase.ASSEMBLE) if "sent" in e.figures
            and "fed" not in e.figures]


@contextmanager
def _path(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The load path under test: docker's pull from the loopback registry, ``docker load`` of an
    archive (the registry withholds every blob, as a daemon that cannot reach it fails), or podman."""
    if kind == "podman":
        with own_podman_storage(tmp_path, monkeypatch):
            monkeypatch.setenv("SPARKIMG_DOCKER", "podman")
            yield
        return
    if kind == "archive":
        from sparkimg.image import handoff

        real = handoff.registry

        @contextmanager
        def withholding(manifest: bytes, manifest_digest: str, media_type: str, config_digest: str,
                        blobs: dict[str, Path]) -> Any:
            with real(manifest, manifest_digest, media_type, config_digest, {}) as got:
                yield got
        monkeypatch.setattr(handoff, "registry", withholding)
    yield


@pytest.mark.parametrize("kind", ["handoff", "archive", "podman"])
def test_a_moved_wheel_sends_one_layer_and_a_fresh_lock_of_the_same_pins_sends_none(
    kind: str, tmp_path: Path, engine: Engine, demo_base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkimg import api

    name = f"moved-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "spec.yaml"
    (tmp_path / "own").mkdir()
    store = tmp_path / "store"

    def text(top: str) -> str:
        return SPEC.format(name=name, base=demo_base, top=top, command=json.dumps(OWN.format(name=name)))
    with _path(kind, tmp_path, monkeypatch):
        spec.write_text(text("24.1"))
        api.lock(spec, store=store)
        events = Collected()
        first = api.build(spec, store=store, report=events).result
        assert _sent(events) == [4]

        # The top wheel moves, as vLLM's does on most nights: the lock is made again from the old one.
        spec.write_text(text("24.0"))
        api.lock(spec, store=store)
        events = Collected()
        moved = api.build(spec, store=store, report=events).result
        assert _sent(events) == [1], events.events
        assert moved.oci is not None and first.oci is not None
        assert moved.oci.layers[:3] == first.oci.layers[:3] and moved.oci.layers[3] != first.oci.layers[3]

        # The same pins locked again from nothing, a second later (another node, a deleted lock): the
        # lock's epoch moves with the clock, and no layer's bytes do; only the config is new.
        lock = spec.with_name(spec.name + ".lock.json")
        epoch = json.loads(lock.read_text())["source_date_epoch"]
        lock.unlink()
        time.sleep(max(0.0, epoch + 1.1 - time.time()))
        api.lock(spec, store=store)
        assert json.loads(lock.read_text())["source_date_epoch"] > epoch
        events = Collected()
        relocked = api.build(spec, store=store, report=events).result
        assert relocked.oci is not None and relocked.oci.config_digest != moved.oci.config_digest
        assert relocked.oci.layers == moved.oci.layers
        assert _sent(events) == [0], events.events
    if kind != "podman":  # podman's own storage is removed whole
        for result in (first, moved, relocked):
            engine.remove_image(result.image_ref)


def test_the_engine_is_fed_the_first_layers_while_the_others_are_written(
    tmp_path: Path, engine: Engine, demo_base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``image.feed`` (issue 36): each run of written layers from the bottom goes to the daemon as a
    partial image while the others are written; the image's own load then sends no layer, and no
    name of a partial image is left in the engine."""
    from sparkimg import api
    from sparkimg.events import Kind
    from sparkimg.image import feed

    monkeypatch.setattr(feed, "FEED_BYTES", 0)  # the small wheels stand in for gigabytes
    name = f"fed-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "spec.yaml"
    (tmp_path / "own").mkdir()
    spec.write_text(SPEC.format(name=name, base=demo_base, top="24.1", command=json.dumps(OWN.format(name=name))))
    store = tmp_path / "store"
    api.lock(spec, store=store)
    events = Collected()
    built = api.build(spec, store=store, report=events).result
    fed = [e for e in events.of(Phase.ASSEMBLE, Kind.LOG) if "fed the engine" in e.message]
    assert fed and fed[-1].figures["fed"] == 4 and sum(int(e.figures["sent"] or 0) for e in fed) == 4, events.events
    assert _sent(events) == [0]  # the image's own load: the config alone
    info = engine.inspect(built.image_ref)
    assert built.oci is not None and info is not None and info.id == built.oci.config_digest
    assert [step.name for step in built.steps if step.layer is None] == ["fetch", "preflight", "assemble", "feed",
                                                                        "load"]
    listed = subprocess.run([engine.client, "images", "--digests", "--format", "{{.Repository}}"], capture_output=True,
                            text=True, check=True).stdout
    assert "sparkimg-handoff" not in listed
    engine.remove_image(built.image_ref)


def test_a_check_after_a_moved_wheel_rebuilds_that_layer_and_says_which_it_did_not(
    tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``build --check`` in proportion to what changed (issue 36): an image layer whose key an
    earlier check rebuilt from scratch to the very bytes is not written a third time, and the
    verdict and the receipt say which; a record that does not match, or ``--recheck``, rebuilds it."""
    from .helpers import cli

    name = f"checked-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "spec.yaml"
    (tmp_path / "own").mkdir()

    def text(top: str) -> str:
        return SPEC.format(name=name, base=demo_base, top=top, command=json.dumps(OWN.format(name=name)))
    store = tmp_path / "store"
    spec.write_text(text("24.1"))
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    code, first, err = cli(capsys, store, "build", str(spec), "--check", "--json", "--quiet")
    assert code == 0 and first["check"]["identical"] and first["check"]["checked_before"] == [], err

    spec.write_text(text("24.0"))
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    code, moved, err = cli(capsys, store, "build", str(spec), "--check", "--json", "--quiet")
    assert code == 0 and moved["check"]["identical"], err
    assert moved["check"]["checked_before"] == ["own", "six", "idna"]  # the moved top layer alone is rebuilt
    layers = [c["what"] for c in moved["check"]["compared"] if c["what"].startswith("layer ")]
    assert layers == ["layer top: diff_id", "layer top: blob"]
    statement = base64.b64decode(json.loads(Path(moved["receipt"]).read_text())["payload"]).decode()
    assert '"checked_before":["own","six","idna"]' in statement.replace(" ", "")  # the receipt says so too

    # A record that names other bytes for a key is not trusted: that layer is rebuilt.
    records = store / "records" / "checked-layers"
    six = moved["oci"]["diff_ids"][-3]
    damaged = [p for p in records.rglob("*") if p.is_file() and six in p.read_text()]
    assert len(damaged) == 1
    damaged[0].write_text(damaged[0].read_text().replace(six, "sha256:" + "0" * 64))
    code, again, err = cli(capsys, store, "build", str(spec), "--check", "--json", "--quiet")
    assert code == 0 and again["check"]["checked_before"] == ["own", "idna", "top"], err

    code, every, err = cli(capsys, store, "build", str(spec), "--check", "--recheck", "--json", "--quiet")
    assert code == 0 and every["check"]["identical"] and every["check"]["checked_before"] == [], err
    assert cli(capsys, store, "build", str(spec), "--recheck")[0] == 2  # --recheck goes with --check
    engine.remove_image(every["image"]["reference"])
