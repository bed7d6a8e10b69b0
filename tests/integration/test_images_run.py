"""Images that run (issue 40): the demo's spec says how it starts (``run``), so the serve line
``scripts/demo`` prints, ``docker run --rm $(sparkimg run-args RECEIPT) IMAGE``, runs it with no
command given; the start is in the image config and in the signed receipt."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from sparkimg.engine.protocol import Engine

from .helpers import cli
from .nodes import signed_demo


def test_the_printed_serve_command_runs_the_demo(
    tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    demo, store, _, built = signed_demo(tmp_path)
    image = built["image"]["reference"]
    code, args, err = cli(capsys, store, "run-args", built["receipt"], "--root", str(demo.parent.parent), "--json")
    assert code == 0, err
    ran = subprocess.run([engine.client, "run", "--rm", "--network", "none", *args["args"], image],
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert "sparkimg demo serving: kernel libsparkimg_demo.so | six 1.16.0" in ran.stdout, ran.stdout
    assert "SPARKIMG_RUNTIME_PATCH=1" in ran.stdout  # the mounted runtime file run-args gave it
    config = json.loads(subprocess.run([engine.client, "image", "inspect", image], capture_output=True, text=True,
                                       check=True).stdout)[0]["Config"]
    assert config["WorkingDir"] == "/opt/sparkimg" and config["Cmd"][:2] == ["python3", "-c"]
    statement = json.loads(base64.b64decode(json.loads(Path(built["receipt"]).read_text())["payload"]))
    run = statement["predicate"]["buildDefinition"]["externalParameters"]["run"]
    assert run["workdir"] == "/opt/sparkimg" and run["cmd"] == config["Cmd"]
    engine.remove_image(image)
