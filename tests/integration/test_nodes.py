"""One build, every node: three real extra Docker daemons stand in for the ranks of a cluster.
The demo is built once, pushed once, and each node runs ``sparkimg pull`` (pointed at it by
DOCKER_HOST): every node reports the same manifest digest, config digest (its image ID) and
diff_ids. Then an attacker changes the registry: a receipt that does not verify, and another
manifest under the tag with the genuine receipt beside it. Every node refuses each with exit 1
and keeps the image it had under the tag."""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from sparkimg._internal.net.registry import ImageRef, RegistryClient
from sparkimg.distribution.push import attach
from sparkimg.formats import oci
from sparkimg.formats.canonical import sha256_prefixed
from sparkimg.store.content import Store
from tests.support import REGISTRY

from .nodes import Node, nodes, signed_demo, sparkimg

ACCEPT = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"


@dataclass(frozen=True)
class Cluster:
    folder: Path
    spec: Path
    store: Path
    repository: str  # REGISTRY/REPO
    built: dict[str, Any]
    pushed: dict[str, Any]
    nodes: list[Node]

    @property
    def tag(self) -> str:
        return f"{self.repository}:latest"

    @property
    def trusted(self) -> str:
        return str(self.folder / "trusted.pub")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, engine: Any, demo_base: str,
            registry: str) -> Iterator[Cluster]:
    """One build of the demo on the shared engine, pushed once; three nodes with nothing on them."""
    folder = tmp_path_factory.mktemp("nodes")
    demo, store, run, built = signed_demo(folder, "--receipt", str(folder / "v1.receipt.json"))
    repository = f"{registry}/sparkimg-test/nodes-{uuid.uuid4().hex[:8]}"
    pushed = run("push", str(demo), "--to", repository, "--tag", "latest", "--receipt",
                 str(folder / "v1.receipt.json"), "--json")
    try:
        with nodes(3, folder / "daemons") as started:
            yield Cluster(folder, demo, store, repository, built, pushed, started)
    finally:
        engine.remove_image(built["image"]["reference"])


def _pull_everywhere(cluster: Cluster) -> list[tuple[int, Any, str]]:
    return [node.sparkimg(cluster.store, "pull", cluster.tag, "--key", cluster.trusted, "--json")
            for node in cluster.nodes]


def _put_manifest(repository: str, reference: str, body: bytes, media_type: str) -> str:
    name = repository.removeprefix(f"{REGISTRY}/")
    answer = requests.put(f"http://{REGISTRY}/v2/{name}/manifests/{reference}", data=body, timeout=10,
                          headers={"Content-Type": media_type})
    answer.raise_for_status()
    return sha256_prefixed(body)


def _put_blob(repository: str, body: bytes) -> str:
    """A monolithic upload (POST then PUT with the digest), as any client could make it."""
    name = repository.removeprefix(f"{REGISTRY}/")
    digest = sha256_prefixed(body)
    start = requests.post(f"http://{REGISTRY}/v2/{name}/blobs/uploads/", timeout=10)
    start.raise_for_status()
    location = start.headers["Location"]
    location = location if location.startswith("http") else f"http://{REGISTRY}{location}"
    separator = "&" if "?" in location else "?"
    requests.put(f"{location}{separator}digest={digest}", data=body, timeout=10,
                 headers={"Content-Type": "application/octet-stream"}).raise_for_status()
    return digest


def _served(repository: str, reference: str) -> bytes:
    name = repository.removeprefix(f"{REGISTRY}/")
    answer = requests.get(f"http://{REGISTRY}/v2/{name}/manifests/{reference}", timeout=10,
                          headers={"Accept": ACCEPT})
    answer.raise_for_status()
    return answer.content


