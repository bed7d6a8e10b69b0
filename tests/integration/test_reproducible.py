"""Bit-for-bit reproducible images on the real engine: sparkimg writes the image itself, two
builds from empty stores give the same digests, and ``build --check`` proves it or names the
file and the layer that differ."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sparkimg.engine.protocol import Engine
from tests.support import SIX_WHEELS

from .helpers import HEADER, cli, copy_demo, spec_text


def _forget(engine: Engine, reference: str) -> None:
    """The image and the engine's build cache gone, so nothing can hand back old bytes."""
    engine.remove_image(reference)
    subprocess.run([engine.client, "builder", "prune", "-af"], capture_output=True, check=False)


def test_the_demo_from_two_empty_stores_has_one_manifest_and_config_and_check_passes(
    tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = copy_demo(tmp_path / "project")
    assert cli(capsys, tmp_path / "s0", "lock", str(demo))[0] == 0
    code, first, _ = cli(capsys, tmp_path / "s1", "build", str(demo), "--json", "--quiet")
    assert code == 0, first
    reference = first["image"]["reference"]
    # The engine's image ID is the config digest sparkimg wrote (docker's classic store).
    assert first["image"]["id"] == first["oci"]["config"] == engine.image_id(reference)
    _forget(engine, reference)

    code, second, _ = cli(capsys, tmp_path / "s2", "build", str(demo), "--json", "--quiet")
    assert code == 0
    assert second["oci"] == first["oci"]
    assert second["image"]["id"] == engine.image_id(reference)

    code, checked, _ = cli(capsys, tmp_path / "s2", "build", str(demo), "--check", "--json", "--quiet")
    assert code == 0, checked["check"]
    assert checked["check"]["identical"] is True
    what = {c["what"] for c in checked["check"]["compared"]}
    assert {"image manifest", "image config", "layer six: diff_id", "layer patches.demo: blob"} <= what
    assert any(w.startswith("compile demo-kernel: ") for w in what)
    receipt = json.loads(Path(checked["receipt"]).read_text())
    import base64

    statement = json.loads(base64.b64decode(receipt["payload"])) if "payload" in receipt else receipt
    internal = statement["predicate"]["buildDefinition"]["internalParameters"]
    assert internal["check"]["result"] == "identical"
    kinds = {s["annotations"]["kind"]: s["digest"]["sha256"] for s in statement["subject"]}
    assert kinds == {"image-config": first["oci"]["config"].split(":")[1],
                     "image-manifest": first["oci"]["manifest"].split(":")[1]}
    engine.remove_image(reference)


DATED = ("python3 -c \"import time, zipfile; z = zipfile.ZipFile('/out/t-0-py3-none-any.whl', 'w'); "
         "[z.writestr(n, d) for n, d in [('t/__init__.py', ''), ('t/built_at.txt', str(time.time_ns())), "
         "('t-0.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: t\\nVersion: 0\\n'), "
         "('t-0.dist-info/WHEEL', 'Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n'), "
         "('t-0.dist-info/RECORD', '')]]\"")


def test_a_layer_that_writes_the_date_fails_check_naming_the_file_and_the_layer(
    project: object, tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = project(spec_text(demo_base, DATED))  # type: ignore[operator]
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    code, checked, _ = cli(capsys, store, "build", str(spec), "--check", "--json", "--quiet")
    assert code == 1
    report = checked["check"]
    assert report["identical"] is False
    differing = {c["what"] for c in report["compared"] if not c["same"]}
    assert "image manifest" in differing and "layer kernel: diff_id" in differing
    files = {(d["layer"], d["path"], d["kind"]) for d in report["differences"]}
    assert ("kernel", "t-0-py3-none-any.whl!/t/built_at.txt", "content") in files
    assert any(layer == "kernel" and path.endswith("/t/built_at.txt") and kind == "content"
               for layer, path, kind in files)
    code, text, _ = cli(capsys, store, "build", str(spec), "--check")
    assert code == 1 and "DIFFERS" in text and "built_at.txt" in text
    engine.remove_image(checked["image"]["reference"])


OLDSIX_SPEC = HEADER + """\
sources:
  six:
    pypi: six
    version: "1.16.0"
    sha256: {sha256}
layers:
  - name: six
    kind: wheel
    source: six
"""

# What pip itself says inside the image: six's version, every six distribution it can see, and
# whether each file the installed RECORD lists is there with its hash (pip's own check of RECORD).
INSPECT_SIX = r"""
import base64, hashlib, importlib.metadata as md, os, six, sys
dists = sorted(d.version for d in md.distributions() if (d.metadata['Name'] or '').lower() == 'six')
dist = md.distribution('six')
bad = []
for f in dist.files:
    if f.hash is None:
        continue
    data = open(f.locate(), 'rb').read()
    if base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode() != f.hash.value:
        bad.append(str(f))
site = '/usr/local/lib/python3.11/dist-packages'
print(six.__version__, dists, sorted(n for n in os.listdir(site) if 'six' in n.lower()), bad,
      open(dist.locate_file('six-1.16.0.dist-info/INSTALLER')).read().strip())
"""


def test_an_older_wheel_in_the_base_is_replaced_without_stale_files(
    tmp_path: Path, engine: Engine, oldsix_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import uuid

    name = f"oldsix-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "spec.yaml"
    spec.write_text(OLDSIX_SPEC.format(name=name, base=oldsix_base, sha256=SIX_WHEELS["1.16.0"]))
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    code, built, err = cli(capsys, store, "build", str(spec), "--json", "--quiet")
    assert code == 0, err
    reference = built["image"]["reference"]
    inside = subprocess.run([engine.client, "run", "--rm", "--network", "none", reference, "python3", "-c",
                             INSPECT_SIX], capture_output=True, text=True, check=True)
    assert inside.stdout.strip() == "1.16.0 ['1.16.0'] ['six-1.16.0.dist-info', 'six.py'] [] sparkimg"
    # The base's pip can take it out again, leaving nothing of six behind.
    gone = subprocess.run([engine.client, "run", "--rm", "--network", "none", reference, "sh", "-c",
                           "python3 -m pip uninstall -y --break-system-packages six >/dev/null 2>&1; "
                           "ls /usr/local/lib/python3.11/dist-packages | grep -ci six || true"],
                          capture_output=True, text=True, check=True)
    assert gone.stdout.strip() == "0"
    engine.remove_image(reference)


def test_a_patch_under_a_folder_link_of_the_base_is_written_through_the_link(
    tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo base is merged-/usr (``/lib -> usr/lib``): a patch for ``/lib/...`` must land in
    ``/usr/lib/...`` and leave the link alone, or the image loses its loader and libraries."""
    import uuid

    folder = tmp_path / "patches" / "libconf"
    folder.mkdir(parents=True)
    (folder / "x.conf").write_text("sparkimg\n")
    (folder / "mounts.txt").write_text("x.conf /lib/sparkimg-test/x.conf\n")
    assert cli(capsys, tmp_path / "s", "patches", "pin", str(folder))[0] == 0
    name = f"links-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "spec.yaml"
    spec.write_text(OLDSIX_SPEC.format(name=name, base=demo_base, sha256=SIX_WHEELS["1.16.0"]) + "patches:\n"
                    "  - name: libconf\n    dir: patches/libconf\n    mode: bake\n    replaces_system_files: true\n")
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    code, built, err = cli(capsys, store, "build", str(spec), "--json", "--quiet")
    assert code == 0, err
    reference = built["image"]["reference"]
    inside = subprocess.run([engine.client, "run", "--rm", "--network", "none", reference, "sh", "-c",
                             "readlink /lib; cat /usr/lib/sparkimg-test/x.conf; ls /lib/x86_64-linux-gnu | wc -l"],
                            capture_output=True, text=True, check=True)
    link, content, libraries = inside.stdout.split()
    assert (link, content) == ("usr/lib", "sparkimg") and int(libraries) > 10
    engine.remove_image(reference)
