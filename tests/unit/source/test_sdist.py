"""PyPI sdists as compile sources: resolved from the index's JSON simple API, pinned with their
dist in the lock (older locks read as wheels), fetched by sha256, unpacked safely without their
top folder, patched by the layer's source_patches, and covered by the compile layer's key."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import socketserver
import subprocess
import sys
import tarfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sparkimg._internal.net import pypi as _pypi
from sparkimg.compile.container import prepare_source
from sparkimg.errors import BuildError, LockError, ResolveError
from sparkimg.formats.lockfile import LockFile, PypiPin
from sparkimg.plan.keys import key_of, layer_inputs
from sparkimg.source import patching as _srcpatch
from sparkimg.source import sdist as _sdist
from sparkimg.source.retrieve import fetch_source
from sparkimg.spec import CompileLayer, Spec, load_spec
from sparkimg.store import trees
from tests.formats import loaded, lock_file, lock_json, spec_header
from tests.support import REPO

SPEC = spec_header("sdist") + """\
sources:
  kernel:
    pypi: demo-kernel
    version: "1.0"
    dist: sdist
layers:
  - name: kernel
    kind: compile
    source: kernel
    command: python3 /src/build_wheel.py --out /out
    source_patches: [fix.patch]
"""
PATCH = """\
--- a/hello.txt
+++ b/hello.txt
@@ -1 +1 @@
-hello
+hello, patched
"""


def make_tar(entries: list[tarfile.TarInfo | tuple[str, bytes]], *, gz: bool = True) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if gz else "w") as archive:
        for item in entries:
            if isinstance(item, tarfile.TarInfo):
                archive.addfile(item)
            else:
                info = tarfile.TarInfo(item[0])
                info.size = len(item[1])
                archive.addfile(info, io.BytesIO(item[1]))
    return buffer.getvalue()


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def good_sdist() -> bytes:
    return make_tar([("demo-kernel-1.0/hello.txt", b"hello\n"), ("demo-kernel-1.0/sub/x.py", b"x = 1\n"),
                     link("demo-kernel-1.0/sub/alias.py", "x.py"),
                     link("demo-kernel-1.0/same.txt", "demo-kernel-1.0/hello.txt", tarfile.LNKTYPE)])


def test_sdist_unpacks_without_its_top_folder(tmp_path: Path) -> None:
    blob = tmp_path / "s.tar.gz"
    blob.write_bytes(good_sdist())
    _sdist.unpack(blob, tmp_path / "src", strip=True, what="sources.kernel")
    assert (tmp_path / "src" / "hello.txt").read_text() == "hello\n"
    assert os.readlink(tmp_path / "src" / "sub" / "alias.py") == "x.py"
    assert (tmp_path / "src" / "same.txt").read_text() == "hello\n"
    found = _sdist.read_members(blob, {"hello.txt", "sub/x.py", "absent"}, strip=True, what="x")
    assert found == {"hello.txt": b"hello\n", "sub/x.py": b"x = 1\n"}


HOSTILE: dict[str, list[tarfile.TarInfo | tuple[str, bytes]]] = {
    "dotdot": [("demo-1.0/ok", b""), ("demo-1.0/../../evil", b"x")],
    "absolute": [("/etc/evil", b"x")],
    "symlink-out": [("demo-1.0/ok", b""), link("demo-1.0/up", "../../etc/passwd")],
    "symlink-absolute": [("demo-1.0/ok", b""), link("demo-1.0/abs", "/etc/passwd")],
    "symlink-out-of-top": [("demo-1.0/ok", b""), link("demo-1.0/up", "../other")],
    "hardlink-out": [("demo-1.0/ok", b""), link("demo-1.0/h", "/etc/passwd", tarfile.LNKTYPE)],
    "two-tops": [("a-1.0/x", b""), ("b-1.0/y", b"")],
    "device": [("demo-1.0/ok", b""), link("demo-1.0/dev", "", tarfile.CHRTYPE)],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_sdist_is_refused_before_anything_is_written(tmp_path: Path, case: str) -> None:
    blob = tmp_path / "s.tar.gz"
    blob.write_bytes(make_tar(HOSTILE[case]))
    target = tmp_path / "src"
    target.mkdir()
    with pytest.raises(BuildError) as info:
        _sdist.unpack(blob, target, strip=True, what="sources.kernel (demo-1.0.tar.gz)")
    assert "sources.kernel" in str(info.value)
    assert list(target.iterdir()) == []
    assert not (tmp_path / "evil").exists()


def test_a_truncated_archive_is_a_build_error(tmp_path: Path) -> None:
    blob = tmp_path / "s.tar.gz"
    blob.write_bytes(good_sdist()[:60])
    with pytest.raises(BuildError, match="cannot unpack"):
        _sdist.unpack(blob, tmp_path / "src", strip=True, what="sources.kernel")


def test_patch_sections_and_hostile_targets() -> None:
    two = PATCH + "diff --git a/CMakeLists.txt b/CMakeLists.txt\nindex 1..2 100644\n" + PATCH.replace(
        "hello.txt", "CMakeLists.txt")
    parts = _srcpatch.sections(two, "p")
    assert [name for name, _ in parts] == ["hello.txt", "CMakeLists.txt"]
    assert parts[1][1].startswith("diff --git a/CMakeLists.txt")
    assert "diff --git" not in parts[0][1]
    for bad in ("a/../../etc/passwd", "/etc/passwd"):
        with pytest.raises(BuildError, match="not a path inside the source"):
            _srcpatch.sections(PATCH.replace("b/hello.txt", bad), "p")
    with pytest.raises(BuildError, match="not a unified diff"):
        _srcpatch.sections("hello\n", "p")


def test_a_patch_names_every_file_it_may_write() -> None:
    renamed = ("diff --git a/old.cu b/new.cu\nsimilarity index 90%\nrename from old.cu\nrename to new.cu\n"
               + PATCH.replace("a/hello.txt", "a/old.cu").replace("b/hello.txt", "b/new.cu"))
    created = "--- /dev/null\n+++ b/made.cu\n@@ -0,0 +1 @@\n+made\n"
    assert _srcpatch.touched((PATCH + renamed + created).encode(), "p") == ["hello.txt", "made.cu", "new.cu",
                                                                           "old.cu"]
    with pytest.raises(BuildError, match="not a path inside the source"):
        _srcpatch.touched(PATCH.replace("a/hello.txt", "a/../../etc/passwd").encode(), "p")


def test_a_patch_applies_or_fails_naming_itself(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("hello\n")
    _srcpatch.apply(tmp_path, PATCH.encode(), "fix.patch")
    assert (tmp_path / "hello.txt").read_text() == "hello, patched\n"
    with pytest.raises(BuildError, match=r"fix\.patch: does not apply"):
        _srcpatch.apply(tmp_path, PATCH.encode(), "fix.patch")


def test_lock_records_dist_and_old_locks_read_as_wheels() -> None:
    data = lock_json()
    assert "dist" not in data["sources"]["six"]  # a wheel's entry is as older locks wrote it
    assert LockFile.from_json(data, "x").sources["six"].dist == "wheel"  # type: ignore[union-attr]
    data["sources"]["six"].update(dist="sdist", filename="six-1.16.0.tar.gz")
    data["source_patches"] = {"patches/fix.patch": "7" * 64}
    model = LockFile.from_json(data, "x")
    assert model.sources["six"].dist == "sdist"  # type: ignore[union-attr]
    assert model.to_json() == data
    data["sources"]["six"]["filename"] = "six-1.16.0-py3-none-any.whl"
    with pytest.raises(LockError, match=r"filename must be a bare file name ending \.tar\.gz"):
        LockFile.from_json(data, "x")
    data["sources"]["six"].update(dist="egg")
    with pytest.raises(LockError, match="dist must be 'wheel' or 'sdist'"):
        LockFile.from_json(data, "x")


def test_a_pypi_pin_keeps_its_size_and_older_pins_have_none() -> None:
    data = lock_json()
    assert "size" not in data["sources"]["six"] and LockFile.from_json(data, "x").sources["six"].size is None  # type: ignore[union-attr]
    data["sources"]["six"]["size"] = 11053
    model = LockFile.from_json(data, "x")
    assert model.sources["six"].size == 11053 and model.to_json() == data  # type: ignore[union-attr]
    for bad in (-1, "11053", True, 1.5):
        data["sources"]["six"]["size"] = bad
        with pytest.raises(LockError, match="size must be a non-negative integer"):
            LockFile.from_json(data, "x")


def _served_sdist(project: Callable[..., Path], tmp_path: Path, data: bytes) -> tuple[Spec, PypiPin]:
    """The spec (its patch written) and the lock's pin of ``data`` as its sdist, served from a file."""
    path = project(SPEC)
    (path.parent / "fix.patch").write_text(PATCH)
    file = tmp_path / "demo_kernel-1.0.tar.gz"
    file.write_bytes(data)
    pinned = loaded(sdist_lock(hashlib.sha256(data).hexdigest())).sources["kernel"]
    assert isinstance(pinned, PypiPin)
    return load_spec(path), replace(pinned, url=file.as_uri(), size=len(data))


