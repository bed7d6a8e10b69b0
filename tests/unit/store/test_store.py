"""The store under concurrency, kill -9 and bad content."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sparkimg.errors import HashMismatchError
from sparkimg.store.content import Store, sha256_file


def test_put_and_verify(store: Store) -> None:
    digest = store.put_bytes(b"hello")
    assert digest == hashlib.sha256(b"hello").hexdigest()
    assert store.verify(digest)
    assert oct(store.blob(digest).stat().st_mode & 0o777) == "0o444"


def test_mismatch_admits_nothing(store: Store) -> None:
    wanted = hashlib.sha256(b"good").hexdigest()
    with pytest.raises(HashMismatchError) as info:
        store.put_bytes(b"evil", expected=wanted, what="sources.six")
    assert "sources.six" in info.value.message and wanted in info.value.message
    assert not store.has(wanted)
    assert not store.has(hashlib.sha256(b"evil").hexdigest())
    assert list((store.root / "tmp").glob("put.*")) == []


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from sparkimg.store.content import Store
    store = Store(Path(sys.argv[1]))
    mode = sys.argv[2]
    def chunks():
        for i in range(64):
            yield bytes([i % 251]) * (1 << 18)
            if mode == "hang" and i == 8:
                print("writing", flush=True)
                time.sleep(600)
    print(store.put_stream(chunks()), flush=True)
""")


def _writer(root: Path, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    return subprocess.Popen([sys.executable, "-c", WRITER, str(root), mode], stdout=subprocess.PIPE, text=True,
                            env=env)


def test_two_concurrent_writers_agree(store: Store) -> None:
    procs = [_writer(store.root, "fast") for _ in range(2)]
    digests = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert digests[0] == digests[1]
    assert sha256_file(store.blob(digests[0])) == digests[0]


def test_kill_9_leaves_no_entry(store: Store) -> None:
    proc = _writer(store.root, "hang")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert list((store.root / "blobs" / "sha256").iterdir()) == []
    leftovers = list((store.root / "tmp").glob("put.*"))
    assert len(leftovers) == 1
    old = time.time() - 3600
    os.utime(leftovers[0], (old, old))
    assert Store(store.root).sweep() == 0  # the constructor already swept it
    assert list((store.root / "tmp").glob("put.*")) == []
    again = _writer(store.root, "fast")
    digest = again.communicate(timeout=120)[0].strip()
    assert store.verify(digest)


def test_sweep_spares_a_live_writer(store: Store) -> None:
    proc = _writer(store.root, "hang")
    assert proc.stdout is not None
    proc.stdout.readline()
    try:
        tmp = next((store.root / "tmp").glob("put.*"))
        old = time.time() - 3600
        os.utime(tmp, (old, old))
        assert store.sweep() == 0
        assert tmp.exists()
    finally:
        proc.kill()
        proc.wait()


def test_a_relative_store_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Work folders under the store are bind-mounted; the engine takes only absolute paths."""
    monkeypatch.chdir(tmp_path)
    store = Store(Path("relative-store"))
    assert store.root == tmp_path / "relative-store" and store.temp_dir("x.").is_absolute()
