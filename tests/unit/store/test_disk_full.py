"""A full disk (a real 1 MiB tmpfs): the error names the path being written, and nothing is left
behind, neither a ``tmp/put.*`` of the store nor a temp file beside an atomic write."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkimg._internal.fs.atomic import write_atomic
from sparkimg.store.content import Store
from tests.support import unavailable


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True,
                             text=True, check=False)
    if mounted.returncode != 0:
        unavailable(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_store_write_on_a_full_disk_names_its_file_and_leaves_nothing(small_disk: Path) -> None:
    store = Store(small_disk / "store")
    with pytest.raises(OSError) as raised:
        store.put_bytes(os.urandom(2 << 20), what="a wheel")
    assert raised.value.filename and str(store.root / "tmp") in raised.value.filename
    assert "No space left" in str(raised.value)
    assert [p.name for p in (store.root / "tmp").iterdir() if p.name.startswith("put.")] == []
    assert list((store.root / "blobs" / "sha256").iterdir()) == []


def test_an_atomic_write_on_a_full_disk_names_its_target_and_leaves_no_temp(small_disk: Path) -> None:
    target = small_disk / "receipts" / "x.receipt.json"
    with pytest.raises(OSError) as raised:
        write_atomic(target, os.urandom(2 << 20))
    assert raised.value.filename == str(target)
    assert list(target.parent.iterdir()) == []
