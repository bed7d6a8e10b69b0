"""``sparkimg sbom`` on the demo, with the real engine: the SPDX document validates with the SPDX
project's own tools, names what the image really holds (checked by dpkg-query and Python's
importlib.metadata run inside it, no network), is signed beside the receipt that names it, and
two clean builds give the same bytes."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkimg.engine.protocol import Engine

from .helpers import cli, copy_demo


def _sbom(capsys: pytest.CaptureFixture[str], store: Path, demo: Path) -> tuple[dict[str, Any], str]:
    code, document, err = cli(capsys, store, "sbom", str(demo), "--json")
    assert code == 0, err
    capsys.readouterr()
    return document, json.dumps(document, indent=2, sort_keys=True)


def _statement(envelope: Path) -> dict[str, Any]:
    return dict(json.loads(base64.b64decode(json.loads(envelope.read_bytes())["payload"])))


def _inside(engine: Engine, image: str, *command: str) -> list[str]:
    done = subprocess.run([engine.client, "run", "--rm", "--network", "none", image, *command],
                          capture_output=True, text=True, check=True)
    return sorted(line for line in done.stdout.splitlines() if line)


def test_the_demo_sbom_validates_names_what_the_image_holds_and_is_the_same_for_two_clean_builds(
    tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from spdx_tools.spdx.parser.parse_anything import parse_file
    from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

    demo = copy_demo(tmp_path / "project")
    assert cli(capsys, tmp_path / "s0", "lock", str(demo))[0] == 0
    assert cli(capsys, tmp_path / "s0", "keygen", "--out", str(tmp_path / "k"))[0] == 0
    key = ("--key", str(tmp_path / "k.key"))
    code, built, err = cli(capsys, tmp_path / "s1", "build", str(demo), "--json", "--quiet", *key)
    assert code == 0, err
    image = built["image"]["reference"]
    try:
        document, text = _sbom(capsys, tmp_path / "s1", demo)
        path = tmp_path / "demo.spdx.json"
        path.write_text(text)
        assert validate_full_spdx_document(parse_file(str(path))) == []

        packages = {p["SPDXID"]: p for p in document["packages"]}
        debs = {p["name"] for i, p in packages.items() if i.startswith("SPDXRef-deb-")}
        python = {(p["name"].lower(), p["versionInfo"]) for i, p in packages.items() if i.startswith("SPDXRef-py-")}
        status = _inside(engine, image, "dpkg-query", "-W", "-f", "${db:Status-Abbrev}${Package}\\n")
        installed = {line[2:].strip() for line in status if line.startswith("ii")}
        assert debs == installed and "python3" in debs
        listing = "print('\\n'.join(f\"{d.metadata['Name'].lower()} {d.version}\" for d in m.distributions()))"
        metadata = _inside(engine, image, "python3", "-c", f"import importlib.metadata as m; {listing}")
        assert python == {tuple(line.split(" ")) for line in metadata}

        lock = json.loads((demo.parent / "demo.yaml.lock.json").read_text())
        six = packages["SPDXRef-py-six-1.16.0"]
        assert six["checksums"] == [{"algorithm": "SHA256", "checksumValue": lock["sources"]["six"]["sha256"]}]
        kernel = [p for i, p in packages.items() if i.startswith("SPDXRef-so-demo-kernel-")]
        assert kernel and all("cubin sm_121" in p["comment"] and "12.1a" in p["comment"] for p in kernel)
        patches = {p["name"] for i, p in packages.items() if i.startswith("SPDXRef-patch-")}
        pinned = {f"{s['dir']}/{f['file']}" for s in lock["patches"].values() for f in s["files"]}
        assert patches == pinned
        contained = {r["relatedSpdxElement"] for r in document["relationships"] if r["relationshipType"] == "CONTAINS"}
        assert "SPDXRef-py-six-1.16.0" in contained and set(kernel[0]["SPDXID"].split()) <= contained

        # Signed beside the receipt (issue 26): the same document, about the receipt's image, named by
        # the receipt by its statement's sha256; `sbom RECEIPT --key` checks it against the receipt.
        signed = _statement(Path(built["sbom"]))
        assert signed["predicate"] == document and signed["predicateType"] == "https://spdx.dev/Document/v2.3"
        assert {s["digest"]["sha256"] for s in signed["subject"]} == {
            built["oci"]["config"].split(":")[1], built["oci"]["manifest"].split(":")[1]}
        receipt = _statement(Path(built["receipt"]))
        named = [b for b in receipt["predicate"]["runDetails"]["byproducts"] if b["name"] == "sbom"]
        payload = base64.b64decode(json.loads(Path(built["sbom"]).read_bytes())["payload"])
        assert named[0]["digest"]["sha256"] == hashlib.sha256(payload).hexdigest()
        code, shown, err = cli(capsys, tmp_path / "s1", "sbom", built["receipt"], "--key", str(tmp_path / "k.pub"),
                               "--json")
        assert code == 0 and shown == document, err

        engine.remove_image(image)  # a second clean build, from an empty store: the same document
        code, again, err = cli(capsys, tmp_path / "s2", "build", str(demo), "--json", "--quiet", *key,
                               "--receipt", str(tmp_path / "second.receipt.json"))
        assert code == 0 and again["oci"] == built["oci"], err
        assert _sbom(capsys, tmp_path / "s2", demo)[1] == text
        assert base64.b64decode(json.loads(Path(again["sbom"]).read_bytes())["payload"]) == payload
        code, said, _ = cli(capsys, tmp_path / "s2", "sbom", str(demo))
        assert code == 0 and "six" in said and "1.16.0" in said

        code, _, err = cli(capsys, tmp_path / "s3", "sbom", str(demo))  # a store that never built it
        assert code == 2 and "build it first" in err
    finally:
        engine.remove_image(image)
