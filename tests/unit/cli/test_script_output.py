"""Output a script reads (issue 40): ``--json-logs`` is JSON Lines and nothing else, an error in
it has the event keys, every ``--json`` result says its schema, a spec's problems come as a list,
and identifiers are whole wherever stdout is not a terminal."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from sparkimg.cli import commands, main, render
from sparkimg.formats.results import ERROR, result_schema

EVENT_KEYS = {"time", "phase", "kind", "layer", "message", "figures"}
BAD_SPEC = """schema: sparkimg/v1
name: demo
platform: linux/sparc
cuda_architectures: []
"""


def _json_lines(text: str) -> list[dict[str, object]]:
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "nothing was written"
    return [json.loads(line) for line in lines]  # every line is one JSON object, or this fails


def test_json_logs_say_an_error_as_one_object_with_the_event_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--json-logs", "check", "does/not/exist.yaml"]) == 2
    (said,) = _json_lines(capsys.readouterr().err)  # no plain "error:" / "fix:" lines beside it
    assert set(said) >= EVENT_KEYS and said["kind"] == "error"
    assert said["exit_code"] == 2 and said["hint"] and "no such spec file" in str(said["message"])


def test_json_logs_say_a_usage_error_as_json_too(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--json-logs", "biuld", "x.yaml"], ["build", "x.yaml", "--chek", "--json-logs"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        (said,) = _json_lines(capsys.readouterr().err)
        assert set(said) >= EVENT_KEYS and said["kind"] == "error" and said["exit_code"] == 2
        assert "did you mean" in str(said["message"]) and str(said["usage"]).startswith("usage: sparkimg")


def test_json_logs_say_warnings_and_mismatches_as_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "a.patch").write_text("one\n")
    (patches / "mounts.txt").write_text("a.patch /etc/a.patch\n")
    assert main(["patches", "pin", str(patches)]) == 0
    (patches / "a.patch").write_text("two\n")
    capsys.readouterr()
    assert main(["--json-logs", "patches", "check", str(patches)]) == 1
    captured = capsys.readouterr()
    said = _json_lines(captured.err)
    assert all(set(s) >= EVENT_KEYS for s in said) and {s["kind"] for s in said} == {"error"}
    assert any("a.patch" in str(s["message"]) for s in said)
    render.use_json_logs(True)
    try:
        render.warning("a <warning> [bold]not markup[/]")
    finally:
        render.use_json_logs(False)
    (warned,) = _json_lines(capsys.readouterr().err)
    assert warned["kind"] == "warning" and warned["message"] == "a <warning> [bold]not markup[/]"


def test_a_spec_s_problems_come_as_a_list_with_file_line_and_field(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(BAD_SPEC)
    assert main(["check", str(spec), "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == ERROR and out["exit_code"] == 2 and out["file"] == str(spec)
    problems = out["problems"]
    assert len(problems) >= 3  # platform, cuda_architectures, base, layers: each apart
    for problem in problems:
        assert problem["file"] == str(spec) and isinstance(problem["line"], int) and problem["field"]
        assert ":" not in problem["field"] and problem["message"]
    assert {p["field"] for p in problems} >= {"platform", "cuda_architectures"}
    assert next(p for p in problems if p["field"] == "platform")["line"] == 3


@pytest.mark.parametrize("command", sorted(commands.HANDLERS))
def test_every_json_result_says_its_schema(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Through ``_emit``, the one way a command prints its result: a result without a schema of its
    own gets the command's; a document of its own format (an SBOM) is printed as it is."""
    args = argparse.Namespace(json=True, command=command)
    assert commands._emit(args, {"a": 1})
    assert json.loads(capsys.readouterr().out) == {"schema": result_schema(command), "a": 1}
    commands._emit(args, {"spdxVersion": "SPDX-2.3"}, document=True)
    assert json.loads(capsys.readouterr().out) == {"spdxVersion": "SPDX-2.3"}


def test_commands_print_json_only_through_emit() -> None:
    """So no result can leave without its schema: the handlers print JSON nowhere else."""
    source = Path(commands.__file__).read_text()
    assert source.count("render.print_json(") == 1 and "json.dumps(data" not in source


def test_keygen_and_patches_results_carry_their_schema(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["keygen", "--out", str(tmp_path / "k"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == "sparkimg-keygen-result/v1"
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "mounts.txt").write_text("")
    assert main(["patches", "pin", str(tmp_path / "p"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == "sparkimg-patches-result/v1"


ENTRY = "20261206T020000Z-2"
DIGEST = "sha256:" + "ab" * 32


def test_a_table_off_a_terminal_keeps_every_identifier_whole(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [[ENTRY, "built", DIGEST, "x" * 150]]
    render.table("nights", ["entry", "status", "image", "note"], rows)
    out = capsys.readouterr().out
    assert ENTRY in out and DIGEST in out and "x" * 150 in out and "…" not in out
    assert render.ident(DIGEST, 12) == DIGEST


def test_on_an_80_column_terminal_the_entry_stays_whole(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")
    rows = [[ENTRY, "built", DIGEST, "x" * 150]]
    render.table("nights", ["entry", "status", "image", "note"], rows, whole=["entry"])
    out = capsys.readouterr().out
    assert ENTRY in out and "…" in out  # the other columns gave way
    assert max(len(line) for line in out.splitlines()) <= 80
    assert render.ident(DIGEST, 12) == DIGEST[:12]


def test_history_piped_prints_whole_entries_and_commits(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from sparkimg.formats.nightly import Entry, Moved
    from sparkimg.nightly.state import State

    state = State(tmp_path / "state")
    commit = "c" * 40
    state.write(Entry(ENTRY, "demo.yaml", "2026-12-06T02:00:00Z", "2026-12-06T02:07:00Z", "failed",
                      failed_stage="build", moved=(Moved("vllm", "git", "b" * 40, commit),)), {})
    assert main(["history", str(tmp_path / "demo.yaml"), "--state", str(state.root)]) == 0
    out = capsys.readouterr().out
    assert ENTRY in out and commit in out and "…" not in out
