"""A large layer on the real engine and registry (issue 22; bench/scale.py measures the real 581 MB
cuBLAS wheel): a compile layer writes a 200 MB wheel of incompressible data, and sparkimg stores
its layer uncompressed (blob digest = diff_id, written and hashed in one pass), hands it to the
engine, rebuilds a patch change without touching it, pushes it once, builds the same digests
from another empty store, and pushes it zstd-compressed from each store with another thread count
to the same blobs."""

from __future__ import annotations

import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from sparkimg.engine.protocol import Engine
from sparkimg.formats import oci
from sparkimg.formats.canonical import hex_of

from .helpers import cached, cli, spec_text

SIZE = 200 << 20
# Seeded, so both builds write the same bytes; random bytes do not compress (a gzip step would show).
# The compile writes the large wheel and a small one whose content is the command's argument.
BIG_WHEEL = f"""\
import random, sys, zipfile
def wheel(dist, files):
    with zipfile.ZipFile(f"/out/{{dist}}-1.0-py3-none-any.whl", "w", zipfile.ZIP_STORED) as out:
        meta = f"Metadata-Version: 2.1\\nName: {{dist}}\\nVersion: 1.0\\n".encode()
        for name, body in [*files, (f"{{dist}}-1.0.dist-info/METADATA", meta),
                           (f"{{dist}}-1.0.dist-info/WHEEL",
                            b"Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"),
                           (f"{{dist}}-1.0.dist-info/RECORD", b"")]:
            out.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), body)
wheel("big", [("big/__init__.py", b""), ("big/blob.bin", random.Random(22).randbytes({SIZE}))])
wheel("tiny", [("tiny/__init__.py", sys.argv[1].encode())])
"""
PATCH_SET = "patches:\n  - name: demo\n    dir: patches/demo\n    mode: bake\n"


def _blob(store: Path, digest: str) -> Path:
    return store / "blobs" / "sha256" / hex_of(digest)


def test_a_200_mb_layer_is_stored_uncompressed_rebuilt_never_and_pushed_once(
    project: object, tmp_path: Path, engine: Engine, demo_base: str, registry: str,
    capsys: pytest.CaptureFixture[str]
) -> None:
    spec = project(spec_text(demo_base, "python3 /src/big_wheel.py one", extra=PATCH_SET))  # type: ignore[operator]
    (spec.parent / "kernel" / "big_wheel.py").write_text(BIG_WHEEL)
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    code, built, err = cli(capsys, store, "build", str(spec), "--json", "--quiet")
    assert code == 0, err
    reference = built["image"]["reference"]
    manifest = oci.BaseImage(_blob(store, built["oci"]["manifest"]).read_bytes(),
                             _blob(store, built["oci"]["config"]).read_bytes())
    new = manifest.manifest_json["layers"][-3:]  # the small wheel's layer, the large one's, the patch set's
    diff_ids = built["oci"]["diff_ids"]
    assert [d["digest"] for d in new] == diff_ids  # uncompressed: the blob is the tar
    assert {d["mediaType"] for d in new} == {oci.layer_media_type(manifest)}
    assert new[0]["size"] < 1 << 20 < SIZE < new[1]["size"]  # the large wheel has a layer of its own
    large = _blob(store, diff_ids[1])
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
    assert rebuilt["oci"]["diff_ids"][:2] == diff_ids[:2] and rebuilt["oci"]["diff_ids"][2] != diff_ids[2]
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

    # Compressed on the way out, by each store on its own, with 1 and with 2 threads: the same blobs.
    pushes = []
    for where, threads in ((store, "1"), (tmp_path / "store2", "2")):
        target = f"{registry}/sparkimg-test/scale-zstd-{uuid.uuid4().hex[:8]}"
        code, done, err = cli(capsys, where, "push", str(spec), "--to", target, "--compression", "zstd",
                              "--threads", threads, "--json")
        assert code == 0, err
        assert done["built_manifest"] == rebuilt["oci"]["manifest"] != done["manifest"]
        pushes.append(done)
    assert pushes[0]["manifest"] == pushes[1]["manifest"]
    assert [b["digest"] for b in pushes[0]["blobs"]] == [b["digest"] for b in pushes[1]["blobs"]]
    assert all(b["how"] == "uploaded" for b in (pushes[0]["blobs"][-3], pushes[1]["blobs"][-3]))

    # The compile writes the small wheel anew and the large one to the same bytes: only the small
    # wheel's layer is written again; the large one's blob stays as it was.
    spec.write_text(spec.read_text().replace("big_wheel.py one", "big_wheel.py two"))
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    code, recompiled, err = cli(capsys, store, "build", str(spec), "--json", "--quiet")
    assert code == 0, err
    assert not cached(recompiled)["kernel"]  # the compile ran again
    now = recompiled["oci"]["diff_ids"]
    assert now[0] != diff_ids[0] and now[1] == diff_ids[1]
    assert (large.stat().st_ino, large.stat().st_mtime_ns) == before
    engine.remove_image(recompiled["image"]["reference"])
