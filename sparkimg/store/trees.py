"""Input trees kept unpacked in the store: ``trees/BLOB``, a compile layer's folder input (CUTLASS,
a build script's folder, an sdist handed as an input) unpacked once from its blob and mounted
read-only into every container that names it.

Unpacking CUTLASS's thousands of files into each compile's work folder cost seconds of every
rebuild, however little changed. A tree is named by the blob it was unpacked from (the blob's
sha256 is the input's pin), made under a temp name and renamed, so a kill -9 or a second build
never sees half a tree; it is mounted read-only, so no build writes into it. ``build --check``
compiles in a scratch store, whose trees are unpacked again from the blobs: a tree that no longer
matched its blob would show there. gc keeps a tree while its blob is live, and removes it by one
rename otherwise.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from sparkimg.store.content import Store

FOLDER = "trees"  # in the store: trees/BLOB, whole once it is there (the rename is the last step)


def path(store: Store, blob: str) -> Path:
    return store.root / FOLDER / blob


def unpacked(store: Store, blob: str, unpack: Callable[[Path], None]) -> Path:
    """``trees/BLOB``, made now by ``unpack(folder)`` when the store lacks it."""
    return made(store, path(store, blob), unpack, "tree.")


def made(store: Store, target: Path, make: Callable[[Path], None], prefix: str) -> Path:
    """The folder ``target`` of the store, made now by ``make(folder)`` in a leased work folder
    (``prefix``) and renamed into place when it is not there: whole or absent, whoever looks (an
    unpacked input tree, a toolkit's tree)."""
    if target.is_dir():
        return target
    work = store.temp_dir(prefix)
    try:
        staged = work / "tree"
        staged.mkdir()
        make(staged)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(staged, target)
        except OSError:
            if not target.is_dir():  # another build's tree, whole, won; else it is ours to fail
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def linked(tree: Path, target: Path) -> None:
    """A copy of ``tree`` in the empty folder ``target`` whose files are hard links to the tree's
    (folders and symbolic links are its own): a source patched per build costs a link per file,
    not a copy of every byte. A file is written only after ``own`` has broken its link, so the
    store's tree never changes; a file that cannot be linked (another filesystem) is copied."""
    for folder, dirs, names in os.walk(tree):
        here = target / os.path.relpath(folder, tree)
        for name in [*dirs, *names]:
            entry, made = Path(folder, name), here / name
            if entry.is_symlink():
                os.symlink(os.readlink(entry), made)
            elif entry.is_dir():
                made.mkdir(mode=(entry.stat().st_mode & 0o7777) | 0o700)  # its own, to be written
            else:
                try:
                    os.link(entry, made)
                except OSError:
                    shutil.copy2(entry, made)


def own(path: Path) -> None:
    """``path`` (a file of a ``linked`` copy) as a file of its own, with the same bytes and mode,
    before anything writes it; a folder, a link or an absent path is left as it is."""
    if path.is_symlink() or not path.is_file() or path.stat().st_nlink == 1:
        return
    temp = path.with_name(f".{path.name}.own")
    shutil.copy2(path, temp)
    os.replace(temp, path)
