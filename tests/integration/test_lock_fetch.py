"""Lock resolution against the real registry and real git repositories; fetch
verification; two concurrent builds on one store."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sparkimg.engine.protocol import Engine
from sparkimg.errors import ResolveError
from sparkimg.formats.lockfile import GitPin
from sparkimg.lock import resolve as lock_mod
from sparkimg.spec import load_spec
from sparkimg.store.content import Store

from .helpers import WHEEL, cached, cli, git, spec_text

Project = Callable[..., Path]


def _docker(engine: Engine, *args: str) -> str:
    return subprocess.run([engine.client, *args], capture_output=True, text=True, check=True).stdout.strip()


def _push_variant(engine: Engine, base: str, tag: str, marker: str, tmp: Path) -> tuple[str, str]:
    """Build a one-label image FROM the demo base, push it as ``tag``; return (manifest digest, image ID)."""
    context = tmp / f"ctx-{marker}"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {base}\nLABEL sparkimg.test.marker={marker}\n")
    _docker(engine, "build", "-q", "-t", tag, str(context))
    _docker(engine, "push", tag)
    repo_digests = json.loads(_docker(engine, "image", "inspect", "--format", "{{json .RepoDigests}}", tag))
    repository = tag.rsplit(":", 1)[0]
    digest = next(d.split("@", 1)[1] for d in repo_digests if d.startswith(repository + "@"))
    return digest, _docker(engine, "image", "inspect", "--format", "{{.Id}}", tag)


def test_lock_resolves_registry_tag_and_keeps_the_pin(
    project: Project, store: Store, engine: Engine, demo_base: str, tmp_path: Path
) -> None:
    tag = f"127.0.0.1:5000/sparkimg-test/lockme:{os.getpid()}"
    first_digest, first_id = _push_variant(engine, demo_base, tag, "one", tmp_path)
    path = project(spec_text(tag, WHEEL))
    spec = load_spec(path)
    data = lock_mod.resolve(spec, store)
    assert data.base.manifest_digest == first_digest
    assert data.base.config_digest == first_id
    lock = lock_mod.write(spec, data)

    second_digest, _ = _push_variant(engine, demo_base, tag, "two", tmp_path)
    assert second_digest != first_digest
    kept = lock_mod.resolve(spec, store, previous=lock)
    assert kept.base.manifest_digest == first_digest  # the tag moved; the lock did not
    moved = lock_mod.resolve(spec, store, previous=lock, update=["base"])
    assert moved.base.manifest_digest == second_digest


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "setup.txt").write_text("one\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    git(repo, "tag", "v1")
    git(repo, "checkout", "-qb", "dsv41-feat")
    (repo / "setup.txt").write_text("two\n")
    git(repo, "commit", "-qam", "two")
    git(repo, "checkout", "-q", "main")
    return repo


def _git_spec(base: str, url: Path, pin: str) -> str:
    return spec_text(base, WHEEL, extra="").replace(
        "  kernel:\n    path: kernel\n", f"  kernel:\n    path: kernel\n  up:\n    git: {url}\n{pin}")


def test_lock_resolves_git_branch_tag_and_short_sha(
    project: Project, store: Store, engine: Engine, demo_base: str, upstream: Path
) -> None:
    feature = git(upstream, "rev-parse", "dsv41-feat")
    tagged = git(upstream, "rev-parse", "v1^{commit}")
    for i, (pin, expected) in enumerate([("    ref: dsv41-feat\n", feature), ("    ref: v1\n", tagged),
                                         (f"    ref: dsv41-feat\n    commit: \"{feature[:8]}\"\n", feature)]):
        spec = load_spec(project(_git_spec(demo_base, upstream, pin), f"git{i}.yaml"))
        entry = lock_mod.resolve(spec, store).sources["up"]
        assert isinstance(entry, GitPin) and entry.commit == expected and len(entry.commit) == 40
        assert entry.tree == git(upstream, "rev-parse", f"{expected}^{{tree}}")
    spec = load_spec(project(_git_spec(demo_base, upstream, "    ref: no-such-branch\n"), "bad.yaml"))
    with pytest.raises(ResolveError) as info:
        lock_mod.resolve(spec, store)
    assert "no branch or tag named 'no-such-branch'" in info.value.message
    spec = load_spec(project(_git_spec(demo_base, upstream, "    commit: deadbeef\n"), "bad2.yaml"))
    with pytest.raises(ResolveError):
        lock_mod.resolve(spec, store)


def test_fetch_archives_the_pinned_commit_even_after_the_branch_moves(
    project: Project, store: Store, engine: Engine, demo_base: str, upstream: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project(_git_spec(demo_base, upstream, "    ref: dsv41-feat\n"))
    assert cli(capsys, store.root, "lock", str(path))[0] == 0
    pinned = json.loads(lock_mod.lock_path(load_spec(path)).read_text())["sources"]["up"]["commit"]
    git(upstream, "checkout", "-q", "dsv41-feat")
    (upstream / "setup.txt").write_text("three\n")
    git(upstream, "commit", "-qam", "three")
    code, data, _ = cli(capsys, store.root, "fetch", str(path), "--json")
    assert code == 0
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(store.blob(data["blobs"]["up"]).read_bytes())) as archive:
        member = archive.extractfile("setup.txt")
        assert member is not None and member.read() == b"two\n"
    assert store.read_record("git", pinned) is not None


@pytest.fixture
def evil_server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def do_GET(self) -> None:
            body = b"not the wheel you pinned"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_fetch_rejects_content_that_does_not_match_the_lock(
    project: Project, store: Store, engine: Engine, demo_base: str, evil_server: str,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPARKIMG_DOWNLOAD_CACHE")  # the download itself is what is tested
    text = spec_text(demo_base, WHEEL).replace(
        "  kernel:\n    path: kernel\n",
        "  kernel:\n    path: kernel\n  six:\n    pypi: six\n    version: \"1.16.0\"\n")
    path = project(text)
    assert cli(capsys, store.root, "lock", str(path))[0] == 0
    lock_file = lock_mod.lock_path(load_spec(path))
    data = json.loads(lock_file.read_text())
    pinned = data["sources"]["six"]["sha256"]
    data["sources"]["six"]["url"] = f"{evil_server}/six-1.16.0-py2.py3-none-any.whl"  # the index now serves other bytes
    lock_file.write_text(json.dumps(data))
    code, _, err = cli(capsys, store.root, "fetch", str(path))
    assert code == 1
    assert "sources.six: sha256 mismatch" in err and pinned in err
    bad = hashlib.sha256(b"not the wheel you pinned").hexdigest()
    assert not store.has(bad) and not store.has(pinned)


def test_two_concurrent_builds_share_one_store(project: Project, store: Store, engine: Engine, demo_base: str) -> None:
    path = project(spec_text(demo_base, "sleep 2; " + WHEEL))
    spec = load_spec(path)
    lock_mod.write(spec, lock_mod.resolve(spec, store))
    command = [sys.executable, "-m", "sparkimg.cli", "--store", str(store.root),
               "build", str(path), "--json", "--quiet"]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [r[1] for r in results]
    images = {json.loads(out)["image"]["id"] for out, _ in results}
    assert len(images) == 1
    # Single flight per key: one build compiled the layer, the other waited and reused it.
    assert sorted(cached(json.loads(out))["kernel"] for out, _ in results) == [False, True]
    for blob in (store.root / "blobs" / "sha256").iterdir():
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
    assert list((store.root / "tmp").glob("put.*")) == []
    engine.remove_image(json.loads(results[0][0])["image"]["reference"])


def test_a_path_source_that_links_out_of_its_folder_is_refused(
    tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from .helpers import cli, copy_demo

    spec = copy_demo(tmp_path)
    kernel = spec.parents[1] / "build" / "demo-kernel"
    (kernel / "host-secret").symlink_to("/etc/hostname")
    code, _, err = cli(capsys, tmp_path / "store", "lock", str(spec))
    assert code == 2 and f"{kernel / 'host-secret'}: a link to /etc/hostname, outside the source folder" in err
    (kernel / "host-secret").unlink()
    (kernel / "loop").symlink_to("loop")  # a link to itself: refused, not a RuntimeError
    code, _, err = cli(capsys, tmp_path / "store", "lock", str(spec))
    assert code == 2 and "loop" in err and "Traceback" not in err
    (kernel / "loop").unlink()
    (kernel / "inside").symlink_to("build_wheel.py")  # a link that stays in the folder is read as its target
    assert cli(capsys, tmp_path / "store", "lock", str(spec))[0] == 0
