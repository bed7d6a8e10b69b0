"""Signing keys: ECDSA P-256 with SHA-256, PEM files, a key id derived from the public key.

P-256 because the standard offline verifiers take it from a PEM public key as it is:
cosign's key-based verification, securesystemslib (``ecdsa-sha2-nistp256``) and
``openssl dgst -verify``. Signatures are DER-encoded (r, s), as those tools expect.
The key id is the sha256 of the public key's DER SubjectPublicKeyInfo, so anyone with the
``.pub`` file can compute it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkimg._internal.fs.atomic import write_atomic
from sparkimg.errors import KeyFileError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

# cryptography is imported inside the functions that sign, verify or read keys: commands
# that do neither (and importing this module) do not pay for its bindings.




def keyid_of(public: ec.EllipticCurvePublicKey) -> str:
    from cryptography.hazmat.primitives import serialization

    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


@dataclass(frozen=True)
class PublicKey:
    key: ec.EllipticCurvePublicKey
    keyid: str

    def verify(self, signature: bytes, message: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        try:
            self.key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return False
        return True

    def pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass(frozen=True)
class PrivateKey:
    key: ec.EllipticCurvePrivateKey
    keyid: str

    def sign(self, message: bytes) -> bytes:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        return self.key.sign(message, ec.ECDSA(hashes.SHA256()))

    @property
    def public(self) -> PublicKey:
        return PublicKey(self.key.public_key(), self.keyid)


def key_paths(prefix: Path) -> tuple[Path, Path]:
    """The private and public key files of ``prefix`` (``keys/demo``, or ``keys/demo.key`` as typed)."""
    if prefix.suffix in (".key", ".pub"):
        prefix = prefix.with_suffix("")
    return prefix.with_name(prefix.name + ".key"), prefix.with_name(prefix.name + ".pub")


def generate(prefix: Path, *, force: bool = False) -> PrivateKey:
    """Write ``PREFIX.key`` (PKCS#8 PEM, mode 0600) and ``PREFIX.pub`` (SubjectPublicKeyInfo PEM).
    A prefix typed with either ending (``--out keys/demo.key``) is taken as the pair's name, not
    as ``demo.key.key``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private_path, public_path = key_paths(prefix)
    for path in (private_path, public_path):
        if path.exists() and not force:
            raise KeyFileError(f"{path} exists; refusing to overwrite a key",
                               hint="choose another --out prefix, or pass --force to replace it")
    key = ec.generate_private_key(ec.SECP256R1())
    private = PrivateKey(key, keyid_of(key.public_key()))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    write_atomic(private_path, pem, mode=0o600)
    write_atomic(public_path, private.public.pem(), mode=0o644)
    return private


KEY_BYTES = 64 << 10  # a PEM P-256 key is under 1 KiB; anything this large is not one


def _key_bytes(path: Path, what: str, hint: str) -> bytes:
    """A key file's bytes: a regular file of at most ``KEY_BYTES`` (``--key /dev/zero`` or a huge
    file is refused before it is read into memory, a FIFO before it blocks)."""
    from sparkimg._internal.fs.files import read_input
    from sparkimg.errors import UsageError

    try:
        return read_input(path, KEY_BYTES, hint=hint)
    except FileNotFoundError:
        raise KeyFileError(f"{path}: cannot read the {what} (no such file)", hint=hint) from None
    except UsageError as exc:
        raise KeyFileError(f"{exc.message} (the {what})", hint=hint) from None


def load_private(path: Path) -> PrivateKey:
    """The signing key at ``path``; refused when group or others can read it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    hint = "create one with `sparkimg keygen --out PREFIX`"
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read the signing key ({exc.strerror})", hint=hint) from None
    data = _key_bytes(path, "signing key", hint)
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(f"{path}: the private key is accessible by others (mode {stat.S_IMODE(mode):04o})",
                           hint=f"chmod 600 {path}")
    try:
        key = serialization.load_pem_private_key(data, password=_password())
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{path}: not a PEM private key sparkimg can use ({exc})",
                           hint="set SPARKIMG_KEY_PASSWORD for an encrypted key; "
                           "create a new one with `sparkimg keygen`") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise KeyFileError(f"{path}: an ECDSA P-256 key is required, this is {type(key).__name__}",
                           hint="create one with `sparkimg keygen --out PREFIX`")
    return PrivateKey(key, keyid_of(key.public_key()))


def signing_key(path: Path | None) -> PrivateKey | None:
    """The key a build or prewarm signs with: ``path``, else ``$SPARKIMG_KEY``, loaded; None when
    neither names one."""
    from sparkimg._internal.locations import signing_key_path

    chosen = signing_key_path(path)
    return load_private(chosen) if chosen else None


def load_public(path: Path) -> PublicKey:
    """A trusted public key (PEM SubjectPublicKeyInfo)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    data = _key_bytes(path, "public key", "pass the .pub file written by `sparkimg keygen`")
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise KeyFileError(f"{path}: not a PEM public key ({exc})",
                           hint="pass the .pub file written by `sparkimg keygen`") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise KeyFileError(f"{path}: an ECDSA P-256 public key is required, this is {type(key).__name__}")
    return PublicKey(key, keyid_of(key))


def _password() -> bytes | None:
    value = os.environ.get("SPARKIMG_KEY_PASSWORD")
    return value.encode() if value else None
