"""Wheels for the base's Python, with the real pip, the real index and the real demo base
(CPython 3.11): a lock that believed the base was 3.12 pins a cp312 wheel, the build asks the
base itself and refuses it, naming both; the next lock follows the base and the wheel's C
extension imports inside the image."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from sparkimg.base.schemes import QUERY, RECORDS, record_name
from sparkimg.engine.protocol import Engine
from sparkimg.formats.scheme import BaseScheme
from sparkimg.store.content import Store

from .helpers import HEADER, cli

PYYAML = HEADER + """\
sources:
  yaml:
    pypi: pyyaml
    version: "6.0.2"
layers:
  - name: yaml
    kind: wheel
    source: yaml
"""


def test_a_wheel_for_another_python_is_refused_and_the_lock_follows_the_base(
    tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(PYYAML.format(name=f"fit-{uuid.uuid4().hex[:8]}", base=demo_base))
    store_root = tmp_path / "store"
    assert cli(capsys, store_root, "lock", str(spec))[0] == 0
    lock_file = tmp_path / "spec.yaml.lock.json"
    config = json.loads(lock_file.read_text())["base"]["config_digest"]
    record = record_name(config, QUERY.read_bytes())
    paths = {k: "/usr/lib/python3/dist-packages" for k in ("purelib", "platlib", "headers", "scripts", "data")}
    believed = BaseScheme("/usr/bin/python3", "3.12.3", paths, (), glibc="2.36")  # 3.12, on Debian 12's glibc
    Store(store_root).write_record(RECORDS, record, believed.to_json())

    assert cli(capsys, store_root, "lock", str(spec), "--update", "yaml")[0] == 0
    assert "-cp312-cp312-" in json.loads(lock_file.read_text())["sources"]["yaml"]["filename"]

    Store(store_root).record_path(RECORDS, record).unlink()  # the build asks the base itself
    code, _, err = cli(capsys, store_root, "build", str(spec), "--quiet")
    assert code == 1 and "does not fit the base's Python 3.11." in err and "cp312" in err, err

    assert cli(capsys, store_root, "lock", str(spec), "--update", "yaml")[0] == 0
    assert "-cp311-cp311-" in json.loads(lock_file.read_text())["sources"]["yaml"]["filename"]
    code, built, err = cli(capsys, store_root, "build", str(spec), "--quiet", "--json")
    assert code == 0, err
    pinned = json.loads(lock_file.read_text())["sources"]["yaml"]
    assert pinned["size"] == Store(store_root).blob(pinned["sha256"]).stat().st_size  # the index's HEAD said so
    reference = built["image"]["reference"]
    inside = subprocess.run([engine.client, "run", "--rm", "--network", "none", reference, "python3", "-c",
                             "import yaml; print(yaml.__version__, yaml.__with_libyaml__)"],
                            capture_output=True, text=True, check=True)
    assert inside.stdout.split() == ["6.0.2", "True"]
    engine.remove_image(reference)
