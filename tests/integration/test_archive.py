"""``sparkimg save`` / ``sparkimg load`` between machines no registry joins: the demo is built
once on the shared engine and saved; nodes are extra Docker daemons. A node with the base loads
the file without the base's layers (verified first, only the layers it lacks sent); plain
``docker load`` (and ``podman load``, where podman is installed) take the full file; a file whose
receipt does not verify, or whose image is not the one its receipt names, loads nothing."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkimg.formats import oci
from sparkimg.formats.canonical import sha256_prefixed
from tests.support import DEMO_BASE

from .helpers import own_podman_storage
from .nodes import Node, nodes, signed_demo, sparkimg


@dataclass(frozen=True)
class Saved:
    folder: Path
    store: Path
    built: dict[str, Any]
    full: dict[str, Any]
    slim: dict[str, Any]
    nodes: list[Node]

    @property
    def trusted(self) -> str:
        return str(self.folder / "trusted.pub")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory, engine: Any, demo_base: str) -> Iterator[Saved]:
    folder = tmp_path_factory.mktemp("archive")
    demo, store, run, built = signed_demo(folder)
    full = run("save", str(demo), "-o", str(folder / "full.tar"), "--json")
    slim = run("save", built["receipt"], "-o", str(folder / "slim.tar"), "--without-base", "--json")
    try:
        with nodes(2, folder / "daemons") as started:
            yield Saved(folder, store, built, full, slim, started)
    finally:
        engine.remove_image(built["image"]["reference"])


def test_save_writes_the_receipts_image_deterministically(saved: Saved) -> None:
    assert saved.full["manifest"] == saved.built["oci"]["manifest"]
    assert saved.full["config"] == saved.built["oci"]["config"]
    assert len(saved.slim["left_out"]) == 1 and len(saved.slim["layers"]) == 3
    assert saved.slim["size"] < saved.full["size"] / 10
    again = sparkimg(saved.store, "save", str(saved.built["receipt"]), "-o", str(saved.folder / "again.tar"),
                     "--json")[1]
    assert again["sha256"] == saved.full["sha256"]  # same image, same bytes
    with tarfile.open(saved.full["path"]) as archive:
        names = archive.getnames()
        assert names[:2] == ["blobs", "blobs/sha256"] and {"oci-layout", "index.json", "manifest.json"} <= set(names)
        assert {m.mtime for m in archive.getmembers()} == {archive.getmembers()[0].mtime}


def test_a_node_with_the_base_loads_only_the_new_layers(saved: Saved) -> None:
    node = saved.nodes[0]
    node.docker("pull", "-q", DEMO_BASE)
    code, loaded, err = node.sparkimg(saved.store, "load", saved.slim["path"], "--key", saved.trusted, "--json")
    assert code == 0, err
    name = saved.built["image"]["reference"]
    assert loaded["reference"] == name and loaded["sent_layers"] == 3
    assert node.image_id(name) == saved.built["oci"]["config"]
    assert node.layers(name) == loaded["diff_ids"] and loaded["diff_ids"][-3:] == saved.built["oci"]["diff_ids"]
    code, again, err = node.sparkimg(saved.store, "load", saved.slim["path"], "--key", saved.trusted, "--json")
    assert code == 0 and again["sent_layers"] == 0, err  # it has them all now: the config alone goes
    assert loaded["sbom"] == saved.slim["sbom"] is not None and "sbom" in loaded["checks"]  # issue 26


def test_docker_load_and_podman_load_take_the_full_file(saved: Saved, tmp_path: Path) -> None:
    node = saved.nodes[1]
    said = node.docker("load", "-i", saved.full["path"]).stdout
    name = saved.built["image"]["reference"]
    assert name in said
    assert node.image_id(name) == saved.built["oci"]["config"]
    node.docker("image", "rm", name)
    podman = shutil.which("podman")
    if podman is None:
        if os.environ.get("CI") == "true":
            pytest.fail("podman is not installed (apt-get install podman)")
        pytest.skip("podman is not installed")
    root = Path(tempfile.mkdtemp(prefix="spk-", dir="/tmp"))  # podman wants a runroot under 50 characters
    conf = tmp_path / "containers.conf"
    conf.write_text("[containers]\ndefault_ulimits = []\n")
    storage = ["--root", str(root / "root"), "--runroot", str(root / "run"), "--storage-driver", "vfs"]
    try:
        out = subprocess.run([podman, *storage, "load", "-i", saved.full["path"]], capture_output=True, text=True,
                             env={**os.environ, "CONTAINERS_CONF": str(conf)}, check=False)
        assert out.returncode == 0, out.stderr
        found = subprocess.run([podman, *storage, "image", "inspect", "--format", "{{.Id}}|{{.Digest}}", name],
                               capture_output=True, text=True, check=True).stdout.strip()
        image_id, _, digest = found.partition("|")
        assert "sha256:" + image_id.removeprefix("sha256:") == saved.built["oci"]["config"]
        assert digest == saved.built["oci"]["manifest"]
    finally:
        subprocess.run([podman, *storage, "system", "reset", "-f"], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


def _members(path: str) -> dict[str, bytes]:
    with tarfile.open(path) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers()  # type: ignore[union-attr]
                if m.isfile()}


def _write(members: dict[str, bytes], path: Path) -> Path:
    with tarfile.open(path, "w") as archive:
        for name, data in sorted(members.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def _forged(saved: Saved) -> tuple[Path, Path, str]:
    """Two changed copies of the slim file: (a) the attacker's image (one more variable in the
    config, manifest, index and manifest.json all made to agree) with the genuine receipt; (b) the
    genuine image with the receipt's statement changed (its signature no longer matches).
    Returns both and the attacker's config digest."""
    members = _members(saved.slim["path"])
    blob = {name.rsplit("/", 1)[1]: name for name in members if name.startswith("blobs/")}
    index = json.loads(members["index.json"])
    entry = index["manifests"][0]
    manifest = json.loads(members[blob[entry["digest"].split(":")[1]]])
    config = json.loads(members[blob[manifest["config"]["digest"].split(":")[1]]])
    config["config"]["Env"].append("SPARKIMG_EVIL=1")
    config_bytes = oci.encode(config)
    manifest["config"] = {**manifest["config"], "digest": sha256_prefixed(config_bytes), "size": len(config_bytes)}
    manifest_bytes = oci.encode(manifest)
    artifact = json.loads(members[blob[entry["annotations"][oci.RECEIPT_ANNOTATION].split(":")[1]]])
    artifact["subject"] = {**artifact["subject"], "digest": sha256_prefixed(manifest_bytes),
                           "size": len(manifest_bytes)}
    artifact_bytes = oci.encode(artifact)
    other = dict(members)
    for data in (config_bytes, manifest_bytes, artifact_bytes):
        other[oci.blob_path(sha256_prefixed(data))] = data
    entry_other = {**entry, "digest": sha256_prefixed(manifest_bytes), "size": len(manifest_bytes),
                   "annotations": {**entry["annotations"], oci.RECEIPT_ANNOTATION: sha256_prefixed(artifact_bytes)}}
    other["index.json"] = oci.encode({**index, "manifests": [entry_other]})
    docker = json.loads(members["manifest.json"])
    docker[0]["Config"] = oci.blob_path(sha256_prefixed(config_bytes))
    other["manifest.json"] = json.dumps(docker).encode()
    first = _write(other, saved.folder / f"other-{uuid.uuid4().hex[:6]}.tar")

    layer = artifact["layers"][0]
    envelope = json.loads(members[blob[layer["digest"].split(":")[1]]])
    statement = base64.b64decode(envelope["payload"]).decode().replace('"sparkimg"', '"sparkimG"', 1)
    forged = json.dumps({**envelope, "payload": base64.b64encode(statement.encode()).decode()}).encode()
    genuine_artifact = json.loads(members[blob[entry["annotations"][oci.RECEIPT_ANNOTATION].split(":")[1]]])
    genuine_artifact["layers"] = [{**layer, "digest": sha256_prefixed(forged), "size": len(forged)}]
    forged_artifact = oci.encode(genuine_artifact)
    second_members = dict(members)
    second_members[oci.blob_path(sha256_prefixed(forged))] = forged
    second_members[oci.blob_path(sha256_prefixed(forged_artifact))] = forged_artifact
    second_members["index.json"] = oci.encode({**index, "manifests": [
        {**entry, "annotations": {**entry["annotations"], oci.RECEIPT_ANNOTATION: sha256_prefixed(forged_artifact)}}]})
    second = _write(second_members, saved.folder / f"forged-{uuid.uuid4().hex[:6]}.tar")
    return first, second, sha256_prefixed(config_bytes)


