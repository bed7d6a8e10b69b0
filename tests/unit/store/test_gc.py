"""The store's garbage collector on a store laid out as builds leave it: roots, marking by
reference, leases of running builds, --keep-storage, and kill -9 at any moment."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkimg.store.content import Store
from sparkimg.store.gc import collect, mark, references, survey
from sparkimg.store.roots import ROOTS, lease, live_leases, remember_root, root_name


def _blob(store: Store, data: bytes) -> str:
    return store.put_bytes(data)


def _image(store: Store, key: str, tag: bytes) -> dict[str, str]:
    """An image as ``assemble`` leaves it: layer blob, config naming its diff_id, manifest naming
    both, the image record naming all three, and an ``oci-layers`` cache record for the layer."""
    layer = _blob(store, b"layer " + tag + os.urandom(64))
    config = _blob(store, json.dumps({"rootfs": {"diff_ids": [f"sha256:{layer}"]}}).encode())
    manifest = _blob(store, json.dumps({"config": {"digest": f"sha256:{config}"},
                                        "layers": [{"digest": f"sha256:{layer}"}]}).encode())
    store.write_record("images", key, {"manifest": f"sha256:{manifest}", "config": f"sha256:{config}",
                                       "layers": [f"sha256:{layer}"]})
    store.write_record("oci-layers", hashlib.sha256(tag).hexdigest(), {"digest": f"sha256:{layer}"})
    return {"layer": layer, "config": config, "manifest": manifest}


def _project(tmp_path: Path, store: Store, key: str) -> Path:
    spec = tmp_path / "project" / "layers" / "demo.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text("name: demo\n")
    lock = spec.with_name("demo.yaml.lock.json")
    lock.write_text(json.dumps({"base": {"digest": "sha256:" + "0" * 64}}))
    remember_root(store, spec, lock=lock, receipts=tmp_path / "project" / "receipts", keys=[key])
    return spec


def _gone(store: Store, *digests: str) -> bool:
    return not any(store.has(d) for d in digests)


def test_references_finds_digests_keys_and_commits_and_reads_a_dsse_payload() -> None:
    sha, commit = "a" * 64, "b" * 40
    text = f'{{"x": "sha256:{sha}", "commit": "{commit}", "long": "{"c" * 50}", "upper": "{"D" * 64}"}}'
    assert references(text.encode()) == {sha, commit}
    envelope = json.dumps({"payloadType": "application/vnd.in-toto+json",
                           "payload": base64.b64encode(f'{{"key": "{"e" * 64}"}}'.encode()).decode()})
    assert references(envelope.encode()) == {"e" * 64}


def test_gc_keeps_what_a_spec_root_reaches_and_removes_the_rest(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    live_key, dead_key = "1" * 64, "2" * 64
    live = _image(store, live_key, b"live")
    dead = _image(store, dead_key, b"dead")
    stray = _blob(store, b"a wheel nothing names")
    spec = _project(tmp_path, store, live_key)

    planned, _ = survey(store)
    dry = collect(store, dry_run=True)
    assert dry.removed and all(d.path.exists() for d in dry.removed)  # a dry run removes nothing
    assert {d.path.name for d in dry.removed} >= {dead["manifest"], dead["config"], dead["layer"], stray}
    assert planned.kept_bytes == dry.kept_bytes

    done = collect(store)
    assert _gone(store, *dead.values(), stray) and all(store.has(d) for d in live.values())
    assert store.read_record("images", dead_key) is None and store.read_record("images", live_key) is not None
    caches = [json.loads(p.read_text())["digest"] for p in (store.root / "records" / "oci-layers").glob("*.json")]
    assert caches == [f"sha256:{live['layer']}"]  # the dead layer's cache went with its blob
    assert done.removed_bytes > 0 and collect(store).removed == []  # nothing more to do

    spec.unlink()  # the spec is gone: so is its root, and all it kept
    collect(store)
    assert _gone(store, *live.values()) and not list((store.root / "records" / ROOTS).glob("*.json"))


def test_receipts_nightly_entries_and_keep_roots_are_roots(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    by_receipt, by_night, by_flag, dead = (_image(store, k * 64, k.encode()) for k in "3456")
    spec = _project(tmp_path, store, "9" * 64)
    receipts = tmp_path / "project" / "receipts" / "demo"
    receipts.mkdir(parents=True)
    statement = json.dumps({"predicate": {"image": {"key": "3" * 64}}}).encode()
    (receipts / "x.receipt.json").write_text(json.dumps({"payloadType": "application/vnd.in-toto+json",
                                                         "payload": base64.b64encode(statement).decode()}))
    night = tmp_path / "state" / "entries" / "20261201T020000Z"
    night.mkdir(parents=True)
    (night / "entry.json").write_text(json.dumps({"image": {"manifest": f"sha256:{by_night['manifest']}"}}))
    remember_root(store, spec, lock=spec.with_name("demo.yaml.lock.json"), receipts=receipts.parent, keys=[],
                  nightly=tmp_path / "state")
    kept = tmp_path / "kept.json"
    kept.write_text(json.dumps({"manifest": f"sha256:{by_flag['manifest']}"}))

    collect(store, keep=[kept])
    assert all(store.has(d) for d in (*by_receipt.values(), *by_night.values(), *by_flag.values()))
    assert _gone(store, *dead.values())
    assert store.read_record(ROOTS, root_name(spec))["keys"] == ["9" * 64]  # type: ignore[index]


def test_keep_storage_removes_the_least_recently_used_unreachable_blobs_first(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    _project(tmp_path, store, "1" * 64)
    old, middle, new = (_blob(store, bytes([n]) * 1000) for n in range(3))
    for age, digest in ((300, old), (200, middle), (100, new)):
        when = time.time() - age
        os.utime(store.blob(digest), (when, when))
    done = collect(store, keep_storage=2000)
    assert [d.path.name for d in done.removed] == [old] and store.has(middle) and store.has(new)
    assert collect(store, keep_storage=10_000).removed == []


def test_a_running_builds_lease_keeps_its_keys_its_locks_pins_and_all_it_writes(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    cached = _image(store, "7" * 64, b"cached layer of the running build")
    wheel = _blob(store, b"a wheel the running build's lock pins")
    old = _blob(store, b"old garbage")
    long_ago = time.time() - 3600
    for digest in (*cached.values(), wheel, old):
        os.utime(store.blob(digest), (long_ago, long_ago))
    lock = tmp_path / "candidate.lock.json"
    lock.write_text(json.dumps({"wheel": wheel}))
    with lease(store, lock=lock, keys=["7" * 64]):
        written = _blob(store, b"an output the build has not recorded yet")
        assert len(live_leases(store)) == 1
        collect(store)
        assert all(store.has(d) for d in (*cached.values(), wheel, written))
        assert not store.has(old)
    assert live_leases(store) == []
    collect(store)
    assert _gone(store, *cached.values(), wheel, written)


def test_a_dead_builds_lease_is_cleared_and_protects_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    held = store.root / "tmp" / "leases" / "dead.json"
    held.parent.mkdir(parents=True)
    held.write_text(json.dumps({"started": 0, "lock": "", "keys": ["8" * 64]}))  # no flock: its build died
    _image(store, "8" * 64, b"dead build")
    assert live_leases(store) == [] and held.exists()  # outside gc, nothing is removed
    collect(store)
    assert not held.exists() and store.read_record("images", "8" * 64) is None


def test_mark_follows_records_manifests_and_caches_to_a_fixed_point(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    image = _image(store, "1" * 64, b"x")
    compressed = _blob(store, b"compressed copy of the layer")
    store.write_record("compressed-layers", f"{image['layer']}-abc",
                       {"diffID": f"sha256:{image['layer']}", "digest": f"sha256:{compressed}"})
    live = mark(store, {"1" * 64})
    assert set(image.values()) | {compressed} <= live


GC_SCRIPT = """
import sys
from pathlib import Path
from sparkimg.store.content import Store
from sparkimg.store.gc import collect
print("ready", flush=True)
collect(Store(Path(sys.argv[1])))
"""


def test_gc_killed_at_random_moments_leaves_a_store_whose_live_images_are_whole(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    live = _image(store, "1" * 64, b"live")
    _project(tmp_path, store, "1" * 64)
    for n in range(600):  # enough garbage that a kill lands mid-way
        _image(store, hashlib.sha256(str(n).encode()).hexdigest(), str(n).encode())
    rng = random.Random(7)
    for _ in range(6):
        proc = subprocess.Popen([sys.executable, "-c", GC_SCRIPT, str(store.root)], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert all(store.has(d) for d in live.values())
        # Records go first: every record left is whole and names only blobs that are there.
        for record in (store.root / "records" / "images").glob("*.json"):
            assert all(store.has(d) for d in references(record.read_bytes()))
        for blob in (store.root / "blobs" / "sha256").iterdir():
            assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
    with open(store.root / "tmp" / "gc.lock", "a") as handle:  # the dead gc's lock is free again
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    collect(store)
    assert [p.stem for p in (store.root / "records" / "images").glob("*.json")] == ["1" * 64]
    assert all(store.has(d) for d in live.values())


@pytest.fixture(autouse=True)
def _no_sparkimg_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARKIMG_STORE", raising=False)
