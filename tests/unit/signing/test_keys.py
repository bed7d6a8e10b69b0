"""Key files: modes, refusal of open or wrong keys, key id from the public key, and a
signature that openssl verifies on its own."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from sparkimg.errors import KeyFileError
from sparkimg.signing.keys import generate, load_private, load_public


def test_keygen_writes_a_private_key_only_the_owner_reads(tmp_path: Path) -> None:
    key = generate(tmp_path / "node1")
    assert (tmp_path / "node1.key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "node1.pub").read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    der = load_public(tmp_path / "node1.pub").key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert key.keyid == hashlib.sha256(der).hexdigest() == load_private(tmp_path / "node1.key").keyid


@pytest.mark.parametrize("typed", ["demo.key", "demo.pub", "demo"])
def test_keygen_takes_the_name_people_type(tmp_path: Path, typed: str) -> None:
    """``keygen --out keys/demo.key`` writes demo.key and demo.pub, not demo.key.key (issue 40)."""
    generate(tmp_path / typed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.key", "demo.pub"]


def test_keygen_refuses_to_overwrite(tmp_path: Path) -> None:
    generate(tmp_path / "k")
    with pytest.raises(KeyFileError, match="refusing to overwrite"):
        generate(tmp_path / "k")
    assert generate(tmp_path / "k", force=True).keyid


def test_a_private_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    generate(tmp_path / "k")
    (tmp_path / "k.key").chmod(0o640)
    with pytest.raises(KeyFileError, match=r"accessible by others \(mode 0640\)") as caught:
        load_private(tmp_path / "k.key")
    assert caught.value.exit_code == 2 and "chmod 600" in str(caught.value)


def test_keys_of_another_type_are_refused(tmp_path: Path) -> None:
    other = ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "ed.pub").write_bytes(other.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(KeyFileError, match="P-256"):
        load_public(tmp_path / "ed.pub")
    (tmp_path / "junk.pub").write_text("not a key")
    with pytest.raises(KeyFileError, match="not a PEM public key"):
        load_public(tmp_path / "junk.pub")
    with pytest.raises(KeyFileError, match="cannot read"):
        load_private(tmp_path / "absent.key")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_openssl_verifies_a_signature(tmp_path: Path) -> None:
    key = generate(tmp_path / "k")
    message = b"DSSEv1 3 a/b 2 {}"
    (tmp_path / "msg").write_bytes(message)
    (tmp_path / "sig").write_bytes(key.sign(message))
    done = subprocess.run(["openssl", "dgst", "-sha256", "-verify", str(tmp_path / "k.pub"), "-signature",
                           str(tmp_path / "sig"), str(tmp_path / "msg")], capture_output=True, text=True)
    assert done.returncode == 0 and "Verified OK" in done.stdout
