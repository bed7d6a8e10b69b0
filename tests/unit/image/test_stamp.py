"""The no-op stamp holds only while every file it lists is the same file, every link leads where
it led, the options, the environment and the engine socket are the same, and the engine still has
the image by the same ID and key; a file changed as the build started is never stamped."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkimg.engine.socket_api import image_path
from sparkimg.image import stamp
from sparkimg.plan.keys import KEY_LABEL
from tests.support import FakeEngineApi

IMAGE: dict[str, Any] = {"Id": "sha256:" + "a" * 64, "Config": {"Labels": {KEY_LABEL: "k" * 64}}}
REF = "sparkimg/x:kkkk"


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A fake engine on a socket the docker client would use (DOCKER_HOST), and the image entry."""
    sock = tmp_path / "engine.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.delenv("SPARKIMG_KEY", raising=False)
    api = FakeEngineApi(sock, IMAGE, name=REF)
    yield {"reference": REF, "id": str(IMAGE["Id"]), "key": "k" * 64, "socket": str(sock), "client": "/usr/bin/docker",
           "path": image_path(REF)}
    api.close()


def _context(root: Path) -> dict[str, Any]:
    return stamp.context(root, key=None, receipt=None, record_host=False)


def _made(root: Path, image: dict[str, str]) -> stamp.Stamp:
    (root / "real").mkdir(exist_ok=True)
    (root / "real" / "a.patch").write_text("x")
    if not (root / "tree").exists():
        (root / "tree").symlink_to("real")
    (root / "spec.yaml").write_text("name: x\n")
    (root / "receipt.json").write_text("{}")
    # As keep_noop: the docker client's config is among the files (which engine the client talks to).
    files = [root / "spec.yaml", *stamp.tree(root / "tree"), root / "gone", root / "docker-config" / "config.json"]
    later = time.time_ns() + 10 * stamp.RACY_NS  # a build that started well after the files were written
    made = stamp.Stamp.of(_context(root), files, [root / "receipt.json"], [root / "tree"], image,
                          {"image": {"id": image["id"]}}, [], started_ns=later)
    assert made is not None
    return made


def test_a_stamp_holds_while_nothing_changed_and_survives_its_file(tmp_path: Path, engine: dict[str, str]) -> None:
    made = _made(tmp_path, engine)
    assert made.holds(_context(tmp_path))
    where = Path(stamp.location(tmp_path / "store", tmp_path / "spec.yaml"))
    stamp.write(where, made)
    again = stamp.read(where)
    assert again == made and again.holds(_context(tmp_path))
    where.write_text("{not json")
    assert stamp.read(where) is None


@pytest.mark.parametrize("change", ["touch", "add", "appear", "relink", "option", "sbom format", "environment",
                                    "password", "context"])
