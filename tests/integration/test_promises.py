"""Every promise kept on the ordinary paths (issue 34), on the real engine and registry:
``build --check`` checks whatever the no-op stamp says; a new lock epoch does not give one key two
sets of bytes; a receipt goes out only with its own image; bad nightly input is refused before
the night starts; an unsigned rebuild of the very image a signed receipt attests keeps it."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from sparkimg.engine.protocol import Engine

from .helpers import build_ok, cached, cli, copy_demo


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path / "project")


@pytest.fixture
def key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert cli(capsys, tmp_path / "keys-store", "keygen", "--out", str(tmp_path / "node"))[0] == 0
    return tmp_path / "node.key"


def test_check_rebuilds_and_compares_even_when_the_no_op_stamp_holds(
        demo: Path, key: Path, tmp_path: Path, engine: Engine, demo_base: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    first = build_ok(capsys, store, demo, "--key", str(key))
    try:
        build_ok(capsys, store, demo, "--key", str(key))  # a no-op: it writes the stamp
        code, said, _ = cli(capsys, store, "build", str(demo), "--key", str(key))
        assert code == 0 and "up to date, nothing built" in said  # the stamp holds
        checked = build_ok(capsys, store, demo, "--key", str(key), "--check")
        assert checked["check"]["identical"] is True
        assert checked["check"]["digests_compared"] == len(checked["check"]["compared"]) >= 9
        # Again, every layer (--recheck: the image layers the first check showed identical too).
        code, said, err = cli(capsys, store, "build", str(demo), "--key", str(key), "--check", "--recheck")
        assert code == 0 and f"{checked['check']['digests_compared']} digests compared" in said, err
        assert "compile demo-kernel again from scratch" in err
        code, said, err = cli(capsys, store, "build", str(demo), "--key", str(key), "--check")
        assert code == 0 and "were not rebuilt (demo-kernel, six, patches.demo)" in said, err
        assert "compile demo-kernel again from scratch" in err  # compile layers always are
    finally:
        engine.remove_image(first["image"]["reference"])


def test_a_new_lock_epoch_reuses_the_compile_layer_and_the_check_still_passes(
        demo: Path, tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The demo has no git source: its lock's SOURCE_DATE_EPOCH is the clock at lock time. A new
    lock moves it; the compile layer's key does not move, so its bytes must not either."""
    store = tmp_path / "store"
    lock = demo.with_name(demo.name + ".lock.json")
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    first = build_ok(capsys, store, demo)
    epoch = json.loads(lock.read_text())["source_date_epoch"]
    lock.unlink()
    time.sleep(1.1)
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    assert json.loads(lock.read_text())["source_date_epoch"] > epoch
    try:
        second = build_ok(capsys, store, demo)
        assert cached(second)["demo-kernel"] is True and cached(second)["image"] is False
        code, checked, err = cli(capsys, store, "build", str(demo), "--check", "--json", "--quiet")
        assert code == 0 and checked["check"]["identical"] is True, err
        assert [c for c in checked["check"]["compared"] if not c["same"]] == []
    finally:
        for result in (first, locals().get("second")):
            if result:
                engine.remove_image(result["image"]["reference"])


def test_push_and_save_refuse_another_images_receipt(
        tmp_path: Path, key: Path, engine: Engine, demo_base: str, registry: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    one, other = copy_demo(tmp_path / "one"), copy_demo(tmp_path / "other")
    built = []
    for spec in (one, other):
        assert cli(capsys, store, "lock", str(spec))[0] == 0
        built.append(build_ok(capsys, store, spec, "--key", str(key)))
    try:
        foreign = Path(built[1]["receipt"])
        repo = f"{registry}/sparkimg-test/promise-{uuid.uuid4().hex[:8]}"
        code, _, err = cli(capsys, store, "push", str(one), "--to", repo, "--receipt", str(foreign))
        assert code == 2 and "not of " + built[0]["image"]["reference"] in err and "fix:" in err, err
        code, _, err = cli(capsys, store, "save", str(one), "-o", str(tmp_path / "one.tar"), "--receipt", str(foreign))
        assert code == 2 and "not of " + built[0]["image"]["reference"] in err, err
        assert not (tmp_path / "one.tar").exists()
        # Its own receipt goes, with the SBOM beside it.
        code, pushed, err = cli(capsys, store, "push", str(one), "--to", repo, "--json")
        assert code == 0 and pushed["receipt"] and pushed["sbom"], err
        # Registry references as docker and skopeo take them: https:// is HTTPS, which this loopback
        # registry (plain HTTP, as Docker reaches loopback) does not speak; an unknown transport is bad input.
        code, _, err = cli(capsys, store, "push", str(one), "--to", "https://" + repo)
        assert code == 1 and "does not speak TLS" in err and "without https://" in err, err
        code, _, err = cli(capsys, store, "push", str(one), "--to", "oci://" + repo)
        assert code == 2 and "not a registry transport" in err and "docker://REGISTRY/REPO" in err, err
    finally:
        for result in built:
            engine.remove_image(result["image"]["reference"])


@pytest.mark.parametrize("bad", ["missing key", "public key", "foreign transport"])
def test_bad_nightly_input_is_refused_before_the_night_and_leaves_no_history(
        bad: str, demo: Path, key: Path, tmp_path: Path, engine: Engine, registry: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    chosen = {"missing key": tmp_path / "absent.key", "public key": key.with_suffix(".pub")}.get(bad, key)
    target = f"oci://{registry}/sparkimg-test/x" if bad == "foreign transport" else f"{registry}/sparkimg-test/x"
    started = time.monotonic()
    code, _, err = cli(capsys, tmp_path / "store", "nightly", str(demo), "--state", str(state), "--key", str(chosen),
                       "--push", target)
    assert code == 2 and "fix:" in err, err
    assert time.monotonic() - started < 10  # nothing was resolved or built
    assert not state.exists() or not any(state.iterdir())


def test_an_unsigned_rebuild_of_the_image_a_signed_receipt_attests_keeps_it(
        demo: Path, key: Path, tmp_path: Path, engine: Engine, demo_base: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    first = build_ok(capsys, store, demo, "--key", str(key))
    references = [first["image"]["reference"]]
    try:
        receipt = Path(first["receipt"])
        before = receipt.read_bytes()
        for path in (store / "records" / "statements").iterdir():
            path.unlink()  # the statement is made anew: other run details, the same image and lock
        again = build_ok(capsys, store, demo)
        assert again["signed"] is True and again["receipt"] == str(receipt)
        assert receipt.read_bytes() == before
        # An unsigned build of something else still never replaces it.
        other = copy_demo(tmp_path / "other")
        assert cli(capsys, store, "lock", str(other))[0] == 0
        code, planned, _ = cli(capsys, store, "plan", str(other), "--json")
        references.append(planned["image"]["reference"])
        code, _, err = cli(capsys, store, "build", str(other), "--receipt", str(receipt), "--quiet")
        assert code == 1 and "never replaces a signed file" in err
        assert receipt.read_bytes() == before
    finally:
        for reference in references:
            engine.remove_image(reference)
