"""CLI habits people bring from docker and uv: a misspelt command or option gets a "did you mean",
an unknown option is told with the command's own usage, and the global options (--store,
--debug, --json-logs) work after the command as well as before it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkimg.cli import main
from sparkimg.cli.parser import parser


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as ended:
        main(list(argv))
    assert ended.value.code == 2
    return capsys.readouterr().err


def test_a_misspelt_command_or_option_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    said = _refused(capsys, "biuld", "layers/demo.yaml")
    assert "invalid choice: 'biuld'; did you mean 'build'?" in said and "choose from" not in said
    said = _refused(capsys, "build", "layers/demo.yaml", "--chek")
    assert "usage: sparkimg build" in said and "unrecognized arguments: --chek; did you mean --check?" in said
    said = _refused(capsys, "gc", "--dry-rnu")
    assert "usage: sparkimg gc" in said and "did you mean --dry-run?" in said
    assert "did you mean" not in _refused(capsys, "build", "layers/demo.yaml", "--zzzzzz")


@pytest.mark.parametrize("argv", [
    ["--store", "/s", "--debug", "build", "x.yaml"],
    ["build", "x.yaml", "--store", "/s", "--debug"],
    ["build", "--store=/s", "x.yaml", "--debug"],
])
def test_global_options_work_before_or_after_the_command(argv: list[str]) -> None:
    args = parser(argv).parse_args(argv)
    assert (args.store, args.debug, args.json_logs, args.spec) == (Path("/s"), True, False, Path("x.yaml"))


def test_a_global_option_after_the_command_never_undoes_one_before_it() -> None:
    argv = ["--store", "/before", "--json-logs", "plan", "x.yaml"]
    args = parser(argv).parse_args(argv)
    assert (args.store, args.json_logs, args.debug) == (Path("/before"), True, False)
    argv = ["--store", "/before", "plan", "x.yaml", "--store", "/after"]
    assert parser(argv).parse_args(argv).store == Path("/after")  # the last word wins, as in docker