def _other_image(cluster: Cluster) -> tuple[bytes, str, str]:
    """The attacker's image: the pushed one with one more variable in its config (same layers), so a
    node could run it; put into the repository but not under any tag yet. (manifest, its digest, config)."""
    manifest = json.loads(_served(cluster.repository, cluster.pushed["manifest"]))
    config = json.loads(Store(cluster.store).blob(cluster.built["oci"]["config"].split(":")[1]).read_bytes())
    config["config"]["Env"] = [*config["config"]["Env"], "SPARKIMG_EVIL=1"]
    config_bytes = oci.encode(config)
    config_digest = _put_blob(cluster.repository, config_bytes)
    manifest["config"] = {**manifest["config"], "digest": config_digest, "size": len(config_bytes)}
    body = oci.encode(manifest)
    return body, _put_manifest(cluster.repository, sha256_prefixed(body), body, manifest["mediaType"]), config_digest


def test_every_node_pulls_the_same_image(cluster: Cluster) -> None:
    results = _pull_everywhere(cluster)
    for (code, pulled, err), node in zip(results, cluster.nodes, strict=True):
        assert code == 0, f"{node.name}: {err}"
        assert pulled["manifest"] == cluster.pushed["manifest"] == cluster.built["oci"]["manifest"]
        assert pulled["config"] == cluster.built["oci"]["config"]
        assert pulled["diff_ids"][-3:] == cluster.built["oci"]["diff_ids"]
        # The node's own engine, asked directly: the image ID is the config digest, the layers the diff_ids.
        assert node.image_id(cluster.tag) == cluster.built["oci"]["config"]
        assert node.layers(cluster.tag) == pulled["diff_ids"]
    assert len({json.dumps(pulled, sort_keys=True) for _, pulled, _ in results}) == 1


def test_a_node_pulls_the_sbom_beside_the_receipt_and_a_tampered_one_is_refused(cluster: Cluster) -> None:
    """Issue 26: the SBOM the build signed travels with the push; a node's pull fetches it, checks
    it against the receipt and keeps it beside the receipt, where verify-node checks it again. An
    SBOM the registry serves in its place that the receipt does not name refuses the pull."""
    _require_pulled(cluster)
    node = cluster.nodes[0]
    kept = cluster.folder / "node0" / "v1.receipt.json"
    code, pulled, err = node.sparkimg(cluster.store, "pull", cluster.tag, "--key", cluster.trusted,
                                      "--receipt-out", str(kept), "--json")
    assert code == 0 and pulled["sbom"] == cluster.pushed["sbom"] and "sbom" in pulled["checks"], err
    sbom = kept.with_name("v1.sbom.json")
    assert json.loads(sbom.read_bytes())["payload"] == json.loads((cluster.folder / "v1.sbom.json").read_bytes())[
        "payload"]
    code, checked, err = node.sparkimg(cluster.store, "verify-node", "--receipt", str(kept), "--key",
                                       cluster.trusted, "--json")
    assert code == 0 and any(c["stage"] == "sbom" and c["ok"] for c in checked["checks"]), err
    code, shown, err = sparkimg(cluster.store, "sbom", cluster.tag, "--key", cluster.trusted, "--json")
    assert code == 0 and shown["spdxVersion"] == "SPDX-2.3", err

    # The SBOM on the node edited (a package's version): verify-node fails at the sbom stage.
    envelope = json.loads(sbom.read_bytes())
    edited = base64.b64decode(envelope["payload"]).replace(b'"1.16.0"', b'"1.17.0"', 1)
    sbom.write_text(json.dumps({**envelope, "payload": base64.b64encode(edited).decode()}))
    code, checked, err = node.sparkimg(cluster.store, "verify-node", "--receipt", str(kept), "--key",
                                       cluster.trusted, "--json")
    assert code == 1 and checked["failed_stage"] == "sbom", err
    assert any("statement sha256" in r for r in checked["reasons"])

    # The registry's SBOM replaced by the edited one: no node pulls.
    genuine = _served(cluster.repository, cluster.pushed["manifest"])
    subject = oci.Descriptor(json.loads(genuine)["mediaType"], cluster.pushed["manifest"], len(genuine))
    fallback = oci.fallback_tag(cluster.pushed["manifest"])
    name = cluster.repository.removeprefix(f"{REGISTRY}/")
    index = requests.get(f"http://{REGISTRY}/v2/{name}/manifests/{fallback}", timeout=10,
                         headers={"Accept": oci.OCI_INDEX}).content
    forged = sbom.read_bytes()
    _put_blob(cluster.repository, forged)
    artifact = oci.receipt_artifact(subject, forged, oci.SBOM_ARTIFACT)
    _put_manifest(cluster.repository, sha256_prefixed(artifact), artifact, oci.OCI_MANIFEST)
    receipts = [m for m in json.loads(index)["manifests"] if m["artifactType"] == oci.RECEIPT_ARTIFACT]
    swapped = oci.referrers_index(oci.encode({"schemaVersion": 2, "mediaType": oci.OCI_INDEX, "manifests": receipts}),
                                  artifact, oci.SBOM_ARTIFACT)
    _put_manifest(cluster.repository, fallback, swapped, oci.OCI_INDEX)
    try:
        code, _, err = node.sparkimg(cluster.store, "pull", cluster.tag, "--key", cluster.trusted, "--json")
        assert code == 1 and "no attached SBOM verifies" in err and "statement sha256" in err, err
    finally:
        _put_manifest(cluster.repository, fallback, index, oci.OCI_INDEX)


