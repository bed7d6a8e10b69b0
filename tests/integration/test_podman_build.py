"""podman as the build engine (issue 26): ``SPARKIMG_DOCKER=podman sparkimg build`` runs the
compile containers under podman with the same bounds (memory, CPUs, pids, no network) and hands
the image to podman through the loopback registry; the image is the docker build's, by config
digest, and verify-node and run-args work against podman's store. Own storage (vfs) under a
temporary folder, so the host's podman images are not touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkimg.engine.docker import Engine

from .helpers import cli, copy_demo


@pytest.fixture
def podman_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    if shutil.which("podman") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("podman is not installed (apt-get install podman)")
        pytest.skip("podman is not installed")
    root = Path(tempfile.mkdtemp(prefix="spk-", dir="/tmp"))  # podman wants a runroot under 50 characters
    storage = tmp_path / "storage.conf"
    storage.write_text(f'[storage]\ndriver = "vfs"\nrunroot = "{root}/run"\ngraphroot = "{root}/root"\n')
    monkeypatch.setenv("CONTAINERS_STORAGE_CONF", str(storage))
    try:
        yield root
    finally:
        subprocess.run(["podman", "system", "reset", "-f"], capture_output=True, check=False,
                       env={**os.environ, "CONTAINERS_STORAGE_CONF": str(storage)})
        shutil.rmtree(root, ignore_errors=True)


def test_the_demo_builds_with_podman_as_the_engine_into_the_docker_builds_image(
    tmp_path: Path, engine: Engine, demo_base: str, podman_storage: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    demo = copy_demo(tmp_path / "project")
    assert cli(capsys, tmp_path / "s0", "lock", str(demo))[0] == 0
    assert cli(capsys, tmp_path / "s0", "keygen", "--out", str(tmp_path / "k"))[0] == 0
    code, docker_built, err = cli(capsys, tmp_path / "docker-store", "build", str(demo), "--json", "--quiet",
                                  "--receipt", str(tmp_path / "docker.receipt.json"))
    assert code == 0, err
    engine.remove_image(docker_built["image"]["reference"])

    monkeypatch.setenv("SPARKIMG_DOCKER", "podman")
    receipt = tmp_path / "podman.receipt.json"
    code, built, err = cli(capsys, tmp_path / "podman-store", "build", str(demo), "--json", "--quiet",
                           "--key", str(tmp_path / "k.key"), "--receipt", str(receipt))
    assert code == 0, err
    assert built["layers"][0]["cached"] is False  # compiled under podman, not handed back from a cache
    assert built["oci"] == docker_built["oci"]  # the same manifest, config and diff_ids as the docker build
    found = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}|{{.Digest}}",
                            built["image"]["reference"]], capture_output=True, text=True, check=True).stdout.strip()
    image_id, _, digest = found.partition("|")
    assert "sha256:" + image_id == built["oci"]["config"] and digest == built["oci"]["manifest"]

    code, checked, err = cli(capsys, tmp_path / "podman-store", "verify-node", "--receipt", str(receipt), "--key",
                             str(tmp_path / "k.pub"), "--patches", str(demo.parent.parent / "patches" / "demo"),
                             "--json")
    assert code == 0 and checked["ok"], err
    code, said, err = cli(capsys, tmp_path / "podman-store", "run-args", str(receipt), "--key",
                          str(tmp_path / "k.pub"), "--root", str(demo.parent.parent))
    assert code == 0 and "runtime.conf:ro" in said, err

    code, again, err = cli(capsys, tmp_path / "podman-store", "build", str(demo), "--json", "--quiet",
                           "--key", str(tmp_path / "k.key"), "--receipt", str(receipt))
    assert code == 0 and again["oci"] == built["oci"], err  # a rerun under podman builds nothing
    assert all(layer["cached"] for layer in again["layers"])
