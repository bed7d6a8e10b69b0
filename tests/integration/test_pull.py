"""``sparkimg pull`` against the real loopback registry and engine: the receipt travels with the
image (an OCI artifact listed in the ``sha256-HEX`` fallback index, as Distribution 2.8 has no
referrers API); a node pulls only what a trusted receipt names and keeps its image otherwise."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from sparkimg._internal.net.registry import ImageRef, RegistryClient
from sparkimg.distribution.push import attach, put_manifest
from sparkimg.engine.protocol import Engine
from sparkimg.formats import oci
from sparkimg.formats.canonical import sha256_prefixed
from sparkimg.store.content import Store

from .helpers import cli, copy_demo


def _rebuild_with_patch(capsys: pytest.CaptureFixture[str], store: Path, demo: Path, key: Path,
                        receipt: Path) -> dict[str, object]:
    patch = demo.parents[1] / "patches" / "demo" / "serve.env"
    patch.write_text(patch.read_text() + f"VLLM_PULL_TEST={uuid.uuid4().hex}\n")
    assert cli(capsys, store, "patches", "pin", str(patch.parent))[0] == 0
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    code, built, _ = cli(capsys, store, "build", str(demo), "--json", "--quiet", "--key", str(key),
                         "--receipt", str(receipt))
    assert code == 0
    return dict(built)


def test_pull_verifies_the_attached_receipt_and_refuses_a_forged_or_mismatched_one(
    tmp_path: Path, engine: Engine, demo_base: str, registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = copy_demo(tmp_path / "project")
    store = tmp_path / "store"
    for name in ("trusted", "attacker"):
        assert cli(capsys, store, "keygen", "--out", str(tmp_path / name))[0] == 0
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    code, first, _ = cli(capsys, store, "build", str(demo), "--json", "--quiet", "--key",
                         str(tmp_path / "trusted.key"), "--receipt", str(tmp_path / "v1.json"))
    assert code == 0
    repository = f"{registry}/sparkimg-test/pull-{uuid.uuid4().hex[:8]}"
    code, pushed, _ = cli(capsys, store, "push", str(demo), "--to", repository, "--tag", "latest", "--receipt",
                          str(tmp_path / "v1.json"), "--json")
    assert code == 0 and pushed["receipt"]
    tag = f"{repository}:latest"

    code, pulled, err = cli(capsys, store, "pull", tag, "--key", str(tmp_path / "trusted.pub"), "--receipt-out",
                            str(tmp_path / "node.receipt.json"), "--json")
    assert code == 0, err
    assert (pulled["manifest"], pulled["config"]) == (first["oci"]["manifest"], first["oci"]["config"])
    assert pulled["diff_ids"][-3:] == first["oci"]["diff_ids"]
    assert engine.image_id(tag) == first["oci"]["config"]
    # What a rank's launcher runs next: the receipt, the image by digest and the patch files agree.
    assert (tmp_path / "node.receipt.json").read_bytes() == (tmp_path / "v1.json").read_bytes()
    node = ("verify-node", "--receipt", str(tmp_path / "node.receipt.json"), "--key", str(tmp_path / "trusted.pub"),
            "--patches", str(demo.parents[1] / "patches" / "demo-runtime"), "--json")
    code, verified, err = cli(capsys, store, *node)
    assert code == 0 and verified["ok"], err
    # The SBOM pull kept beside the receipt is checked too (issue 26).
    stages = {c["stage"] for c in verified["checks"]}
    assert stages == {"signature", "statement", "sbom", "image", "patches", "platform"}
    assert (tmp_path / "node.sbom.json").is_file()
    _hostile_node_inputs(capsys, store, node, tmp_path)

    # An attacker pushes another image under the same tag with a receipt of its own key.
    second = _rebuild_with_patch(capsys, store, demo, tmp_path / "attacker.key", tmp_path / "v2.json")
    code, _, _ = cli(capsys, store, "push", str(demo), "--to", repository, "--tag", "latest", "--receipt",
                     str(tmp_path / "v2.json"), "--json")
    assert code == 0
    code, _, err = cli(capsys, store, "pull", tag, "--key", str(tmp_path / "trusted.pub"))
    assert code == 1 and "no attached receipt verifies" in err and "signature" in err
    assert engine.image_id(tag) == first["oci"]["config"]  # the node keeps the image it had

    # The trusted receipt of the first image attached to the second: it verifies, but names another manifest.
    to = ImageRef.parse(repository)
    manifest = Store(store).blob(str(second["oci"]["manifest"]).split(":")[1]).read_bytes()  # type: ignore[index]
    attach(RegistryClient(), to, oci.Descriptor(oci.DOCKER_MANIFEST, sha256_prefixed(manifest), len(manifest)),
           (tmp_path / "v1.json").read_bytes(), Store(store), lambda event: None)
    code, _, err = cli(capsys, store, "pull", tag, "--key", str(tmp_path / "trusted.pub"))
    assert code == 1 and f"names manifest {first['oci']['manifest']}" in err
    assert engine.image_id(tag) == first["oci"]["config"]

    # Nothing attached at all: refused before any pull.
    code, _, err = cli(capsys, store, "pull", f"{registry}/sparkimg/demo-base:bookworm", "--key",
                       str(tmp_path / "trusted.pub"))
    assert code == 1 and "no receipt is attached" in err
    engine.remove_image(str(second["image"]["reference"]))  # type: ignore[index]
    engine.remove_image(first["oci"]["config"])  # every name of the first image
    code, verified, _ = cli(capsys, store, *node)
    assert code == 1 and verified["failed_stage"] == "image"
    assert "absent" in json.dumps(verified["checks"])


def test_a_compressed_push_pulls_under_the_build_receipt_and_a_changed_size_does_not(
    tmp_path: Path, engine: Engine, demo_base: str, registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``push --compression``: the registry serves another manifest (the new layers gzip or zstd),
    which the build's receipt still speaks of, because the node gets the signed manifest's bytes
    back from it; a manifest changed in any other way is refused."""
    demo = copy_demo(tmp_path / "project")
    store = tmp_path / "store"
    assert cli(capsys, store, "keygen", "--out", str(tmp_path / "trusted"))[0] == 0
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    code, built, _ = cli(capsys, store, "build", str(demo), "--json", "--quiet", "--key",
                         str(tmp_path / "trusted.key"), "--receipt", str(tmp_path / "r.json"))
    assert code == 0
    repository = f"{registry}/sparkimg-test/packed-{uuid.uuid4().hex[:8]}"
    key = ("--key", str(tmp_path / "trusted.pub"))
    code, pushed, err = cli(capsys, store, "push", str(demo), "--to", repository, "--tag", "gz", "--receipt",
                            str(tmp_path / "r.json"), "--compression", "gzip", "--json")
    assert code == 0, err
    assert pushed["built_manifest"] == built["oci"]["manifest"] != pushed["manifest"]
    assert pushed["compression"].startswith("gzip-6/zlib-")
    served = RegistryClient().manifest_bytes(repository, pushed["manifest"])
    layers = json.loads(served)["layers"]
    assert [d["mediaType"] for d in layers[-3:]] == [oci.DOCKER_LAYER_GZIP] * 3
    assert all(d["size"] < int(d["annotations"][oci.UNCOMPRESSED_SIZE]) for d in layers[-3:])

    engine.remove_image(built["oci"]["config"])  # the node has only the base: the layers come from the registry
    code, pulled, err = cli(capsys, store, "pull", f"{repository}:gz", *key, "--receipt-out",
                            str(tmp_path / "node.json"), "--json")
    assert code == 0, err
    assert (pulled["manifest"], pulled["config"]) == (pushed["manifest"], built["oci"]["config"])
    assert engine.image_id(f"{repository}:gz") == built["oci"]["config"]
    code, verified, err = cli(capsys, store, "verify-node", "--receipt", str(tmp_path / "node.json"), *key, "--json")
    assert code == 0 and verified["ok"], err

    # The same manifest with one layer's recorded size changed, and the trusted receipt attached to it.
    forged = served.replace(f'"{oci.UNCOMPRESSED_SIZE}":"'.encode(), f'"{oci.UNCOMPRESSED_SIZE}":"1'.encode(), 1)
    to = ImageRef.parse(repository)
    put_manifest(RegistryClient(), to, "forged", forged, oci.DOCKER_MANIFEST, sha256_prefixed(forged))
    attach(RegistryClient(), to, oci.Descriptor(oci.DOCKER_MANIFEST, sha256_prefixed(forged), len(forged)),
           (tmp_path / "r.json").read_bytes(), Store(store), lambda event: None)
    code, _, err = cli(capsys, store, "pull", f"{repository}:forged", *key)
    assert code == 1 and f"names manifest {built['oci']['manifest']}" in err

    # zstd: read by Docker 23+, containerd and podman; Docker 20.10 cannot, and the node is told why.
    code, zst, err = cli(capsys, store, "push", str(demo), "--to", repository, "--tag", "zst", "--receipt",
                         str(tmp_path / "r.json"), "--compression", "zstd", "--json")
    assert code == 0 and zst["manifest"] not in (pushed["manifest"], built["oci"]["manifest"]), err
    engine.remove_image(f"{repository}:gz")
    code, _, err = cli(capsys, store, "pull", f"{repository}:zst", *key)
    if int(engine.server_version().split(".")[0]) < 23:
        assert code == 1 and "zstd" in err and "--compression gzip" in err
    else:
        assert code == 0, err


