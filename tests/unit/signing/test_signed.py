"""The one signed-file writer never loses a signature: a rerun keeps the file, a second key
countersigns, an unsigned build refuses to replace a signed file, new content replaces it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkimg.errors import DowngradeError
from sparkimg.signing import dsse
from sparkimg.signing.keys import PrivateKey, generate
from sparkimg.signing.signed import write_signed


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[PrivateKey, PrivateKey]:
    folder = tmp_path_factory.mktemp("keys")
    return generate(folder / "a"), generate(folder / "b")


def test_a_rerun_keeps_the_file_byte_for_byte(tmp_path: Path, keys: tuple[PrivateKey, PrivateKey]) -> None:
    path = tmp_path / "r.json"
    assert write_signed(path, b"{}", keys[0]).written
    before = path.read_bytes()
    again = write_signed(path, b"{}", keys[0])
    assert not again.written and again.signed and path.read_bytes() == before


def test_an_unsigned_rerun_keeps_the_signed_file(tmp_path: Path, keys: tuple[PrivateKey, PrivateKey]) -> None:
    path = tmp_path / "r.json"
    write_signed(path, b"{}", keys[0])
    kept = write_signed(path, b"{}", None)
    assert not kept.written and kept.signed and kept.keyids == (keys[0].keyid,)
    assert dsse.read(path).check_signature(keys[0].public) is None


def test_an_unsigned_build_never_replaces_a_signed_file(tmp_path: Path, keys: tuple[PrivateKey, PrivateKey]) -> None:
    path = tmp_path / "r.json"
    write_signed(path, b"{}", keys[0])
    before = path.read_bytes()
    with pytest.raises(DowngradeError) as caught:
        write_signed(path, b'{"other": 1}', None)
    assert caught.value.exit_code == 1 and "--receipt" in (caught.value.hint or "")
    assert path.read_bytes() == before


def test_an_unsigned_build_keeps_a_signed_file_that_attests_the_same_thing(
        tmp_path: Path, keys: tuple[PrivateKey, PrivateKey]) -> None:
    """Another payload about the same thing (a receipt of the same image from the same lock, with
    other run details): the signed file stays, signed, and nothing is refused."""
    path = tmp_path / "r.json"
    write_signed(path, b'{"image": 1, "when": "then"}', keys[0])
    before = path.read_bytes()
    kept = write_signed(path, b'{"image": 1, "when": "now"}', None, attests=lambda there: b'"image": 1' in there)
    assert not kept.written and kept.signed and kept.keyids == (keys[0].keyid,)
    assert path.read_bytes() == before
    with pytest.raises(DowngradeError):
        write_signed(path, b'{"image": 2}', None, attests=lambda there: b'"image": 2' in there)
    assert path.read_bytes() == before


def test_a_second_key_countersigns(tmp_path: Path, keys: tuple[PrivateKey, PrivateKey]) -> None:
    path = tmp_path / "r.json"
    write_signed(path, b"{}", keys[0])
    both = write_signed(path, b"{}", keys[1])
    assert both.written and both.keyids == (keys[0].keyid, keys[1].keyid)
    envelope = dsse.read(path)
    assert all(envelope.check_signature(k.public) is None for k in keys)


def test_new_content_under_a_key_replaces_the_file(tmp_path: Path, keys: tuple[PrivateKey, PrivateKey]) -> None:
    path = tmp_path / "r.json"
    write_signed(path, b"{}", keys[0])
    write_signed(path, b'{"new": 1}', keys[1])
    envelope = dsse.read(path)
    assert envelope.payload == b'{"new": 1}' and [s.keyid for s in envelope.signatures] == [keys[1].keyid]


def test_a_damaged_file_is_replaced(tmp_path: Path, keys: tuple[PrivateKey, PrivateKey]) -> None:
    path = tmp_path / "r.json"
    path.write_text("{trunc")
    assert write_signed(path, b"{}", None).written
    assert dsse.read(path).payload == b"{}"