def test_a_download_longer_than_the_locked_size_is_cut_off_and_nothing_admitted(
        project: Callable[..., Path], store: object, tmp_path: Path) -> None:
    from sparkimg.errors import FetchError
    from sparkimg.store.content import Store

    assert isinstance(store, Store)
    data = good_sdist()
    spec, pinned = _served_sdist(project, tmp_path, data)
    with pytest.raises(FetchError, match=f"longer than the {len(data) - 1} bytes the lock records"):
        fetch_source(spec, "kernel", replace(pinned, size=len(data) - 1), store)
    assert not store.has(pinned.sha256)
    assert fetch_source(spec, "kernel", pinned, store) == pinned.sha256


def test_a_long_download_says_how_far_it_is(project: Callable[..., Path], store: object, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkimg import events
    from sparkimg.events import Collected, Kind
    from sparkimg.source import retrieve as fetch
    from sparkimg.store.content import Store

    assert isinstance(store, Store)
    monkeypatch.setattr(events, "PROGRESS_EVERY", 0.0)
    monkeypatch.setattr(fetch, "CHUNK", 1 << 20)
    data = bytes(range(256)) * (12 << 12)  # 12 MiB
    spec, pinned = _served_sdist(project, tmp_path, data)
    said = Collected()
    fetch_source(spec, "kernel", pinned, store, said)
    lines = [e.message for e in said.events]
    assert lines[0] == "download demo_kernel-1.0.tar.gz (12.0 MiB)"
    assert lines[1:3] == ["download demo_kernel-1.0.tar.gz: 1.0 MiB of 12.0 MiB",
                          "download demo_kernel-1.0.tar.gz: 2.0 MiB of 12.0 MiB"]
    assert {e.kind for e in said.events[1:]} == {Kind.PROGRESS}
    assert said.events[-1].figures == {"task": "download demo_kernel-1.0.tar.gz", "done": len(data),
                                       "total": len(data), "finished": True}


def sdist_lock(sha256: str = "4" * 64, patch: str = "") -> dict[str, object]:
    model = lock_file()
    pin = PypiPin({"pypi": "demo-kernel", "version": "1.0", "sha256": None, "filename": None, "dist": "sdist"},
                  "demo-kernel", "1.0", "demo_kernel-1.0.tar.gz", "https://files.example/d.tar.gz", sha256,
                  dist="sdist")
    model = replace(model, sources={"kernel": pin}, patches={},
                    source_patches={"fix.patch": patch} if patch else {})
    return model.to_json()


def test_compile_key_covers_the_sdist_and_its_patches(project: Callable[..., Path]) -> None:
    path = project(SPEC)
    (path.parent / "fix.patch").write_text(PATCH)
    spec = load_spec(path)

    def key(data: dict[str, object]) -> str:
        _, kind, inputs = layer_inputs(spec, loaded(data))[0]
        return key_of(kind, inputs)

    base = key(sdist_lock(patch="7" * 64))
    assert key(sdist_lock(patch="7" * 64)) == base
    assert key(sdist_lock("8" * 64, patch="7" * 64)) != base
    assert key(sdist_lock(patch="9" * 64)) != base


def test_a_wheel_layer_keeps_its_key_without_source_patches(project: Callable[..., Path]) -> None:
    """Specs with no source_patches keep the keys they had: nothing new enters their inputs."""
    spec = load_spec(project(SPEC.replace("    source_patches: [fix.patch]\n", "")))
    inputs = layer_inputs(spec, loaded(sdist_lock()))[0][2]
    assert not any(k.startswith("source_patch") for k in inputs)


class Index:
    """A PEP 691 index on loopback serving one project page."""

    def __init__(self, files: list[dict[str, object]]) -> None:
        body = json.dumps({"meta": {"api-version": "1.1"}, "name": "demo-kernel", "files": files}).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                ok = self.path == "/simple/demo-kernel/"
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
                self.send_header("Content-Length", str(len(body) if ok else 0))
                self.end_headers()
                if ok:
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = socketserver.TCPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[list[dict[str, object]]], Index]]:
    made: list[Index] = []

    def make(files: list[dict[str, object]]) -> Index:
        made.append(Index(files))
        monkeypatch.setenv("SPARKIMG_PYPI_INDEX", made[-1].url)
        return made[-1]

    yield make
    for server in made:
        server.server.shutdown()
        server.server.server_close()


