"""One truth for "is it built": the store's image record, on the real engine and registry.

Each direction of a store and an engine that disagree: the engine holds the image and the
store does not (a new ``--store``, a cleaned cache, gc), and the store holds it and the engine
does not (``docker image rm``, a prune). And ``build --check``'s exit code is its verdict,
whatever happens to the receipt it writes beside it."""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from sparkimg.engine.protocol import Engine

from .helpers import build_ok, cached, cli, copy_demo


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path / "project")


def test_an_image_the_engine_holds_and_the_store_lacks_is_built_into_the_store_then_pushes_saves_and_checks(
    demo: Path, tmp_path: Path, engine: Engine, demo_base: str, registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, tmp_path / "first", "lock", str(demo))[0] == 0
    first = build_ok(capsys, tmp_path / "first", demo)
    reference = first["image"]["reference"]
    try:
        store = tmp_path / "empty"  # the image is in the engine; this store has never seen it
        code, said, _ = cli(capsys, store, "build", str(demo))
        assert code == 0 and "up to date" not in said and "rebuilt: demo-kernel, image" in said
        again = build_ok(capsys, store, demo)
        assert again["oci"] == first["oci"] and again["image"]["id"] == first["image"]["id"]
        assert all(cached(again).values())

        repo = f"{registry}/sparkimg-test/truth-{uuid.uuid4().hex[:8]}"
        code, pushed, err = cli(capsys, store, "push", str(demo), "--to", repo, "--tag", "v1", "--json")
        assert code == 0, err
        assert pushed["manifest"] == first["oci"]["manifest"]
        code, saved, err = cli(capsys, store, "save", str(demo), "-o", str(tmp_path / "demo.tar"), "--json")
        assert code == 0, err
        assert Path(saved["path"]).stat().st_size > 0
        code, checked, err = cli(capsys, store, "build", str(demo), "--check", "--json", "--quiet")
        assert code == 0, err
        assert checked["check"]["identical"] is True
    finally:
        engine.remove_image(reference)


def test_an_image_the_store_holds_and_the_engine_lost_is_loaded_again_without_compiling(
    demo: Path, tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from sparkimg import api
    from sparkimg.events import Collected, Phase

    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    first = build_ok(capsys, store, demo)
    reference = first["image"]["reference"]
    engine.remove_image(reference)
    assert engine.inspect(reference) is None

    events = Collected()
    built = api.build(demo, store=store, report=events)
    try:
        assert built.result.built == () and built.result.loaded
        assert not events.of(Phase.COMPILE) and not any("assemble" in e.message for e in events.of(Phase.ASSEMBLE))
        assert engine.image_id(reference) == first["image"]["id"] == built.result.image_id
        assert built.to_json()["oci"] == first["oci"]
        engine.remove_image(reference)
        code, said, _ = cli(capsys, store, "build", str(demo))
        assert code == 0 and "loaded into the engine from the store, nothing built" in said
        assert engine.image_id(reference) == first["image"]["id"]
    finally:
        engine.remove_image(reference)


def test_the_stamp_holds_only_while_the_store_and_the_engine_both_hold_the_image(
    demo: Path, tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sparkimg import api

    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    first = build_ok(capsys, store, demo)
    reference = first["image"]["reference"]
    real_build = api.build
    calls: list[Path] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return real_build(*args, **kwargs)

    def stamped() -> None:
        """Build until the no-op is answered by the stamp (files younger than a second are never stamped)."""
        time.sleep(1.1)
        build_ok(capsys, store, demo)
        before = len(calls)
        build_ok(capsys, store, demo)
        assert len(calls) == before, "the no-op was not answered by the stamp"

    monkeypatch.setattr(api, "build", counted)
    try:
        stamped()
        engine.remove_image(reference)  # the engine lost it: the whole way, loaded again
        again = build_ok(capsys, store, demo)
        assert again["loaded_from_store"] is True and engine.image_id(reference) == first["image"]["id"]

        stamped()
        layer = first["oci"]["diff_ids"][-1].split(":")[1]  # the patch layer's blob: as a gc would remove it
        blob = next(p for p in (store / "blobs").rglob(layer) if p.is_file())
        blob.unlink()
        count = len(calls)
        again = build_ok(capsys, store, demo)
        assert len(calls) == count + 1, "the stamp held with a blob of the image gone"
        assert again["oci"] == first["oci"] and blob.is_file()

        shutil.rmtree(store / "records" / "images")  # the record gone: rebuilt, the engine's image kept
        again = build_ok(capsys, store, demo)
        assert again["oci"] == first["oci"] and again["image"]["id"] == first["image"]["id"]
    finally:
        engine.remove_image(reference)


def test_check_exits_on_its_verdict_when_the_default_receipt_is_signed_and_no_key_is_given(
    demo: Path, tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPARKIMG_KEY", raising=False)
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    assert cli(capsys, store, "keygen", "--out", str(tmp_path / "k"))[0] == 0
    signed = build_ok(capsys, store, demo, "--key", str(tmp_path / "k.key"))
    receipt = Path(signed["receipt"])
    before = receipt.read_bytes()
    try:
        # The signed receipt attests this very image from this very lock: an unsigned check keeps it.
        code, checked, err = cli(capsys, store, "build", str(demo), "--check", "--json", "--quiet")
        assert code == 0, err
        assert checked["check"]["identical"] is True and checked["receipt"] == str(receipt)
        assert checked["signed"] is True and "receipt_error" not in checked and receipt.read_bytes() == before
        # A receipt that cannot be written (a folder in its place) is a warning beside the verdict.
        folder = tmp_path / "a-folder.json"
        folder.mkdir()
        code, checked, err = cli(capsys, store, "build", str(demo), "--check", "--receipt", str(folder), "--json",
                                 "--quiet")
        assert code == 0 and checked["check"]["identical"] is True and checked["receipt"] is None, err
        assert "a-folder.json" in checked["receipt_error"]
        code, text, err = cli(capsys, store, "build", str(demo), "--check", "--receipt", str(folder))
        assert code == 0 and "identical" in text
        assert "receipt not written" in err  # the warning
    finally:
        engine.remove_image(signed["image"]["reference"])
