"""The CLI surface: help with examples, version, bad input without tracebacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparkimg import __version__
from sparkimg.cli import EXAMPLES, main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert __version__ in capsys.readouterr().out


@pytest.mark.parametrize("command", sorted(EXAMPLES))
def test_every_command_has_an_example(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert EXAMPLES[command] in capsys.readouterr().out


def test_missing_spec_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "does/not/exist.yaml"]) == 2
    err = capsys.readouterr().err
    assert "no such spec file" in err and "Traceback" not in err


def test_console_script_runs() -> None:
    proc = subprocess.run([sys.executable, "-m", "sparkimg.cli", "--help"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0 and "sparkimg" in proc.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--spec", "layers/demo.yaml", "--cache", "/tmp/x", "--quick"], "--quick goes with --verify"),
    (["--spec", "layers/demo.yaml"], "--cache DIR is required"),
    (["--spec", "layers/demo.yaml", "--cache", "/tmp/x", "--image-id", "sha256:1"],
     "--image-id and --python go with --runner host"),
    (["--spec", "layers/demo.yaml", "--cache", "/tmp/x", "--runner", "host", "--verify"],
     "--verify needs --key PUB"),
    (["--spec", "layers/demo.yaml", "--cache", "/tmp/x", "--runner", "host", "--python", "/no/python"],
     "--python /no/python: no such interpreter"),
])
def test_prewarm_usage_errors_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import REPO

    args = [str(REPO / a) if a.startswith("layers/") else a for a in args]
    assert main(["prewarm", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_prewarm_without_a_kernel_set_says_how_to_add_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import REPO

    text = (REPO / "layers" / "demo.yaml").read_text()
    start = text.index("prewarm:")
    spec = tmp_path / "layers" / "demo.yaml"
    spec.parent.mkdir()
    spec.write_text(text[:start] + text[text.index("env:", start):])
    import shutil

    for part in ("build", "patches"):
        shutil.copytree(REPO / part, tmp_path / part)
    assert main(["prewarm", "--spec", str(spec), "--runner", "host", "--list"]) == 2
    err = capsys.readouterr().err
    assert "names no prewarm kernel set" in err and "docs/prewarm.md" in err