def test_the_sdist_is_resolved_from_the_json_simple_api(index: Callable[[list[dict[str, object]]], Index]) -> None:
    served = index([
        {"filename": "demo_kernel-1.0-py3-none-any.whl", "url": "w.whl", "hashes": {"sha256": "1" * 64}},
        {"filename": "demo_kernel-0.9.tar.gz", "url": "old.tar.gz", "hashes": {"sha256": "2" * 64}},
        {"filename": "demo_kernel-1.0.tar.gz", "url": "../../files/d.tar.gz#sha256=x", "hashes": {"sha256": "3" * 64},
         "size": 4321},
    ])
    pin = _pypi.resolve_sdist("Demo_Kernel", "1.0")
    assert (pin.filename, pin.sha256, pin.size) == ("demo_kernel-1.0.tar.gz", "3" * 64, 4321)
    assert pin.url == served.url.replace("/simple/", "/files/d.tar.gz")
    with pytest.raises(ResolveError, match="no sdist"):
        _pypi.resolve_sdist("demo-kernel", "2.0")
    with pytest.raises(ResolveError, match="no project"):
        _pypi.resolve_sdist("absent", "1.0")


def test_a_yanked_sdist_is_not_chosen(index: Callable[[list[dict[str, object]]], Index]) -> None:
    index([{"filename": "demo-kernel-1.0.tar.gz", "url": "d.tar.gz", "hashes": {"sha256": "3" * 64},
            "yanked": "broken"}])
    with pytest.raises(ResolveError, match="no sdist"):
        _pypi.resolve_sdist("demo-kernel", "1.0")


