"""Rot in the store, with the real engine and registry (issue 39): a bit flipped in a layer blob
and a tail cut off the config blob of a built demo. Nothing that leaves the store carries them:
``save`` writes no file, ``push`` moves no tag, loading the image into the engine again fails
naming the blob, ``verify-receipt --rehash`` and ``store verify`` find them. ``store verify
--repair`` removes them and the next build makes the same image again, digest for digest."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sparkimg._internal.net.registry import ImageRef, RegistryClient
from sparkimg.engine.protocol import Engine
from sparkimg.formats.canonical import hex_of
from sparkimg.store.content import Store
from tests.support import rot

from .helpers import build_ok, cli, copy_demo
from .nodes import signed_demo


def test_rotten_blobs_never_leave_the_store_and_repair_rebuilds_the_same_image(
    tmp_path: Path, engine: Engine, demo_base: str, registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    demo, store, _, first = signed_demo(tmp_path)
    reference, oci_ = first["image"]["reference"], first["oci"]
    # six's layer (the last is the patch set's); sparkimg stores layers plain
    layer, config = hex_of(oci_["diff_ids"][-2]), hex_of(oci_["config"])
    blobs = Store(store)
    assert cli(capsys, store, "store", "verify")[0] == 0

    rot(blobs.blob(layer), "flip")
    archive = tmp_path / "demo.oci.tar"
    code, _, err = cli(capsys, store, "save", str(demo), "-o", str(archive))
    assert code == 1 and f"sha256:{layer} is damaged" in err and "store verify --repair" in err, err
    assert not archive.exists() and not list(tmp_path.glob(".demo.oci.tar.*"))
    code, report, _ = cli(capsys, store, "verify-receipt", first["receipt"], "--key", str(tmp_path / "trusted.pub"),
                          "--rehash", "--json")
    assert code == 1 and report["failed_stage"] == "store", report
    assert any(not c["ok"] and c["expected"] == layer for c in report["checks"]), report["checks"]

    rot(blobs.blob(config), "cut")
    repository = f"{registry}/sparkimg-test/rot-{layer[:8]}"
    code, _, err = cli(capsys, store, "push", str(demo), "--to", repository, "--tag", "latest")
    assert code == 1 and "is damaged" in err, err
    listed = RegistryClient().send("GET", ImageRef.parse(repository), f"{ImageRef.parse(repository).base_url}"
                                   "/tags/list", ok=(200, 404))
    assert listed.status_code == 404 or not (listed.json().get("tags") or []), listed.text

    # The engine lost the image: the build loads it again from the store, and the engine refuses the
    # rotten config by its digest; the build names the blob instead of an engine error.
    engine.remove_image(reference)
    code, _, err = cli(capsys, store, "build", str(demo), "--quiet")
    assert code == 1 and f"sha256:{config}" in err and "store verify --repair" in err, err
    assert engine.inspect(reference) is None

    code, found, _ = cli(capsys, store, "store", "verify", "--json")
    assert code == 1 and sorted(d["blob"] for d in found["damaged"]) == sorted([f"sha256:{layer}",
                                                                               f"sha256:{config}"])
    code, found, _ = cli(capsys, store, "store", "verify", "--repair", "--json")
    assert code == 0 and found["repaired"] and not blobs.has(layer) and not blobs.has(config)
    assert cli(capsys, store, "store", "verify")[0] == 0

    again = build_ok(capsys, store, demo, "--key", str(tmp_path / "trusted.key"))
    assert again["oci"] == oci_ and engine.image_id(reference) == oci_["config"]
    # The six wheel was in the store all along (cached) but its layer blob was not: written again.
    assert {lay["name"]: (lay["cached"], lay["written"]) for lay in again["layers"]} == {
        "demo-kernel": (True, False), "six": (True, True), "image": (False, True)}
    assert blobs.verify(layer) and blobs.verify(config)
    engine.remove_image(reference)


@pytest.mark.parametrize("how", ["flip", "cut"])
@pytest.mark.parametrize("kind", ["fetched wheel", "compiled wheel"])
def test_a_layer_written_from_a_rotten_wheel_names_the_blob_and_a_repair_makes_it_again(
    tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str], how: str, kind: str
) -> None:
    demo = copy_demo(tmp_path / "project")
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    first = build_ok(capsys, store, demo)
    if kind == "fetched wheel":  # six, from PyPI
        wheel = json.loads(demo.with_name("demo.yaml.lock.json").read_text())["sources"]["six"]["sha256"]
    else:  # the demo kernel's wheel, the compile layer's output
        record = json.loads((store / "records" / "layers" / f"{first['layers'][0]['key']}.json").read_text())
        wheel = record["outputs"][0]["sha256"]
    blobs = Store(store)
    rot(blobs.blob(wheel), how)
    # A layer not written yet (its record gone, as for a new key) is made from the rotten wheel.
    for done in [*(store / "records" / "oci-layers").iterdir(), *(store / "records" / "images").iterdir()]:
        done.unlink()
    engine.remove_image(first["image"]["reference"])
    code, _, err = cli(capsys, store, "build", str(demo), "--quiet")
    assert code == 1 and f"sha256:{wheel} is damaged" in err and "store verify --repair" in err, err
    code, found, _ = cli(capsys, store, "store", "verify", "--repair", "--json")
    assert code == 0 and [d["blob"] for d in found["damaged"]] == [f"sha256:{wheel}"]
    again = build_ok(capsys, store, demo)  # fetched again by its pin, or compiled again: the same bytes
    assert again["oci"] == first["oci"] and blobs.verify(wheel)
    engine.remove_image(first["image"]["reference"])


def test_each_kind_of_image_blob_flipped_or_cut_leaves_by_neither_save_nor_push(
    tmp_path: Path, engine: Engine, demo_base: str, registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    demo, store, _, built = signed_demo(tmp_path)
    blobs = Store(store)
    kinds = {"manifest": built["oci"]["manifest"], "config": built["oci"]["config"],
             "layer": built["oci"]["diff_ids"][-1]}
    for kind, digest in kinds.items():
        path = blobs.blob(hex_of(digest))
        sound = path.read_bytes()
        for how in ("flip", "cut"):
            rot(path, how)
            archive = tmp_path / f"{kind}-{how}.tar"
            code, _, err = cli(capsys, store, "save", str(demo), "-o", str(archive))
            assert code == 1 and f"{digest} is damaged" in err and not archive.exists(), (kind, how, err)
            repository = f"{registry}/sparkimg-test/rot-{kind}-{how}-{hex_of(digest)[:8]}"
            code, _, err = cli(capsys, store, "push", str(demo), "--to", repository, "--tag", "latest")
            assert code == 1 and f"{digest} is damaged" in err, (kind, how, err)
            ref = ImageRef.parse(repository)
            listed = RegistryClient().send("GET", ref, f"{ref.base_url}/tags/list", ok=(200, 404))
            assert listed.status_code == 404 or not (listed.json().get("tags") or []), (kind, how, listed.text)
            os.chmod(path, 0o644)
            path.write_bytes(sound)
            os.chmod(path, 0o444)
    assert cli(capsys, store, "save", str(demo), "-o", str(tmp_path / "sound.tar"))[0] == 0
    engine.remove_image(built["image"]["reference"])
