"""``sparkimg gc`` on stores real builds and nights left, with the real engine and registry:
ten nights kept two, and a gc while a build runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sparkimg.engine.protocol import Engine
from tests.formats import spec_header

from .helpers import WHEEL, cli, git, spec_text
from .test_nightly import BUILD, _commit


def test_ten_nights_kept_two_leave_only_what_the_two_reach_and_those_verify_and_push(
    tmp_path: Path, engine: Engine, demo_base: str, registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "main")
    (upstream / "build.py").write_text(BUILD)
    _commit(upstream, "rev-0", "first")
    name = f"it-gc-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "project" / "spec.yaml"
    spec.parent.mkdir()
    spec.write_text(spec_header(name, base=demo_base, platform="native", image=f"sparkimg-test/{name}") + f"""\
sources:
  kernel:
    git: {upstream}
    ref: main
layers:
  - name: kernel
    kind: compile
    source: kernel
    command: python3 /src/build.py
    memory: 1g
    job_memory: 256m
    pids: 256
""")
    store = tmp_path / "store"
    assert cli(capsys, store, "keygen", "--out", str(tmp_path / "node"))[0] == 0
    nights = []
    try:
        for n in range(10):
            if n:
                _commit(upstream, f"rev-{n}", f"night {n}")
            code, night, err = cli(capsys, store, "nightly", str(spec), "--key", str(tmp_path / "node.key"),
                                   "--keep", "2", "--json", "--quiet")
            assert code == 0 and night["status"] == "built", err
            nights.append(night)
        blobs = {p.name for p in (store / "blobs" / "sha256").iterdir()}
        for old in nights[:8]:  # their configs, manifests and compiled wheels are theirs alone
            assert not {old["image"]["config"][7:], old["image"]["manifest"][7:]} & blobs
        entries = sorted(p.name for p in (spec.parent / "spec.yaml.nightly" / "entries").iterdir())
        assert entries == [nights[8]["entry"], nights[9]["entry"]]
        receipts = sorted((spec.parent / "receipts").rglob("*.receipt.json"))
        assert len(receipts) == 2  # the pruned nights' receipts went with them
        for kept in nights[8:]:
            assert {kept["image"]["config"][7:], kept["image"]["manifest"][7:]} <= blobs
            code, verified, err = cli(capsys, store, "verify-receipt", kept["receipt"], "--key",
                                      str(tmp_path / "node.pub"), "--rehash", "--json")
            assert code == 0 and verified["ok"], err

        code, dry, _ = cli(capsys, store, "gc", "--dry-run", "--json")
        assert code == 0 and dry["removed"] == []  # the nightly's own gc left nothing to do
        repository = f"{registry}/sparkimg-test/{name}"
        code, pushed, err = cli(capsys, store, "push", str(spec), "--to", repository, "--json")
        assert code == 0 and pushed["manifest"] == nights[9]["image"]["manifest"], err
    finally:
        for night in nights:
            engine.remove_image(night["image"]["reference"])


def test_gc_while_a_build_runs_removes_none_of_its_files_and_the_build_finishes(
    project: object, tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = project(spec_text(demo_base, f"sleep 6 && {WHEEL}"))  # type: ignore[operator]
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    stray = store / "blobs" / "sha256" / ("0" * 64)
    stray.write_bytes(b"")  # garbage from long ago, to show the gc does remove something
    os.utime(stray, (time.time() - 3600, time.time() - 3600))
    build = subprocess.Popen([sys.executable, "-m", "sparkimg.cli", "--store", str(store), "build", str(spec), "--json",
                              "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reference = None
    try:
        leases = store / "tmp" / "leases"
        for _ in range(300):
            if (leases.is_dir() and list(leases.glob("*.json"))) or build.poll() is not None:
                break
            time.sleep(0.1)
        assert build.poll() is None, build.communicate()
        assert list(leases.glob("*.json")), "the build took no lease"
        time.sleep(2.0)  # into the compile: the fetched inputs are in, the outputs not yet
        during = {p.name for p in (store / "blobs" / "sha256").iterdir()}
        code, done, err = cli(capsys, store, "gc", "--json")
        assert code == 0, err
        assert build.poll() is None, "the build ended before the gc ran: make it longer"
        assert {Path(d["path"]).name for d in done["removed"]} == {"0" * 64}
        assert any("running build" in root for root in done["roots"])
        out, err = build.communicate(timeout=300)
        assert build.returncode == 0, err
        built = json.loads(out)
        reference = built["image"]["reference"]
        blobs = {p.name for p in (store / "blobs" / "sha256").iterdir()}
        assert during - {"0" * 64} <= blobs
        assert {built["oci"]["manifest"][7:], built["oci"]["config"][7:]} <= blobs
        code, checked, err = cli(capsys, store, "gc", "--dry-run", "--json")
        assert code == 0 and checked["removed"] == [], checked  # the finished build is a root now
    finally:
        if build.poll() is None:
            build.kill()
        if reference:
            engine.remove_image(reference)


def test_fetch_now_build_offline_later_survives_a_gc(
    tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """What ``fetch`` put in the store is rooted by the spec's lock until the next lock, so a gc
    between the fetch and an offline build removes none of it (issue 40)."""
    from sparkimg.store.content import Store

    from .helpers import copy_demo

    demo = copy_demo(tmp_path / "project")
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    assert cli(capsys, store, "fetch", str(demo))[0] == 0
    locked = json.loads(demo.with_name("demo.yaml.lock.json").read_text())
    six = locked["sources"]["six"]["sha256"]
    code, collected, err = cli(capsys, store, "gc", "--json")
    assert code == 0, err
    assert Store(store).has(six), collected
    assert not any(six in str(d.get("path", "")) for d in collected.get("removed", [])), collected
