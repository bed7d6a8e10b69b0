"""The CLI surface: help with examples, version, bad input without tracebacks."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sparkimg import __version__
from sparkimg.cli import main
from sparkimg.cli.parser import EXAMPLES, chosen, parser
from sparkimg.cli.render import JsonLinesReporter
from sparkimg.events import Event, Kind, Phase


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert __version__ in capsys.readouterr().out


def _commands() -> list[str]:
    """The subcommands the real parser has (not the keys of EXAMPLES)."""
    actions = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(actions[0].choices)


def _invocations(example: str) -> list[list[str]]:
    """Every ``sparkimg ...`` command line inside an example (lines, ``&&`` chains, ``$(...)``, pipes,
    redirections, comments)."""
    found = []
    for line in example.splitlines():
        for part in re.split(r"&&|\$\(|\)|\||>", line.split("  #")[0]):
            words = shlex.split(part)
            if "sparkimg" in words:
                found.append(words[words.index("sparkimg") + 1:])
    return found


@pytest.mark.parametrize("command", _commands())
def test_every_command_has_an_example_the_parser_accepts(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert command in EXAMPLES, f"sparkimg {command} has no example"
    invocations = _invocations(EXAMPLES[command])
    assert invocations, EXAMPLES[command]
    for words in invocations:
        assert parser().parse_args(words).command == command, words
        # the parser built for this command line alone reads it as the whole parser does
        assert parser(words).parse_args(words) == parser().parse_args(words), words
        for front in (["--debug", "--store", "build"], ["--store=/s", "--json-logs"]):
            assert parser([*front, *words]).parse_args([*front, *words]) == parser().parse_args([*front, *words])
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert EXAMPLES[command] in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--help"], ["--sto", "build", "lock", "s.yaml"], ["--version"], [], ["nope"],
                                  ["--store"], ["--json-logs", "-h", "build"]])
def test_a_command_line_naming_no_command_first_builds_every_command(argv: list[str]) -> None:
    assert chosen(argv) is None
    subcommands = next(a for a in parser(argv)._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(subcommands.choices) == _commands()


def test_no_example_names_a_command_that_does_not_exist() -> None:
    assert sorted(EXAMPLES) == _commands()


def test_json_logs_writes_one_object_per_event(capsys: pytest.CaptureFixture[str]) -> None:
    reporter = JsonLinesReporter()
    reporter(Event(Phase.COMPILE, "[/usr/local/cuda] is not markup", "kernel", Kind.LOG))
    reporter(Event(Phase.COMPILE, "compile kernel: done", "kernel", Kind.DONE, {"wall_s": 3.1}))
    lines = capsys.readouterr().err.splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["log", "done"]
    assert json.loads(lines[1])["figures"] == {"wall_s": 3.1} and json.loads(lines[0])["layer"] == "kernel"


def test_json_logs_reports_an_error_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--json-logs", "check", "does/not/exist.yaml"]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert json.loads(first)["exit_code"] == 2


def test_log_lines_are_never_markup(capsys: pytest.CaptureFixture[str]) -> None:
    from sparkimg.cli.render import TerminalReporter

    TerminalReporter()(Event(Phase.COMPILE, "nvcc: [/usr/local/cuda] [bold]x[/] done", "kernel", Kind.LOG))
    assert "[/usr/local/cuda] [bold]x[/] done" in capsys.readouterr().err


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
    from tests.support import REPO

    args = [str(REPO / a) if a.startswith("layers/") else a for a in args]
    assert main(["prewarm", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_prewarm_without_a_kernel_set_says_how_to_add_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support import REPO

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


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_an_output_path_fault_is_exit_1_with_the_path(tmp_path: Path, json_flag: list[str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["keygen", "--out", str(blocker / "key"), *json_flag]) == 1
    out, err = capsys.readouterr()
    assert str(blocker) in err and "Traceback" not in err
    if json_flag:
        assert json.loads(out)["exit_code"] == 1
    assert list(tmp_path.iterdir()) == [blocker]  # nothing half-written


def test_show_receipt_without_run_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sparkimg.formats.canonical import canonical
    from sparkimg.signing import dsse
    from tests.formats import statement

    receipt = tmp_path / "r.json"
    receipt.write_bytes(dsse.Envelope(canonical(statement(metadata=False).to_json())).dumps())
    assert main(["show-receipt", str(receipt)]) == 0
    out = capsys.readouterr().out
    assert "built ? -> ? by https://sparkimg.dev/builders/local/v1 (no invocation id recorded)" in out


def test_a_store_that_cannot_be_made_is_exit_1_with_the_path(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["--store", str(blocker / "store"), "doctor", "--clean", "--json"]) == 1
    err = capsys.readouterr().err
    assert f"cannot create the store at {blocker / 'store'}" in err and "Traceback" not in err