def test_any_change_breaks_the_stamp(tmp_path: Path, engine: dict[str, str], change: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    made = _made(tmp_path, engine)
    ctx = _context(tmp_path)
    if change == "touch":  # the same bytes written again: the ctime moves
        (tmp_path / "real" / "a.patch").write_text("x")
    elif change == "add":
        (tmp_path / "real" / "b.patch").write_text("y")
    elif change == "appear":
        (tmp_path / "gone").write_text("")
    elif change == "relink":  # the folder the spec names now leads elsewhere
        (tmp_path / "other").mkdir()
        (tmp_path / "tree").unlink()
        (tmp_path / "tree").symlink_to("other")
    elif change == "option":
        ctx = stamp.context(tmp_path, key=None, receipt=tmp_path / "r.json", record_host=False)
    elif change == "sbom format":  # `build --sbom-format cyclonedx` signs another SBOM than a plain build
        ctx = stamp.context(tmp_path, key=None, receipt=None, record_host=False, sbom_format="cyclonedx")
    elif change == "environment":
        monkeypatch.setenv("SPARKIMG_KEY", str(tmp_path / "other.key"))
        ctx = _context(tmp_path)
    elif change == "password":
        monkeypatch.setenv("SPARKIMG_KEY_PASSWORD", "s3cret")
        ctx = _context(tmp_path)
        assert "s3cret" not in str(ctx)
    else:  # another docker context: the client would talk to another engine
        (tmp_path / "docker-config").mkdir()
        (tmp_path / "docker-config" / "config.json").write_text('{"currentContext": "node2"}')
    assert not made.holds(ctx)


def test_a_file_changed_as_the_build_started_is_never_stamped(tmp_path: Path, engine: dict[str, str]) -> None:
    (tmp_path / "spec.yaml").write_text("name: x\n")
    assert stamp.Stamp.of(_context(tmp_path), [tmp_path / "spec.yaml"], [], [], engine, {}, [],
                          started_ns=time.time_ns()) is None


def test_what_the_build_wrote_itself_is_stamped_however_recent(tmp_path: Path, engine: dict[str, str]) -> None:
    """The receipt and the store's records are the build's own output, written whole by rename: a
    build that built something stamps them as it left them, so its first no-op is answered too."""
    (tmp_path / "spec.yaml").write_text("name: x\n")
    started = time.time_ns() + 10 * stamp.RACY_NS  # the spec was read well before
    (tmp_path / "receipt.json").write_text("{}")
    made = stamp.Stamp.of(_context(tmp_path), [tmp_path / "spec.yaml"], [tmp_path / "receipt.json"], [], engine, {},
                          [], started_ns=started)
    assert made is not None and made.holds(_context(tmp_path))
    (tmp_path / "receipt.json").write_text("{}")  # written again, the same bytes: the stamp no longer holds
    assert not made.holds(_context(tmp_path))


def test_an_image_gone_or_retagged_breaks_the_stamp(tmp_path: Path, engine: dict[str, str]) -> None:
    made = _made(tmp_path, {**engine, "reference": "sparkimg/x:other", "path": image_path("sparkimg/x:other")})
    assert not made.holds(_context(tmp_path))  # the engine has no such tag
    other = _made(tmp_path, {**engine, "id": "sha256:" + "b" * 64})
    assert not other.holds(_context(tmp_path))  # the tag now names another image


def test_the_stamp_reads_the_key_label_the_build_writes() -> None:
    assert stamp.KEY_LABEL == KEY_LABEL  # the key variable is shared by construction (_locations.KEY_ENV)


def test_the_no_op_answer_finds_the_store_the_build_would(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkimg._internal.locations import default_store, default_store_text

    for env in ({}, {"XDG_CACHE_HOME": "/x/cache"}, {"SPARKIMG_STORE": "/s"}):
        for name in ("SPARKIMG_STORE", "XDG_CACHE_HOME"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        assert str(default_store()) == default_store_text()


def test_the_stamp_covers_sparkimg_itself() -> None:
    own = stamp.own_code()
    assert any(p.name == "stamp.py" for p in own) and all(p.suffix == ".py" and p.exists() for p in own)
    assert os.path.commonpath(own) == str(Path(stamp.__file__).resolve().parents[1])


def test_a_stamp_that_cannot_be_checked_sends_the_build_the_whole_way(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``api.noop_build`` is the only place the fast path's failures are swallowed: whatever goes
    wrong reading or checking a stamp (here a damaged file, then a reader that raises), the answer
    is "build", never an error and never a wrong "up to date"."""
    from sparkimg import api
    from sparkimg.image import stamp as stamp_mod

    spec = tmp_path / "spec.yaml"
    spec.write_text("schema: sparkimg/v1\n")
    where = Path(stamp_mod.location(tmp_path / "store", spec))
    where.parent.mkdir(parents=True)
    where.write_bytes(b"\xff{not json")
    assert api.noop_build(spec, store=tmp_path / "store") is None

    def broken(path: Path) -> None:
        raise RuntimeError("a stamp an older sparkimg wrote")

    monkeypatch.setattr(stamp_mod, "read", broken)
    assert api.noop_build(spec, store=tmp_path / "store") is None


def test_an_engine_answer_in_another_shape_sends_the_build_the_whole_way(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The stamp reads the image ID where moby writes it (first); an engine that answers otherwise
    gets a full build, never a wrong "up to date"."""
    sock = tmp_path / "other.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    api = FakeEngineApi(sock, {"RepoTags": [REF], "Id": IMAGE["Id"]}, name=REF)
    try:
        made = _made(tmp_path, {"reference": REF, "id": str(IMAGE["Id"]), "key": "k" * 64, "socket": str(sock),
                                "client": "/usr/bin/docker", "path": image_path(REF)})
        assert not made.holds(_context(tmp_path))
    finally:
        api.close()