def test_a_changed_archive_loads_nothing(saved: Saved) -> None:
    node = saved.nodes[1]
    node.docker("pull", "-q", DEMO_BASE)
    name = saved.built["image"]["reference"]
    before = node.docker("images", "-a", "-q", "--no-trunc").stdout
    other, forged, evil = _forged(saved)
    code, _, err = node.sparkimg(saved.store, "load", str(other), "--key", saved.trusted)
    assert code == 1 and "the receipt names manifest" in err and "Traceback" not in err, err
    code, _, err = node.sparkimg(saved.store, "load", str(forged), "--key", saved.trusted)
    assert code == 1 and "does not verify" in err and "signature" in err, err
    # A layer changed in place: it no longer hashes to its name.
    members = _members(saved.slim["path"])
    new_layer = oci.blob_path(saved.slim["layers"][-1])
    members[new_layer] = members[new_layer][:-1] + bytes([members[new_layer][-1] ^ 1])
    code, _, err = node.sparkimg(saved.store, "load", str(_write(members, saved.folder / "bitflip.tar")), "--key",
                                 saved.trusted)
    assert code == 1 and "does not hash to its name" in err, err
    # The SBOM swapped for an edited one (a package's version changed): the receipt does not name it.
    members = _members(saved.slim["path"])
    index = json.loads(members["index.json"])
    entry = index["manifests"][0]
    artifact = json.loads(members[oci.blob_path(entry["annotations"][oci.SBOM_ANNOTATION])])
    envelope = json.loads(members[oci.blob_path(artifact["layers"][0]["digest"])])
    edited = base64.b64decode(envelope["payload"]).replace(b'"1.16.0"', b'"1.17.0"', 1)
    sbom_forged = json.dumps({**envelope, "payload": base64.b64encode(edited).decode()}).encode()
    subject = oci.Descriptor(entry["mediaType"], entry["digest"], entry["size"])
    sbom_artifact = oci.receipt_artifact(subject, sbom_forged, oci.SBOM_ARTIFACT)
    members[oci.blob_path(sha256_prefixed(sbom_forged))] = sbom_forged
    members[oci.blob_path(sha256_prefixed(sbom_artifact))] = sbom_artifact
    members["index.json"] = oci.encode({**index, "manifests": [
        {**entry, "annotations": {**entry["annotations"], oci.SBOM_ANNOTATION: sha256_prefixed(sbom_artifact)}}]})
    code, _, err = node.sparkimg(saved.store, "load", str(_write(members, saved.folder / "sbom.tar")), "--key",
                                 saved.trusted)
    assert code == 1 and "the SBOM does not verify" in err and "statement sha256" in err, err
    assert node.docker("images", "-a", "-q", "--no-trunc").stdout == before  # untouched
    assert node.image_id(evil) is None and node.image_id(name) is None
    code, _, err = node.sparkimg(saved.store, "load", "/nonexistent.tar", "--key", saved.trusted)
    assert code == 2 and "Traceback" not in err