def test_fetch_admits_the_sdist_by_sha256_and_compile_unpacks_and_patches_it(
        project: Callable[..., Path], store: object, tmp_path: Path) -> None:
    from sparkimg.store.content import Store

    assert isinstance(store, Store)
    path = project(SPEC)
    (path.parent / "fix.patch").write_text(PATCH)
    spec = load_spec(path)
    data = good_sdist()
    file = tmp_path / "demo_kernel-1.0.tar.gz"
    file.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    lock = loaded(sdist_lock(sha, patch=hashlib.sha256(PATCH.encode()).hexdigest()))
    pinned = lock.sources["kernel"]
    assert isinstance(pinned, PypiPin)
    pin = replace(pinned, url=file.as_uri())
    assert fetch_source(spec, "kernel", pin, store) == sha
    wrong = replace(pin, sha256="0" * 64)
    with pytest.raises(Exception, match="0" * 64):
        fetch_source(spec, "kernel", wrong, store)
    layer = spec.layers[0]
    assert isinstance(layer, CompileLayer)
    target = tmp_path / "src"
    target.mkdir()
    prepare_source(spec, lock, layer, store, sha, target)
    assert (target / "hello.txt").read_text() == "hello, patched\n"
    # The source is unpacked once into the store and linked; the patched file is the build's own.
    tree = trees.path(store, sha)
    assert (tree / "hello.txt").read_text() == "hello\n"
    unpatched = [p for p in tree.rglob("*") if p.is_file() and p.name != "hello.txt"]
    assert unpatched and all((target / p.relative_to(tree)).stat().st_ino == p.stat().st_ino for p in unpatched)
    assert (target / "hello.txt").stat().st_nlink == 1
    (path.parent / "fix.patch").write_text(PATCH + "\n")
    again = tmp_path / "again"
    again.mkdir()
    with pytest.raises(LockError, match=r"source patch fix\.patch differs from the lock"):
        prepare_source(spec, lock, layer, store, sha, again)


