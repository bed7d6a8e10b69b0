"""The no-op stamp holds only while every file it lists is the same file, the options and the
environment are the same, and the engine still has the image by the same ID and key."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sparkimg.build import stamp
from sparkimg.plan import KEY_LABEL
from tests.support import FakeEngineApi

IMAGE: dict[str, Any] = {"Id": "sha256:" + "a" * 64, "Config": {"Labels": {KEY_LABEL: "k" * 64}}}
REF = "sparkimg/x:kkkk"
Stamped = tuple[stamp.Stamp, Path, FakeEngineApi]


@pytest.fixture
def stamped(tmp_path: Path) -> Stamped:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "a.patch").write_text("x")
    (tmp_path / "spec.yaml").write_text("name: x\n")
    api = FakeEngineApi(tmp_path / "engine.sock", IMAGE, name="sparkimg/x:kkkk")
    files = [tmp_path / "spec.yaml", *stamp.tree(tmp_path / "tree"), tmp_path / "gone"]
    image = {"reference": REF, "id": str(IMAGE["Id"]), "key": "k" * 64, "socket": str(tmp_path / "engine.sock")}
    made = stamp.Stamp.of(stamp.context(tmp_path, key=None, receipt=None, record_host=False), files, image,
                          {"image": {"id": IMAGE["Id"]}}, [])
    return made, tmp_path, api


def _context(root: Path) -> dict[str, object]:
    return stamp.context(root, key=None, receipt=None, record_host=False)


def test_a_stamp_holds_while_nothing_changed_and_survives_its_file(stamped: Stamped) -> None:
    made, root, api = stamped
    try:
        assert made.holds(_context(root))
        where = stamp.location(root / "store", root / "spec.yaml")
        stamp.write(where, made)
        again = stamp.read(where)
        assert again == made and again.holds(_context(root))
        where.write_text("{not json")
        assert stamp.read(where) is None
    finally:
        api.close()


@pytest.mark.parametrize("change", ["touch", "add", "appear", "option", "environment"])
def test_any_change_breaks_the_stamp(stamped: Stamped, change: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    made, root, api = stamped
    try:
        ctx = _context(root)
        if change == "touch":  # the same bytes written again: the ctime moves
            (root / "tree" / "a.patch").write_text("x")
        elif change == "add":
            (root / "tree" / "b.patch").write_text("y")
        elif change == "appear":
            (root / "gone").write_text("")
        elif change == "option":
            ctx = stamp.context(root, key=None, receipt=root / "r.json", record_host=False)
        else:
            monkeypatch.setenv("SPARKIMG_KEY", str(root / "other.key"))
            ctx = _context(root)
        assert not made.holds(ctx)
    finally:
        api.close()


def test_an_image_gone_or_retagged_breaks_the_stamp(tmp_path: Path) -> None:
    image = {"reference": REF, "id": str(IMAGE["Id"]), "key": "k" * 64, "socket": str(tmp_path / "e.sock")}
    made = stamp.Stamp.of(_context(tmp_path), [], image, {}, [])
    assert not made.holds(_context(tmp_path))  # no engine answering
    other = {**IMAGE, "Id": "sha256:" + "b" * 64}
    api = FakeEngineApi(tmp_path / "e.sock", other, name="sparkimg/x:kkkk")
    try:
        assert not made.holds(_context(tmp_path))  # the tag now names another image
    finally:
        api.close()
    assert not stamp.Stamp.of(_context(tmp_path), [], {**image, "socket": ""}, {}, []).holds(_context(tmp_path))


def test_the_stamp_reads_the_key_label_the_build_writes_and_the_key_variable() -> None:
    from sparkimg.signing.keys import KEY_ENV

    assert stamp.KEY_LABEL == KEY_LABEL and KEY_ENV in stamp.ENVIRONMENT


def test_the_stamp_covers_sparkimg_itself() -> None:
    own = stamp.own_code()
    assert any(p.name == "stamp.py" for p in own) and all(p.suffix == ".py" and p.exists() for p in own)
    assert os.path.commonpath(own) == str(Path(stamp.__file__).resolve().parents[1])
