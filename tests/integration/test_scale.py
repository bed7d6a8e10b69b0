"""A large layer on the real engine and registry (issue 22; bench/scale.py measures the real 581 MB
cuBLAS wheel): a compile layer writes a 200 MB wheel of incompressible data, and sparkimg stores
its layer uncompressed (blob digest = diff_id, written and hashed in one pass), hands it to the
engine, rebuilds a patch change without touching it, pushes it once, and builds the same digests
from another empty store."""

from __future__ import annotations

import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from sparkimg.engine.docker import Engine
from sparkimg.formats import oci
from sparkimg.formats.canonical import hex_of

from .helpers import cli, spec_text

SIZE = 200 << 20
# Seeded, so both builds write the same bytes; random bytes do not compress (a gzip step would show).
BIG_WHEEL = f"""\
import random, zipfile
data = random.Random(22).randbytes({SIZE})
with zipfile.ZipFile("/out/big-1.0-py3-none-any.whl", "w", zipfile.ZIP_STORED) as wheel:
    for name, body in [("big/__init__.py", b""), ("big/blob.bin", data),
                       ("big-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\\nName: big\\nVersion: 1.0\\n"),
                       ("big-1.0.dist-info/WHEEL",
                        b"Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"),
                       ("big-1.0.dist-info/RECORD", b"")]:
        info = zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0))
        wheel.writestr(info, body)
"""
PATCH_SET = "patches:\n  - name: demo\n    dir: patches/demo\n    mode: bake\n"


def _blob(store: Path, digest: str) -> Path:
    return store / "blobs" / "sha256" / hex_of(digest)


def test_a_200_mb_layer_is_stored_uncompressed_rebuilt_never_and_pushed_once(
    project: object, tmp_path: Path, engine: Engine, demo_base: str, registry: str,
    capsys: pytest.CaptureFixture[str]
) -> None:
    spec = project(spec_text(demo_base, "python3 /src/big_wheel.py", extra=PATCH_SET))  # type: ignore[operator]
    (spec.parent / "kernel" / "big_wheel.py").write_text(BIG_WHEEL)
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    code, built, err = cli(capsys, store, "build", str(spec), "--json", "--quiet")
    assert code == 0, err
    reference = built["image"]["reference"]
    manifest = oci.BaseImage(_blob(store, built["oci"]["manifest"]).read_bytes(),
                             _blob(store, built["oci"]["config"]).read_bytes())
    new = manifest.manifest_json["layers"][-2:]  # the wheel's layer, then the patch set's
    diff_ids = built["oci"]["diff_ids"]
    assert [d["digest"] for d in new] == diff_ids  # uncompressed: the blob is the tar
    assert {d["mediaType"] for d in new} == {oci.layer_media_type(manifest)}
    large = _blob(store, diff_ids[0])
    assert large.stat().st_size > SIZE
    with tarfile.open(large, "r:") as archive:  # a plain tar, no compression
        member = archive.getmember("usr/local/lib/python3.11/dist-packages/big/blob.bin")
    assert member.size == SIZE
    # The engine holds it under the config digest sparkimg wrote, and runs it.
    assert engine.image_id(reference) == built["oci"]["config"]
    size = subprocess.run([engine.client, "run", "--rm", "--network", "none", reference, "stat", "-c", "%s",
                           "/usr/local/lib/python3.11/dist-packages/big/blob.bin"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert size == str(SIZE)

    repository = f"{registry}/sparkimg-test/scale-{uuid.uuid4().hex[:8]}"
    code, pushed, err = cli(capsys, store, "push", str(spec), "--to", repository, "--json")
    assert code == 0, err
    assert pushed["manifest"] == built["oci"]["manifest"] and pushed["sent_bytes"] > SIZE

    # A patch change: the large layer is cached (its blob untouched), one small layer is new.
    before = large.stat().st_ino, large.stat().st_mtime_ns
    patch = spec.parent / "patches" / "demo" / "serve.env"
    patch.write_text(patch.read_text() + "SPARKIMG_SCALE=1\n")
    assert cli(capsys, store, "patches", "pin", str(patch.parent))[0] == 0
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    code, rebuilt, err = cli(capsys, store, "build", str(spec), "--json", "--quiet")
    assert code == 0, err
    assert rebuilt["oci"]["diff_ids"][0] == diff_ids[0] and rebuilt["oci"]["diff_ids"][1] != diff_ids[1]
    assert (large.stat().st_ino, large.stat().st_mtime_ns) == before
    code, again, err = cli(capsys, store, "push", str(spec), "--to", repository, "--json")
    assert code == 0, err
    assert 0 < again["sent_bytes"] < 1 << 20  # the patch layer and the config, not the large layer

    # Another empty store (the image gone from the engine) builds the same manifest and config.
    for image in (reference, rebuilt["image"]["reference"]):
        engine.remove_image(image)
    code, second, err = cli(capsys, tmp_path / "store2", "build", str(spec), "--json", "--quiet")
    assert code == 0, err
    assert second["oci"] == rebuilt["oci"]
    engine.remove_image(second["image"]["reference"])