def test_sparkimg_load_and_pull_into_podman(saved: Saved, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """podman as the node's engine (SPARKIMG_DOCKER=podman, its own storage): `sparkimg load` takes the
    full file (verified first; podman takes no layer by chain, so every layer is sent) and refuses the
    one without the base's layers with the fix; `sparkimg pull` verifies the receipt in the registry,
    pulls by digest over plain HTTP on loopback as docker would, and checks podman's view of it."""
    monkeypatch.setenv("SPARKIMG_DOCKER", "podman")
    store, name = tmp_path / "store", saved.built["image"]["reference"]
    with own_podman_storage(tmp_path, monkeypatch, driver="vfs"):
        code, _, err = sparkimg(store, "load", saved.slim["path"], "--key", saved.trusted)
        assert code == 1 and "podman needs every layer" in err and "without --without-base" in err
        code, loaded, err = sparkimg(store, "load", saved.full["path"], "--key", saved.trusted, "--json")
        assert code == 0, err
        assert (loaded["config"], loaded["manifest"]) == (saved.built["oci"]["config"], saved.built["oci"]["manifest"])
        found = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", name], capture_output=True,
                               text=True, check=True).stdout.strip()
        assert "sha256:" + found == saved.built["oci"]["config"]

        repo = f"127.0.0.1:5000/sparkimg-test/podman-{uuid.uuid4().hex[:8]}"
        monkeypatch.delenv("SPARKIMG_DOCKER")
        code, _, err = sparkimg(saved.store, "push", str(saved.folder / "project" / "layers" / "demo.yaml"),
                                "--to", repo, "--tag", "latest")
        assert code == 0, err
        monkeypatch.setenv("SPARKIMG_DOCKER", "podman")
        code, pulled, err = sparkimg(store, "pull", f"{repo}:latest", "--key", saved.trusted, "--json")
        assert code == 0, err
        assert pulled["manifest"] == saved.built["oci"]["manifest"] and pulled["config"] == saved.built["oci"]["config"]
        assert "engine" in pulled["checks"]