def test_a_receipt_that_does_not_verify_is_refused_on_every_node(cluster: Cluster) -> None:
    _require_pulled(cluster)
    body, manifest, config = _other_image(cluster)
    subject = oci.Descriptor(json.loads(body)["mediaType"], manifest, len(body))
    to = ImageRef.parse(cluster.repository)
    # The genuine receipt with its statement changed to name the attacker's image: the signature
    # no longer matches (a receipt signed by another key: tests/integration/test_pull.py).
    envelope = json.loads((cluster.folder / "v1.receipt.json").read_bytes())
    statement = base64.b64decode(envelope["payload"]).decode()
    for old, new in ((cluster.built["oci"]["manifest"], manifest), (cluster.built["oci"]["config"], config)):
        statement = statement.replace(old.split(":")[1], new.split(":")[1])
    forged = json.dumps({**envelope, "payload": base64.b64encode(statement.encode()).decode()}).encode()
    attach(RegistryClient(), to, subject, forged, Store(cluster.store), lambda event: None)
    _put_manifest(cluster.repository, "latest", body, subject.media_type)
    for code, _, err in _pull_everywhere(cluster):
        assert code == 1 and "no attached receipt verifies" in err and "signature" in err, err
    _assert_kept(cluster, config)

    # The genuine image under the tag again, but its fallback index re-pointed at an edited receipt only.
    genuine = _served(cluster.repository, cluster.pushed["manifest"])
    _put_manifest(cluster.repository, "latest", genuine, subject.media_type)
    fallback = oci.fallback_tag(cluster.pushed["manifest"])
    name = cluster.repository.removeprefix(f"{REGISTRY}/")
    kept = requests.get(f"http://{REGISTRY}/v2/{name}/manifests/{fallback}", timeout=10,
                        headers={"Accept": oci.OCI_INDEX}).content
    edited = base64.b64decode(envelope["payload"]).decode().replace('"sparkimg"', '"sparkimG"', 1)
    forged = json.dumps({**envelope, "payload": base64.b64encode(edited.encode()).decode()}).encode()
    for blob in (oci.EMPTY, forged):
        _put_blob(cluster.repository, blob)
    artifact = oci.receipt_artifact(oci.Descriptor(subject.media_type, cluster.pushed["manifest"], len(genuine)),
                                    forged)
    _put_manifest(cluster.repository, sha256_prefixed(artifact), artifact, oci.OCI_MANIFEST)
    _put_manifest(cluster.repository, fallback, oci.referrers_index(None, artifact), oci.OCI_INDEX)
    try:
        for code, _, err in _pull_everywhere(cluster):
            assert code == 1 and "no attached receipt verifies" in err and "signature" in err, err
        _assert_kept(cluster, config)
    finally:
        _put_manifest(cluster.repository, fallback, kept, oci.OCI_INDEX)


