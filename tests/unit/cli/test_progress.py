"""Progress on long work (issue 36): a bar with size, rate and ETA on a terminal, a plain line every
few seconds per task anywhere else (a log file, a pipe, ``--json-logs``), and its last line always."""

from __future__ import annotations

import io
import json
import time

import pytest

from sparkimg import events
from sparkimg.cli import render
from sparkimg.events import Collected, Kind, Phase, Progress, Steps


def _download(report: events.Reporter, clock: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    """A 100 MiB download in 1 MiB pieces, one piece every 0.1 s of a fake clock."""
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])  # the one clock events and render read
    progress = Progress(report, Phase.FETCH, "download big.whl", 100 << 20)
    for _ in range(100):
        clock[0] += 0.1
        progress.advance(1 << 20)
    progress.finish()


def test_progress_events_come_at_most_every_quarter_second_and_once_when_done(monkeypatch: pytest.MonkeyPatch) -> None:
    said = Collected()
    _download(said, [0.0], monkeypatch)
    assert 25 <= len(said.events) <= 41 and {e.kind for e in said.events} == {Kind.PROGRESS}
    assert said.events[-1].figures == {"task": "download big.whl", "done": 100 << 20, "total": 100 << 20,
                                       "finished": True}
    assert said.events[-1].message == "download big.whl: 100.0 MiB of 100.0 MiB done"


def test_without_a_terminal_a_line_every_few_seconds_and_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    _download(render.reporter(json_logs=False), [0.0], monkeypatch)
    lines = err.getvalue().splitlines()
    assert 2 <= len(lines) <= 3 and lines[-1].endswith("100.0 MiB of 100.0 MiB done"), lines  # 10 s of download
    assert "\x1b" not in err.getvalue()


def test_json_logs_get_the_same_few_lines_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    _download(render.reporter(json_logs=True), [0.0], monkeypatch)
    said = [json.loads(line) for line in err.getvalue().splitlines()]
    assert 2 <= len(said) <= 3 and said[-1]["kind"] == "progress" and said[-1]["figures"]["finished"] is True


def test_on_a_terminal_a_bar_per_task_gone_when_done(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr(render, "_colour", lambda stream: True)
    reporter = render.reporter(json_logs=False)
    _download(reporter, [0.0], monkeypatch)
    assert isinstance(reporter, render.TerminalReporter) and isinstance(reporter.progress, render._Bars)
    assert not reporter.progress.tasks and not reporter.progress.bars.live.is_started
    reporter(events.Event(Phase.FETCH, "base pulled"))  # a line after the bars: written as ever
    assert err.getvalue().rstrip().endswith("base pulled")


def test_a_step_is_found_by_its_name_not_by_its_place() -> None:
    steps = Steps()
    for name in ("source", "container", "normalise"):
        with steps.timed(name):
            pass
    assert steps.took("container") == steps.done[1].wall_s
    assert [step.name for step in steps.done] == ["source", "container", "normalise"]