def _hostile_node_inputs(capsys: pytest.CaptureFixture[str], store: Path, node: tuple[str, ...],
                         tmp_path: Path) -> None:
    """What verify-node refuses as build does, with exit 2 and a message, at once: a patch file
    that links out of its folder, a FIFO in its place, a huge "key" (``/dev/zero``)."""
    import os
    import shutil
    import time

    folder = Path(node[node.index("--patches") + 1])
    for name, make in (("link", lambda p: p.symlink_to("/etc/passwd")), ("fifo", os.mkfifo)):
        hostile = tmp_path / name / folder.name  # the receipt knows the set by its folder name
        shutil.copytree(folder, hostile)
        (hostile / "runtime.conf").unlink()
        make(hostile / "runtime.conf")
        args = [*node]
        args[args.index("--patches") + 1] = str(hostile)
        started = time.monotonic()
        code, out, err = cli(capsys, store, *args)
        assert code == 2 and "runtime.conf" in err and time.monotonic() - started < 1.0, (out, err)
        assert ("outside" if name == "link" else "not a regular file") in err
    args = [*node]
    args[args.index("--key") + 1] = "/dev/zero"
    started = time.monotonic()
    code, _, err = cli(capsys, store, *args)
    assert code == 2 and "/dev/zero" in err and "Traceback" not in err and time.monotonic() - started < 1.0, err
