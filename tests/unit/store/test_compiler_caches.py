"""Compiler cache folders in the store: kept while a spec's root names them, never removed under
a build that holds one, counted and removed least recently used first by ``--keep-storage``, and
removed by one rename so a kill -9 leaves the whole cache or nothing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from sparkimg.store import caches
from sparkimg.store.content import Store
from sparkimg.store.gc import collect
from sparkimg.store.roots import remember_caches, remember_root


def _cache(store: Store, name: str, size: int, age_s: float = 0.0) -> Path:
    folder = caches.folder(store, name)
    (folder / "a").mkdir()
    (folder / "a" / "entry").write_bytes(b"x" * size)
    with caches.in_use(folder):
        pass
    when = time.time() - age_s
    os.utime(folder / caches.IN_USE, (when, when))
    return folder


def _spec_using(tmp_path: Path, store: Store, names: list[str]) -> Path:
    spec = tmp_path / "project" / "demo.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text("name: demo\n")
    lock = spec.with_name("demo.yaml.lock.json")
    lock.write_text(json.dumps({}))
    remember_root(store, spec, lock=lock, receipts=tmp_path / "receipts", keys=["0" * 64], compiler_caches=names)
    return spec


def test_gc_keeps_the_caches_a_spec_uses_and_removes_the_others(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    used = _cache(store, "kernel.aaaa", 1000)
    stale = _cache(store, "kernel.bbbb", 2000)
    spec = _spec_using(tmp_path, store, [used.name])
    found = collect(store)
    assert used.is_dir() and not stale.exists()
    assert found.to_json()["removed_compiler_caches"] == 1 and found.cache_bytes >= 1000
    spec.unlink()  # the spec is gone: so is its root, and its cache goes with it
    collect(store)
    assert not used.exists() and caches.folders(store) == []


def test_a_cache_a_build_holds_is_never_removed(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    held = _cache(store, "kernel.cccc", 100)
    with caches.in_use(held):
        found = collect(store)
        assert held.is_dir() and found.to_json()["removed_compiler_caches"] == 0
        assert not caches.remove(store, held)
    assert caches.remove(store, held) and not held.exists()


def test_keep_storage_counts_caches_and_removes_the_least_recently_used_first(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    old = _cache(store, "kernel.old", 4000, age_s=3600)
    new = _cache(store, "kernel.new", 4000)
    _spec_using(tmp_path, store, [old.name, new.name])  # both in use by a spec: a cache holds only speed
    collect(store, keep_storage=6000)
    assert not old.exists() and new.is_dir()
    collect(store, keep_storage=100_000)
    assert new.is_dir()


def test_a_removal_killed_after_its_rename_leaves_a_folder_the_next_sweep_takes(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    folder = _cache(store, "kernel.dddd", 10)
    work = tmp_path / "store" / "tmp" / "compiler-cache-gone.dead"
    work.mkdir()
    (work / ".sparkimg-lease").write_text("")
    folder.rename(work / folder.name)  # as if killed between the rename and the rmtree
    old = time.time() - 3600
    os.utime(work / ".sparkimg-lease", (old, old))
    assert caches.folders(store) == []
    Store(tmp_path / "store")  # a new store sweeps work folders whose lease is free
    assert not work.exists()


def test_a_nights_candidate_build_names_its_caches_in_the_specs_root(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    night = _cache(store, "kernel.eeee", 100)
    spec = _spec_using(tmp_path, store, [])  # the root a night's state folder gives the spec
    remember_caches(store, spec, [night.name])
    remember_caches(store, tmp_path / "never-built.yaml", [night.name])  # a spec with no root gets none
    assert len(list((store.root / "records" / "roots").glob("*.json"))) == 1
    collect(store)
    assert night.is_dir()