def test_check_refuses_a_wheel_layer_on_an_sdist_without_a_traceback(project: Callable[..., Path]) -> None:
    text = SPEC.replace("kind: compile", "kind: wheel").replace(
        "    command: python3 /src/build_wheel.py --out /out\n    source_patches: [fix.patch]\n", "")
    path = project(text)
    run = subprocess.run([sys.executable, "-m", "sparkimg.cli", "check", str(path)], capture_output=True, text=True,
                         check=False, cwd=REPO)
    assert run.returncode == 2, run.stderr
    assert "layers[0].source: a wheel layer installs a built wheel; 'kernel' is an sdist" in run.stderr
    assert "Traceback" not in run.stderr


def test_the_receipt_names_the_sdist_and_each_source_patch(project: Callable[..., Path]) -> None:
    from sparkimg.receipts.compose import dependencies

    path = project(SPEC)
    (path.parent / "fix.patch").write_text(PATCH)
    spec = load_spec(path)
    deps = {d.name: d for d in dependencies(spec, loaded(sdist_lock(patch="7" * 64)))}
    assert deps["source:kernel"].notes["dist"] == "sdist"
    assert deps["source:kernel"].notes["filename"] == "demo_kernel-1.0.tar.gz"
    patch = deps["source-patch:fix.patch"]
    assert patch.digests == {"sha256": "7" * 64} and patch.notes["layers"] == ["kernel"]
    base = {d.name: d for d in dependencies(spec, loaded(lock_json()))}
    assert "dist" not in base["source:six"].notes  # a wheel's dependency is as before


def _hostile(path: Path, entries: list[tuple[str, str, str]]) -> Path:
    """A .tar.gz of (name, kind, link target or content) entries, in order."""
    with tarfile.open(path, "w:gz") as archive:
        for name, kind, value in entries:
            info = tarfile.TarInfo(name)
            if kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, value
                archive.addfile(info)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                data = value.encode()
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize(("entries", "said"), [
    # A chain of links, each inside by itself: a/b -> .., then c -> a/b/.. (lexically 'a').
    ([("p-1/a", "dir", ""), ("p-1/a/b", "sym", ".."), ("p-1/c", "sym", "a/b/.."), ("p-1/c/x", "file", "x")],
     "link"),
    # A file written through a link of the archive.
    ([("p-1/d", "dir", ""), ("p-1/l", "sym", "d"), ("p-1/l/x", "file", "x")], "through a link"),
    # A later link that an earlier link's target passes through (order must not matter).
    ([("p-1/y", "sym", "a/z/../.."), ("p-1/a", "dir", ""), ("p-1/a/z", "sym", "../q")], "link"),
    # One path twice: the preflight would read one copy and the build get the other.
    ([("p-1/CMakeLists.txt", "file", "first"), ("p-1/CMakeLists.txt", "file", "second")], "twice"),
])
def test_hostile_archives_are_refused_before_anything_is_written(
    tmp_path: Path, entries: list[tuple[str, str, str]], said: str
) -> None:
    blob = _hostile(tmp_path / "p-1.tar.gz", entries)
    with pytest.raises(BuildError, match=said):
        _sdist.unpack(blob, tmp_path / "dest", strip=True, what="t")
    assert not (tmp_path / "dest").exists() or not any((tmp_path / "dest").iterdir())


def test_a_link_inside_the_archive_to_a_file_of_it_is_kept_and_read_through(tmp_path: Path) -> None:
    blob = _hostile(tmp_path / "p-1.tar.gz", [("p-1/real.txt", "file", "cmake"), ("p-1/cmake", "dir", ""),
                                              ("p-1/cmake/utils.cmake", "sym", "../real.txt")])
    _sdist.unpack(blob, tmp_path / "dest", strip=True, what="t")
    assert (tmp_path / "dest" / "cmake" / "utils.cmake").read_text() == "cmake"
    assert _sdist.read_members(blob, {"cmake/utils.cmake"}, strip=True, what="t") == {"cmake/utils.cmake": b"cmake"}


@pytest.mark.parametrize(("text", "said"), [
    ("diff --git a/lnk b/lnk\nnew file mode 120000\n--- /dev/null\n+++ b/lnk\n@@ -0,0 +1 @@\n+../outside\n",
     "symbolic link"),
    ("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n*** a/../outside/y\n--- b/../outside/y\n***************\n",
     "not part of a unified diff"),
])
def test_a_source_patch_is_read_fail_closed(text: str, said: str) -> None:
    """``patch`` reads other formats and makes links; sparkimg passes it only plain unified diffs."""
    with pytest.raises(BuildError, match=said):
        _srcpatch.sections(text, "p")
