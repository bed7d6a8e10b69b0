"""Input trees kept unpacked in the store: made once, whole or not at all, kept by gc while their
blob is live."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkimg.store import trees
from sparkimg.store.content import Store
from sparkimg.store.gc import collect
from sparkimg.store.roots import remember_root


def test_a_tree_is_unpacked_once_and_reused(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    blob = store.put_bytes(b"a tar of cutlass")
    calls: list[Path] = []

    def unpack(folder: Path) -> None:
        calls.append(folder)
        (folder / "include").mkdir()
        (folder / "include" / "cutlass.h").write_text("// cutlass\n")

    first = trees.unpacked(store, blob, unpack)
    assert first == store.root / "trees" / blob and (first / "include" / "cutlass.h").is_file()
    assert trees.unpacked(store, blob, unpack) == first and len(calls) == 1
    assert sorted(p.name for p in first.iterdir()) == ["include"]  # nothing of sparkimg's inside: the command sees it


def test_an_unpack_that_fails_leaves_no_tree(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    blob = store.put_bytes(b"a damaged tar")

    def unpack(folder: Path) -> None:
        (folder / "half").write_text("x")
        raise OSError("truncated")

    with pytest.raises(OSError, match="truncated"):
        trees.unpacked(store, blob, unpack)
    assert not trees.path(store, blob).exists()
    assert not list((store.root / "tmp").glob("tree.*"))


def test_gc_keeps_a_tree_while_its_blob_is_live(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    live, dead = store.put_bytes(b"cutlass v4.7.0"), store.put_bytes(b"cutlass v4.6.0")
    def unpack(folder: Path) -> None:
        (folder / "x").write_text("x")

    for blob in (live, dead):
        trees.unpacked(store, blob, unpack)
    spec = tmp_path / "project" / "demo.yaml"
    spec.parent.mkdir()
    spec.write_text("name: demo\n")
    lock = spec.with_name("demo.yaml.lock.json")
    lock.write_text(json.dumps({"sources": {"cutlass": {"kind": "path", "sha256": live}}}))
    remember_root(store, spec, lock=lock, receipts=tmp_path / "receipts", keys=[])
    found = collect(store)
    assert trees.path(store, live).is_dir() and not trees.path(store, dead).exists()
    assert found.to_json()["removed_trees"] == 1 and found.to_json()["removed_toolkits"] == 0


def test_a_linked_copy_shares_files_and_own_gives_one_its_own_bytes(tmp_path: Path) -> None:
    tree, copy = tmp_path / "tree", tmp_path / "copy"
    (tree / "csrc" / "deep").mkdir(parents=True)
    (tree / "csrc" / "a.cu").write_text("a\n")
    (tree / "csrc" / "deep" / "b.cu").write_text("b\n")
    (tree / "csrc" / "run.sh").write_text("#!/bin/sh\n")
    (tree / "csrc" / "run.sh").chmod(0o755)
    (tree / "link.cu").symlink_to("csrc/a.cu")
    (tree / "folder-link").symlink_to("csrc/deep")
    copy.mkdir()
    trees.linked(tree, copy)
    assert (copy / "csrc" / "a.cu").stat().st_ino == (tree / "csrc" / "a.cu").stat().st_ino
    assert (copy / "csrc" / "deep").is_dir() and not (copy / "csrc" / "deep").is_symlink()
    assert (copy / "link.cu").readlink() == Path("csrc/a.cu") and (copy / "folder-link").is_symlink()
    (copy / "csrc" / "new.cu").write_text("a folder of the copy is its own\n")
    assert not (tree / "csrc" / "new.cu").exists()
    trees.own(copy / "csrc" / "run.sh")
    trees.own(copy / "link.cu")  # a link stays a link
    trees.own(copy / "absent.cu")
    assert (copy / "csrc" / "run.sh").stat().st_nlink == 1 and (copy / "csrc" / "run.sh").stat().st_mode & 0o111
    (copy / "csrc" / "run.sh").write_text("changed\n")
    assert (tree / "csrc" / "run.sh").read_text() == "#!/bin/sh\n"
    assert (copy / "link.cu").is_symlink()