def test_another_manifest_under_the_tag_is_refused_on_every_node(cluster: Cluster) -> None:
    _require_pulled(cluster)
    body, manifest, config = _other_image(cluster)
    subject = oci.Descriptor(json.loads(body)["mediaType"], manifest, len(body))
    # The genuine, trusted receipt attached to the attacker's manifest: it verifies, but it names another.
    attach(RegistryClient(), ImageRef.parse(cluster.repository), subject,
           (cluster.folder / "v1.receipt.json").read_bytes(), Store(cluster.store), lambda event: None)
    _put_manifest(cluster.repository, "latest", body, subject.media_type)
    for code, _, err in _pull_everywhere(cluster):
        assert code == 1 and f"names manifest {cluster.built['oci']['manifest']}" in err, err
    _assert_kept(cluster, config)
    # The same manifest with other bytes (the registry stores what it is given): another digest, no receipt.
    spaced = json.dumps(json.loads(body), indent=1).encode()
    _put_manifest(cluster.repository, "latest", spaced, subject.media_type)
    for code, _, err in _pull_everywhere(cluster):
        assert code == 1 and "no receipt is attached" in err, err
    _assert_kept(cluster, config)


def _require_pulled(cluster: Cluster) -> None:
    """Each node has the genuine image under the tag (pulled by the first test, or now)."""
    for node in cluster.nodes:
        if node.image_id(cluster.tag) != cluster.built["oci"]["config"]:
            _put_manifest(cluster.repository, "latest", _served(cluster.repository, cluster.pushed["manifest"]),
                          json.loads(_served(cluster.repository, cluster.pushed["manifest"]))["mediaType"])
            code, _, err = node.sparkimg(cluster.store, "pull", cluster.tag, "--key", cluster.trusted, "--json")
            assert code == 0, err


def _assert_kept(cluster: Cluster, refused_config: str) -> None:
    for node in cluster.nodes:
        assert node.image_id(cluster.tag) == cluster.built["oci"]["config"], node.name
        assert node.image_id(refused_config) is None, f"{node.name} pulled the refused image"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_head_registry_asks_for_a_login_and_push_and_pull_send_docker_credentials(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scripts/registry-head with its config (htpasswd on), on a free loopback port: push without
    credentials is refused; with the Docker config's credentials, push and a node's pull work."""
    import subprocess

    from tests.support import REPO

    address = f"127.0.0.1:{_free_port()}"
    env = {**os.environ, "SPARKIMG_REGISTRY_ADDR": address, "SPARKIMG_REGISTRY_DIR": str(tmp_path / "head")}
    script = str(REPO / "scripts" / "registry-head")
    subprocess.run([script, "user", "rank"], input="s3cret\n", text=True, env=env, check=True, capture_output=True)
    started = subprocess.run([script, "start"], text=True, env=env, capture_output=True, check=False)
    assert started.returncode == 0, started.stderr
    try:
        config = tmp_path / "docker"
        config.mkdir()
        (config / "config.json").write_text("{}")
        monkeypatch.setenv("DOCKER_CONFIG", str(config))
        target = f"{address}/sparkimg-test/head-{uuid.uuid4().hex[:8]}"
        receipt = str(cluster.folder / "v1.receipt.json")
        code, _, err = sparkimg(cluster.store, "push", str(cluster.spec), "--to", target, "--receipt", receipt)
        assert code == 1 and "login" in err and "Traceback" not in err, err
        auth = base64.b64encode(b"rank:s3cret").decode()
        (config / "config.json").write_text(json.dumps({"auths": {address: {"auth": auth}}}))
        code, pushed, err = sparkimg(cluster.store, "push", str(cluster.spec), "--to", target, "--tag", "latest",
                                     "--receipt", receipt, "--json")
        assert code == 0 and pushed["manifest"] == cluster.built["oci"]["manifest"], err
        node = cluster.nodes[0]
        code, pulled, err = node.sparkimg(cluster.store, "pull", f"{target}:latest", "--key", cluster.trusted,
                                          "--json")
        assert code == 0 and pulled["config"] == cluster.built["oci"]["config"], err
        assert node.image_id(f"{target}:latest") == cluster.built["oci"]["config"]
    finally:
        subprocess.run([script, "stop"], env=env, capture_output=True, check=False)
