"""The CLI surface: help with examples, version, bad input without tracebacks."""

from __future__ import annotations

import subprocess
import sys

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
