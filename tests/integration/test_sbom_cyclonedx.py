"""CycloneDX for the demo, with the real engine (issue 40): ``sbom SPEC --format cyclonedx`` made
from the store validates against the CycloneDX 1.6 schema, names the packages, versions and
sha256s of the SPDX document of the same image, and is the same bytes twice; ``build
--sbom-format cyclonedx`` signs it beside the receipt, which ``sbom RECEIPT`` and
``verify-receipt`` then read, and a plain build after it signs SPDX again (the no-op stamp
knows the format)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from packageurl import PackageURL

from sparkimg.cli import main
from sparkimg.engine.protocol import Engine

from .nodes import signed_demo

pytestmark = pytest.mark.integration


def _printed(capsys: pytest.CaptureFixture[str], store: Path, *args: str) -> str:
    capsys.readouterr()
    code = main(["--store", str(store), *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _statement(envelope: Path) -> tuple[bytes, dict[str, Any]]:
    payload = base64.b64decode(json.loads(envelope.read_bytes())["payload"])
    return payload, dict(json.loads(payload))


def _spdx(document: dict[str, Any]) -> set[tuple[Any, ...]]:
    found = set()
    for p in document["packages"]:
        sums = {c["algorithm"]: c["checksumValue"] for c in p.get("checksums", [])}
        purl = next((r["referenceLocator"] for r in p.get("externalRefs", [])), None)
        found.add((p["name"], p.get("versionInfo"), sums.get("SHA256"), PackageURL.from_string(purl) if purl else None))
    return found


def _cyclonedx(document: dict[str, Any]) -> set[tuple[Any, ...]]:
    found = set()
    for c in [document["metadata"]["component"], *document["components"]]:
        sums = {h["alg"]: h["content"] for h in c.get("hashes", [])}
        found.add((c["name"], c.get("version"), sums.get("SHA-256"),
                   PackageURL.from_string(c["purl"]) if "purl" in c else None))
    return found


def test_the_demo_cyclonedx_sbom_validates_names_what_spdx_names_and_can_be_the_signed_one(
    tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    demo, store, run, built = signed_demo(tmp_path)
    image, key, pub = built["image"]["reference"], str(tmp_path / "trusted.key"), str(tmp_path / "trusted.pub")
    try:
        text = _printed(capsys, store, "sbom", str(demo), "--format", "cyclonedx", "--json")
        assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
        assert _printed(capsys, store, "sbom", str(demo), "--format", "cyclonedx", "--json") == text
        document, spdx = json.loads(text), json.loads(_printed(capsys, store, "sbom", str(demo), "--json"))
        assert _cyclonedx(document) == _spdx(spdx) and len(document["components"]) == len(spdx["packages"]) - 1
        lock = json.loads((demo.parent / "demo.yaml.lock.json").read_text())
        six = [c for c in document["components"] if c["name"] == "six"]
        assert six[0]["hashes"] == [{"alg": "SHA-256", "content": lock["sources"]["six"]["sha256"]}]
        assert document["metadata"]["component"]["name"] == image
        base = PackageURL.from_string(next(c["purl"] for c in document["components"] if c["bom-ref"] == "Base"))
        assert base.version == lock["base"]["manifest_digest"]
        assert base.qualifiers["repository_url"] == lock["base"]["repository"]
        table = _printed(capsys, store, "sbom", str(demo), "--format", "cyclonedx")
        assert "six" in table and "1.16.0" in table

        # The signed SBOM is SPDX unless the build is asked otherwise; it is never converted.
        code = main(["--store", str(store), "sbom", built["receipt"], "--format", "cyclonedx"])
        assert code == 2 and "a signed SBOM is shown as it was signed" in capsys.readouterr().err

        again = run("build", str(demo), "--json", "--quiet", "--key", key, "--sbom-format", "cyclonedx")
        assert again["receipt"] == built["receipt"] and again["oci"] == built["oci"]
        payload, statement = _statement(Path(again["sbom"]))
        assert statement["predicateType"] == "https://cyclonedx.org/bom" and statement["predicate"] == document
        receipt = _statement(Path(again["receipt"]))[1]
        named = [b for b in receipt["predicate"]["runDetails"]["byproducts"] if b["name"] == "sbom"]
        assert named[0]["digest"]["sha256"] == hashlib.sha256(payload).hexdigest()
        assert named[0]["annotations"]["predicateType"] == "https://cyclonedx.org/bom"
        shown = _printed(capsys, store, "sbom", again["receipt"], "--key", pub, "--json")
        assert json.loads(shown) == document
        verified = json.loads(_printed(capsys, store, "verify-receipt", again["receipt"], "--key", pub, "--json"))
        sbom_checks = [c for c in verified["checks"] if c["stage"] == "sbom"]
        assert sbom_checks and all(c["ok"] for c in sbom_checks), sbom_checks

        plain = run("build", str(demo), "--json", "--quiet", "--key", key)  # the stamp knows the format
        assert _statement(Path(plain["sbom"]))[1]["predicateType"] == "https://spdx.dev/Document/v2.3"
    finally:
        engine.remove_image(image)
