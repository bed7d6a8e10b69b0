"""DSSE: the PAE vector from the spec, round trips, an independent implementation
(securesystemslib) in both directions, and every malformed envelope as exit 2."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from securesystemslib.dsse import Envelope as SslEnvelope
from securesystemslib.signer import CryptoSigner, SSlibKey

from sparkimg.errors import EnvelopeError
from sparkimg.signing import dsse
from sparkimg.signing.keys import PrivateKey, generate, load_public


@pytest.fixture
def key(tmp_path: Path) -> PrivateKey:
    return generate(tmp_path / "k")


def test_pae_matches_the_dsse_specification() -> None:
    # github.com/secure-systems-lab/dsse/blob/master/protocol.md, "Test Vectors"
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


def test_sign_then_verify_round_trips_through_json(key: PrivateKey) -> None:
    envelope = dsse.Envelope(b'{"a": 1}').signed(key)
    again = dsse.parse(envelope.dumps(), "x")
    assert again == envelope
    assert again.check_signature(key.public) is None


def test_securesystemslib_verifies_our_envelope(key: PrivateKey, tmp_path: Path) -> None:
    envelope = dsse.Envelope(b'{"_type": "https://in-toto.io/Statement/v1"}').signed(key)
    theirs = SslEnvelope.from_dict(json.loads(envelope.dumps()))
    public = SSlibKey.from_crypto(load_public(tmp_path / "k.pub").key, keyid=key.keyid, scheme="ecdsa-sha2-nistp256")
    accepted = theirs.verify([public], 1)
    assert list(accepted) == [key.keyid]
    assert theirs.pae() == dsse.pae(dsse.PAYLOAD_TYPE, envelope.payload)


def test_we_verify_an_envelope_securesystemslib_signed(key: PrivateKey) -> None:
    signer = CryptoSigner(key.key, SSlibKey.from_crypto(key.key.public_key(), keyid=key.keyid,
                                                        scheme="ecdsa-sha2-nistp256"))
    theirs = SslEnvelope(b'{"hello": "world"}', dsse.PAYLOAD_TYPE, {})
    theirs.sign(signer)
    ours = dsse.parse(json.dumps(theirs.to_dict()).encode(), "theirs")
    assert ours.check_signature(key.public) is None


def _flip(text: str) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[len(raw) // 2] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize(("change", "reason"), [
    (lambda e: {**e, "payload": _flip(e["payload"])}, "does not verify"),
    (lambda e: {**e, "signatures": [{**e["signatures"][0], "sig": _flip(e["signatures"][0]["sig"])}]},
     "does not verify"),
    (lambda e: {**e, "signatures": [{**e["signatures"][0], "keyid": "0" * 64}]}, "no signature by the trusted key"),
    (lambda e: {**e, "signatures": []}, "no signature"),
])
def test_tampered_envelopes_fail_with_a_reason(key: PrivateKey, change, reason: str) -> None:  # type: ignore[no-untyped-def]
    good = json.loads(dsse.Envelope(b'{"x": 1}').signed(key).dumps())
    why = dsse.parse(json.dumps(change(good)).encode(), "t").check_signature(key.public)
    assert why is not None and reason in why


def test_another_key_is_not_trusted(key: PrivateKey, tmp_path: Path) -> None:
    other = generate(tmp_path / "other")
    why = dsse.Envelope(b"{}").signed(key).check_signature(other.public)
    assert why is not None and "no signature by the trusted key" in why


@pytest.mark.parametrize(("raw", "message"), [
    (b'{"payloadType": "application/vnd.in-toto+json", "payl', "not JSON"),
    (b"\x89PNG\r\n", "not JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"payload": "e30=", "signatures": []}', "missing payloadType"),
    (b'{"payloadType": "text/plain", "payload": "e30=", "signatures": []}', "payloadType is 'text/plain'"),
    (b'{"payloadType": "application/vnd.in-toto+json", "payload": "!!!", "signatures": []}', "not valid base64"),
    (b'{"payloadType": "application/vnd.in-toto+json", "payload": "e30=", "signatures": [{"keyid": "k"}]}',
     "signatures[0]"),
])
def test_malformed_envelopes_are_bad_input(raw: bytes, message: str) -> None:
    with pytest.raises(EnvelopeError) as caught:
        dsse.parse(raw, "receipt.json")
    assert caught.value.exit_code == 2 and message in caught.value.message and "receipt.json" in caught.value.message
