"""The download cache stores share: a file downloaded for one store is admitted into the next
without a download, and what the cache holds is an input only when its bytes are its name."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from sparkimg.events import Event
from sparkimg.formats.lockfile import PypiPin
from sparkimg.source.retrieve import fetch_source
from sparkimg.store.content import Store

WHEEL = b"PK pretend wheel bytes " * 1000


@pytest.fixture
def served(tmp_path: Path) -> Path:
    """The index: a file:// location the download reads (removed to prove no download happened)."""
    path = tmp_path / "index" / "demo-1.0-py3-none-any.whl"
    path.parent.mkdir()
    path.write_bytes(WHEEL)
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "downloads"
    monkeypatch.setenv("SPARKIMG_DOWNLOAD_CACHE", str(folder))
    return folder


def pin(path: Path, data: bytes = WHEEL) -> PypiPin:
    return PypiPin({}, "demo", "1.0", path.name, path.as_uri(), hashlib.sha256(data).hexdigest(), size=len(data))


def fetch(store: Store, entry: PypiPin) -> list[str]:
    said: list[Event] = []
    fetch_source(None, "demo", entry, store, said.append)  # type: ignore[arg-type]
    return [event.message for event in said]


def test_a_second_store_takes_the_file_from_the_cache_without_downloading(
        tmp_path: Path, served: Path, cache: Path) -> None:
    entry = pin(served)
    first = Store(tmp_path / "one")
    assert fetch(first, entry)[0].startswith("download demo-1.0")
    assert (cache / entry.sha256).read_bytes() == WHEEL
    assert os.stat(cache / entry.sha256).st_ino == os.stat(first.blob(entry.sha256)).st_ino  # a link, no copy
    served.unlink()  # no index any more
    second = Store(tmp_path / "two")
    assert fetch(second, entry) == ["demo-1.0-py3-none-any.whl: from the shared download cache"]
    assert second.blob(entry.sha256).read_bytes() == WHEEL
    assert os.stat(second.blob(entry.sha256)).st_ino == os.stat(cache / entry.sha256).st_ino  # one copy on disk
    assert os.stat(second.blob(entry.sha256)).st_mode & 0o777 == 0o444  # read-only, as every blob


@pytest.mark.parametrize("damage", ["flipped", "cut", "foreign"])
def test_an_entry_that_is_not_its_name_is_a_miss_removed_and_downloaded_again(
        tmp_path: Path, served: Path, cache: Path, damage: str) -> None:
    entry = pin(served)
    cache.mkdir()
    bad = {"flipped": b"Q" + WHEEL[1:], "cut": WHEEL[:100], "foreign": b"another file"}[damage]
    (cache / entry.sha256).write_bytes(bad)
    store = Store(tmp_path / "store")
    assert fetch(store, entry)[0].startswith("download demo-1.0")
    assert store.blob(entry.sha256).read_bytes() == WHEEL
    assert (cache / entry.sha256).read_bytes() == WHEEL  # the download replaced it
    assert not store.has(hashlib.sha256(bad).hexdigest())


def test_without_the_variable_nothing_is_shared(tmp_path: Path, served: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARKIMG_DOWNLOAD_CACHE", raising=False)
    entry = pin(served)
    fetch(Store(tmp_path / "one"), entry)
    served.unlink()
    with pytest.raises(Exception, match="No such file"):
        fetch(Store(tmp_path / "two"), entry)


def test_a_cache_that_cannot_be_written_warns_and_the_download_stands(
        tmp_path: Path, served: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("SPARKIMG_DOWNLOAD_CACHE", str(blocker / "downloads"))
    entry = pin(served)
    store = Store(tmp_path / "store")
    said = fetch(store, entry)
    assert store.blob(entry.sha256).read_bytes() == WHEEL
    assert any("SPARKIMG_DOWNLOAD_CACHE=" in line and "cannot keep" in line for line in said), said


def test_doctor_says_where_the_shared_downloads_are_and_what_they_hold(
        tmp_path: Path, served: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkimg.doctor.checks import _downloads

    fetch(Store(tmp_path / "store"), pin(served))
    said = _downloads()
    assert said["ok"] and f"{cache}: 1 file(s)" in said["detail"]
    monkeypatch.delenv("SPARKIMG_DOWNLOAD_CACHE")
    assert "set SPARKIMG_DOWNLOAD_CACHE=DIR" in _downloads()["detail"]
