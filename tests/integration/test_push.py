"""``sparkimg push`` against the real loopback registry: the registry serves the manifest the
receipt names, blobs it has are skipped, base layers are mounted, a patch change moves bytes."""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from pathlib import Path

import pytest
import requests

from sparkimg.engine.docker import Engine
from tests.support import REGISTRY

from .helpers import cli, copy_demo

ACCEPT = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"


def _served(repository: str, reference: str) -> str:
    response = requests.head(f"http://{REGISTRY}/v2/{repository}/manifests/{reference}", timeout=5,
                             headers={"Accept": ACCEPT})
    response.raise_for_status()
    return str(response.headers["Docker-Content-Digest"])


def test_push_serves_the_receipts_manifest_and_a_patch_change_moves_only_its_layer(
    tmp_path: Path, engine: Engine, demo_base: str, registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = copy_demo(tmp_path / "project")
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    assert cli(capsys, store, "keygen", "--out", str(tmp_path / "node"))[0] == 0
    code, built, _ = cli(capsys, store, "build", str(demo), "--json", "--quiet", "--key", str(tmp_path / "node.key"))
    assert code == 0
    repository = f"sparkimg-test/push-{uuid.uuid4().hex[:8]}"
    code, pushed, err = cli(capsys, store, "push", str(demo), "--to", f"{registry}/{repository}", "--tag", "latest",
                            "--json")
    assert code == 0, err
    assert pushed["manifest"] == built["oci"]["manifest"] == _served(repository, "latest")
    assert _served(repository, pushed["tags"][0]) == pushed["manifest"]  # the dated tag
    hows = [b["how"] for b in pushed["blobs"]]
    assert hows[0] == "mounted" and hows[1:] == ["uploaded"] * 4  # base layer from its repo; 3 layers, config

    # The receipt's manifest subject is what the registry serves: verify-receipt from the registry.
    receipt = json.loads(Path(built["receipt"]).read_text())
    statement = json.loads(base64.b64decode(receipt["payload"]))
    manifest_subject = next(s for s in statement["subject"] if s["annotations"]["kind"] == "image-manifest")
    assert "sha256:" + manifest_subject["digest"]["sha256"] == pushed["manifest"]
    code, report, _ = cli(capsys, store, "verify-receipt", built["receipt"], "--key", str(tmp_path / "node.pub"),
                          "--image", f"{registry}/{repository}:latest", "--json")
    check = next(c for c in report["checks"] if c["field"] == "image.manifest_digest")
    assert check["ok"] and not check["note"]
    # Pulled by digest, the engine names it by the config digest sparkimg wrote.
    remote = f"{registry}/{repository}@{pushed['manifest']}"
    subprocess.run([engine.client, "pull", "-q", remote], check=True, capture_output=True)
    assert engine.image_id(remote) == built["oci"]["config"]

    code, again, _ = cli(capsys, store, "push", str(demo), "--to", f"{registry}/{repository}", "--json")
    assert code == 0 and again["sent_bytes"] == 0 and {b["how"] for b in again["blobs"]} == {"present"}

    patch = demo.parents[1] / "patches" / "demo" / "serve.env"
    patch.write_text(patch.read_text() + "VLLM_PUSH_TEST=1\n")
    assert cli(capsys, store, "patches", "pin", str(patch.parent))[0] == 0
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    code, rebuilt, _ = cli(capsys, store, "build", str(demo), "--json", "--quiet")
    assert code == 0
    code, third, _ = cli(capsys, store, "push", str(demo), "--to", f"{registry}/{repository}", "--tag", "latest",
                         "--json")
    assert code == 0 and _served(repository, "latest") == rebuilt["oci"]["manifest"]
    uploaded = [b for b in third["blobs"] if b["how"] == "uploaded"]
    # the patch layer (an uncompressed tar: at least one 10 KiB tar record) and the config
    assert len(uploaded) == 2 and third["sent_bytes"] < 16_384
    for result in (built, rebuilt):
        engine.remove_image(result["image"]["reference"])
    engine.remove_image(remote)


def test_push_refuses_a_bad_target_and_an_unbuilt_image(
    tmp_path: Path, demo_base: str, registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = copy_demo(tmp_path / "project")
    store = tmp_path / "store"
    code, _, err = cli(capsys, store, "push", str(demo), "--to", f"{registry}/x:tag")
    assert code == 2 and "REGISTRY/REPO" in err and "Traceback" not in err
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    code, _, err = cli(capsys, store, "push", str(demo), "--to", f"{registry}/sparkimg-test/unbuilt")
    assert code == 2 and "sparkimg build" in err
