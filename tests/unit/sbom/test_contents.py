"""Reading what an image holds from its layers: the stacking rules (whiteouts, opaque folders)
and the two kinds of record read (dpkg's status, Python distribution metadata)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from sparkimg.sbom.contents import LayerReading, debs, read, read_layer_file

STATUS = b"""Package: bash
Status: install ok installed
Architecture: arm64
Version: 5.2.15-2+b7

Package: gone
Status: deinstall ok config-files
Architecture: arm64
Version: 1.0

Package: libc6
Status: install ok installed
Architecture: arm64
Source: glibc (2.36-9)
Version: 2.36-9+deb12u9
Description: GNU C Library
 continued: not a field
"""


def _layer(path: Path, files: dict[str, bytes | None]) -> Path:
    """A layer tar: name -> bytes (a file) or None (an empty file, e.g. a whiteout)."""
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data or b"")
            tar.addfile(info, io.BytesIO(data or b""))
    return path


def _metadata(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nA long description.\n".encode()


SITE = "usr/local/lib/python3.11/dist-packages"


def test_installed_packages_only_with_their_source() -> None:
    found = debs(STATUS)
    assert [(p.name, p.version, p.architecture, p.source) for p in found] == [
        ("bash", "5.2.15-2+b7", "arm64", None), ("libc6", "2.36-9+deb12u9", "arm64", "glibc")]


def test_layers_stack_with_whiteouts_and_opaque_folders(tmp_path: Path) -> None:
    base = _layer(tmp_path / "0.tar", {
        "var/lib/dpkg/status": STATUS,
        f"{SITE}/old-1.0.dist-info/METADATA": _metadata("old", "1.0"),
        f"{SITE}/kept-2.0.dist-info/METADATA": _metadata("kept", "2.0"),
        "usr/lib/python3/dist-packages/legacy-0.1.egg-info": _metadata("legacy", "0.1"),
        "usr/lib/python3/dist-packages/tool-3.egg-info/PKG-INFO": _metadata("tool", "3"),
        "opt/venv/lib/python3.11/site-packages/inside-1.dist-info/METADATA": _metadata("inside", "1"),
        "srv/notes/METADATA": _metadata("not-a-dist", "9"),
    })
    upper = _layer(tmp_path / "1.tar", {
        f"./{SITE}/.wh.old-1.0.dist-info": None,  # replaced by a newer version in the same layer
        f"{SITE}/old-1.1.dist-info/METADATA": _metadata("old", "1.1"),
        "opt/venv/lib/python3.11/site-packages/.wh..wh..opq": None,  # the venv's packages all gone
        "lib/apk/db/installed": b"P:busybox\n",
    })
    contents = read([read_layer_file(base), read_layer_file(upper)])
    assert [(d.name, d.version) for d in contents.python] == [
        ("kept", "2.0"), ("legacy", "0.1"), ("old", "1.1"), ("tool", "3")]
    legacy = [d.path for d in contents.python if d.name == "legacy"]
    assert legacy == ["usr/lib/python3/dist-packages/legacy-0.1.egg-info"]
    assert [p.name for p in contents.debs] == ["bash", "libc6"]
    assert contents.unread == ["apk (lib/apk/db/installed)"]  # noticed, not guessed at


def test_a_whiteout_of_the_status_file_leaves_no_packages(tmp_path: Path) -> None:
    base = _layer(tmp_path / "0.tar", {"var/lib/dpkg/status": STATUS})
    upper = _layer(tmp_path / "1.tar", {"var/lib/dpkg/.wh.status": None})
    assert read([read_layer_file(base), read_layer_file(upper)]).debs == []


def test_a_reading_kept_as_json_reads_back_the_same(tmp_path: Path) -> None:
    reading = read_layer_file(_layer(tmp_path / "0.tar", {
        "var/lib/dpkg/status": STATUS, f"{SITE}/six-1.16.0.dist-info/METADATA": _metadata("six", "1.16.0"),
        f"{SITE}/.wh.old-1.dist-info": None}))
    again = LayerReading.from_json(json.loads(json.dumps(reading.to_json())))
    assert again is not None and read([again]) == read([reading])
    assert [d.name for d in read([again]).python] == ["six"]
    assert LayerReading.from_json({"removed": "x", "added": {}}) is None  # not a reading: read the layer again
    assert LayerReading.from_json(None) is None
