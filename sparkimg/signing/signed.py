"""The one writer of signed files (receipts, prewarm manifests): a DSSE envelope around a
payload, written atomically, and never a silent loss of a signature.

- The same payload (or one ``same`` calls equivalent) already there: the file is kept, and a
  new signer's signature is added beside the ones it has (a receipt may carry several), so a
  rerun that changed nothing changes no byte, and a second node's key countersigns.
- A signed file is never replaced by an unsigned one: an unsigned build keeps it when it attests
  the same thing (``attests``: a receipt of the same image from the same lock), and otherwise
  refuses, and says how to proceed (sign it, or write the receipt elsewhere).
- A different payload under a key replaces the file: the old signatures vouched for content
  that is no longer what was built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkimg._internal.fs.atomic import write_atomic
from sparkimg._internal.fs.files import read_input
from sparkimg.errors import DowngradeError, UsageError
from sparkimg.signing import dsse
from sparkimg.signing.keys import PrivateKey


@dataclass(frozen=True)
class Written:
    path: Path
    signed: bool
    keyid: str | None
    written: bool
    keyids: tuple[str, ...] = ()  # every signer of the file as it now is


def write_signed(path: Path, payload: bytes, key: PrivateKey | None, *,
                 same: Callable[[bytes], bool] | None = None,
                 attests: Callable[[bytes], bool] | None = None) -> Written:
    """Write ``payload`` in an envelope (signed when ``key`` is given), keeping every signature
    an equivalent file already has; never replace a signed file with an unsigned one: keep it
    when ``attests`` says its payload vouches for what ``payload`` does, else refuse."""
    keyid = key.keyid if key else None
    existing = _existing(path)
    if existing is not None and existing.signatures:
        equal = existing.payload == payload or (same is not None and _says_same(same, existing.payload))
        signers = tuple(s.keyid for s in existing.signatures)
        if equal and (key is None or existing.same_signer(key)):
            return Written(path, True, keyid or signers[0], written=False, keyids=signers)
        if equal and key is not None:  # countersign: the same content, one more signer
            envelope = existing.signed(key)
            write_atomic(path, envelope.dumps())
            return Written(path, True, keyid, written=True, keyids=(*signers, key.keyid))
        if key is None and attests is not None and _says_same(attests, existing.payload):
            return Written(path, True, signers[0], written=False, keyids=signers)
        if key is None:
            raise DowngradeError(
                f"{path} is signed (keyid {', '.join(k[:16] for k in signers)}) and this build is not: an unsigned "
                "build never replaces a signed file",
                hint="sign it (--key or SPARKIMG_KEY), or write it elsewhere (build --receipt PATH)")
    elif existing is not None and existing.payload == payload and key is None:
        return Written(path, False, None, written=False)
    envelope = dsse.Envelope(payload)
    if key is not None:
        envelope = envelope.signed(key)
    write_atomic(path, envelope.dumps())
    return Written(path, key is not None, keyid, written=True, keyids=(keyid,) if keyid else ())


def _existing(path: Path) -> dsse.Envelope | None:
    """The envelope already at ``path``; None when there is none or it is damaged (then nothing in it
    can be trusted or kept). A file that is there but cannot be read is never replaced blind."""
    if not path.exists():
        return None
    try:
        raw = read_input(path, dsse.ENVELOPE_BYTES, hint="write elsewhere (build --receipt PATH)")
    except FileNotFoundError:
        return None
    except UsageError as exc:  # a FIFO, a folder, a huge file in its place: never replaced blind
        raise DowngradeError(f"{exc.message}, so its signatures cannot be kept", hint=exc.hint) from None
    try:
        return dsse.parse(raw, str(path))
    except UsageError:
        return None


def _says_same(same: Callable[[bytes], bool], payload: bytes) -> bool:
    try:
        return same(payload)
    except UsageError:
        return False
