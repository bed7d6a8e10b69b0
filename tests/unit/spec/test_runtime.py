"""``run``: how the image starts (entrypoint, cmd, workdir, user, expose), checked as docker would
take each, written into the image config (a Dockerfile's semantics: a new entrypoint drops the
base's Cmd), shown in ``plan --dockerfile`` and named in the receipt."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkimg.errors import SpecError
from sparkimg.formats import oci
from sparkimg.spec import load_spec
from sparkimg.spec.model import Runtime
from tests.formats import GOOD

RUN = '''run:
  entrypoint: ["python3", "-m", "http.server"]
  workdir: /srv
  user: "1000:1000"
  expose: [8000, "9000/udp", 8000]
'''


def test_a_run_section_loads_and_makes_the_config_fields(project: Callable[[str], Path]) -> None:
    spec = load_spec(project(GOOD + RUN))
    assert spec.run == Runtime(("python3", "-m", "http.server"), None, "/srv", "1000:1000", ("8000/tcp", "9000/udp"))
    assert spec.run.config() == {"Entrypoint": ["python3", "-m", "http.server"], "Cmd": None, "WorkingDir": "/srv",
                                 "User": "1000:1000", "ExposedPorts": {"8000/tcp": {}, "9000/udp": {}}}
    assert spec.run.to_json() == {"entrypoint": ["python3", "-m", "http.server"], "workdir": "/srv",
                                  "user": "1000:1000", "expose": ["8000/tcp", "9000/udp"]}
    assert load_spec(project(GOOD)).run == Runtime() and Runtime().config() == {} and Runtime().to_json() == {}


@pytest.mark.parametrize(("text", "expected"), [
    ('run:\n  cmd: "python3 -m x"\n', "run.cmd: must be a list of strings (docker's exec form)"),
    ("run:\n  entrypoint: []\n", "run.entrypoint: must be a list of strings"),
    ("run:\n  workdir: srv\n", "run.workdir: must be a clean absolute path"),
    ("run:\n  user: 'a b'\n", "run.user: must be a user or UID"),
    ("run:\n  expose: [70000]\n", "run.expose[0]: must be a port 1-65535"),
    ("run:\n  expose: 8000\n", "run.expose: must be a list of ports"),
    ("run:\n  cmdd: [x]\n", "run.cmdd: unknown key; did you mean 'cmd'?"),
])
def test_a_bad_run_section_names_the_field_and_the_fix(project: Callable[[str], Path], text: str,
                                                       expected: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(project(GOOD + text))
    assert expected in str(info.value), str(info.value)


def _base(config: dict[str, object]) -> oci.BaseImage:
    manifest = {"schemaVersion": 2, "mediaType": oci.DOCKER_MANIFEST, "config": {"digest": "sha256:" + "a" * 64},
                "layers": []}
    return oci.BaseImage(json.dumps(manifest).encode(), json.dumps(
        {"architecture": "amd64", "os": "linux", "config": config, "rootfs": {"type": "layers", "diff_ids": []}}
    ).encode())


def test_the_config_takes_the_fields_as_a_dockerfile_would() -> None:
    base = _base({"Cmd": ["bash"], "ExposedPorts": {"22/tcp": {}}, "WorkingDir": "/"})
    made = json.loads(oci.config(base, env={}, labels={}, epoch=0, layers=[],
                                 runtime_fields=Runtime(("serve",), None, "/srv", None, ("8000/tcp",)).config()))
    runtime = made["config"]
    assert runtime["Entrypoint"] == ["serve"] and "Cmd" not in runtime  # ENTRYPOINT drops the base's CMD
    assert runtime["WorkingDir"] == "/srv" and runtime["ExposedPorts"] == {"22/tcp": {}, "8000/tcp": {}}
    kept = json.loads(oci.config(base, env={}, labels={}, epoch=0, layers=[], runtime_fields=Runtime().config()))
    assert kept["config"]["Cmd"] == ["bash"]  # no run section: the base's start stays
