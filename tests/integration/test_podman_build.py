"""podman as the build engine (issue 26): ``SPARKIMG_DOCKER=podman sparkimg build`` runs the
compile containers under podman with the same bounds (memory, CPUs, pids, no network) and hands
the image to podman through the loopback registry; the image is the docker build's, by config
digest; verify-node, run-args and prewarm work against podman's store. Own storage under a
temporary folder, so the host's podman images are not touched."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkimg.engine.protocol import Engine

from .helpers import cli, copy_demo, flashinfer_base, own_podman_storage


@pytest.fixture
def podman_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with own_podman_storage(tmp_path, monkeypatch) as root:
        yield root


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


def test_prewarm_runs_in_an_image_podman_built_and_verify_node_checks_the_cache(
    tmp_path: Path, podman_storage: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The image runner under podman: the demo on the FlashInfer base, built by podman, prewarmed
    inside it (bounded, no network), and verify-node --cache against podman's image."""
    base = flashinfer_base()
    spec = copy_demo(tmp_path / "project")
    text = spec.read_text().replace("image: 127.0.0.1:5000/sparkimg/demo-base:bookworm", f"image: {base}")
    spec.write_text(text.replace("  job_memory: 1g\n  modules:",
                                 "  job_memory: 1g\n  env:\n    LIBRARY_PATH: /opt/cuda-stubs\n  modules:"))
    monkeypatch.setenv("SPARKIMG_DOCKER", "podman")
    store, key, receipt, cache = tmp_path / "store", tmp_path / "k", tmp_path / "fi.receipt.json", tmp_path / "cache"
    assert cli(capsys, store, "keygen", "--out", str(key))[0] == 0
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    code, _, err = cli(capsys, store, "build", str(spec), "--json", "--quiet", "--key", f"{key}.key",
                           "--receipt", str(receipt))
    assert code == 0, err
    code, warmed, err = cli(capsys, store, "prewarm", "--receipt", str(receipt), "--cache", str(cache), "--key",
                            f"{key}.key", "--json", "--quiet")
    assert code == 0 and {m["status"] for m in warmed["modules"]} == {"compiled"}, err
    code, checked, err = cli(capsys, store, "verify-node", "--receipt", str(receipt), "--key", f"{key}.pub",
                             "--cache", str(cache), "--json")
    assert code == 0 and checked["checks"][-1]["stage"] == "cache", err
    shutil.rmtree(cache, ignore_errors=True)
