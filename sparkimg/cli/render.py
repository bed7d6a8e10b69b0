"""Rendering for a person or a script: events as lines on stderr or JSON lines
(``--json-logs``), results as lines and tables on stdout or one JSON object (``--json``).

Text from outside (compile logs, file names, engine output, error messages) is never read
as markup: lines are written as they are, styled only by a prefix on a terminal; tables go
through rich ``Text`` cells. rich is imported only to draw a table, so a no-op build does
not pay for it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sparkimg.cli import lines
from sparkimg.cli.lines import colour, event_parts, write
from sparkimg.errors import SparkimgError
from sparkimg.events import Event, Kind, record

if TYPE_CHECKING:
    from sparkimg.image.check import CheckReport

Styled = lines.Styled
Cell = lines.Cell
_colour = colour  # the one test of "a terminal that takes colour" (cli.lines)


PROGRESS_LINE_S = 5.0  # seconds between two progress lines of one task, where no bar is drawn


class _Lines:
    """Progress as a plain line every ``PROGRESS_LINE_S`` per task, and its last one (a log file,
    a pipe, ``--json-logs``): what a bar would redraw many times a second, said now and then."""

    def __init__(self, write: Callable[[Event], None]) -> None:
        self.write = write
        self.last: dict[str, float] = {}

    def __call__(self, event: Event) -> None:
        task, now = str(event.figures.get("task")), time.monotonic()
        if event.figures.get("finished"):
            self.last.pop(task, None)
        elif now - self.last.setdefault(task, now) < PROGRESS_LINE_S:
            return
        else:
            self.last[task] = now
        self.write(event)


class _Bars:
    """Progress as rich bars on a terminal, one per task (size, rate and ETA), gone when every task
    is done; other lines written meanwhile appear above them (rich's live display takes stderr).
    rich is imported at the first bar only."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                             TimeRemainingColumn(), console=Console(file=sys.stderr), transient=True)
        self.tasks: dict[str, Any] = {}

    def __call__(self, event: Event) -> None:
        task, done, total = str(event.figures.get("task")), event.figures.get("done"), event.figures.get("total")
        if task not in self.tasks:
            if not self.tasks:
                self.bars.start()
            self.tasks[task] = self.bars.add_task(task, total=total if isinstance(total, int) else None)
        self.bars.update(self.tasks[task], completed=done if isinstance(done, int) else 0,
                         total=total if isinstance(total, int) else None)
        if event.figures.get("finished"):
            self.bars.remove_task(self.tasks.pop(task))
            if not self.tasks:
                self.bars.stop()


class TerminalReporter:
    """Events as lines a person reads; a tool's own output lines are dropped with ``--quiet``;
    progress as bars on a terminal, else as a line every few seconds."""

    def __init__(self, *, quiet: bool = False) -> None:
        self.quiet = quiet
        self.progress: Callable[[Event], None] | None = None

    def __call__(self, event: Event) -> None:
        if event.kind is Kind.PROGRESS:
            if self.progress is None:
                self.progress = _Bars() if _colour(sys.stderr) else _Lines(self._line)
            self.progress(event)
        else:
            self._line(event)

    def _line(self, event: Event) -> None:
        parts = event_parts(event.kind.value, event.phase.value, event.layer, event.message, quiet=self.quiet)
        if parts is not None:
            write(sys.stderr, parts)


_json_logs = False  # ``--json-logs``: every line this run writes on stderr is a JSON object


def use_json_logs(on: bool) -> None:
    """Say everything on stderr as JSON lines from now on (``--json-logs``): events, and also the
    warnings, mismatches and errors the CLI says itself, with the same keys."""
    global _json_logs
    _json_logs = on


def json_line(kind: str, message: str, **more: Any) -> None:
    """One ``--json-logs`` line that is not an event (an error, a warning, a mismatch): the event's
    keys (``events.record``) and ``more``."""
    sys.stderr.write(json.dumps({**record(kind, message), **more}, sort_keys=True) + "\n")
    sys.stderr.flush()


class JsonLinesReporter:
    """One JSON object per event on stderr, for scripts and log collectors (progress every few
    seconds per task, and its last)."""

    def __init__(self) -> None:
        self.progress = _Lines(self._write)

    def __call__(self, event: Event) -> None:
        if event.kind is Kind.PROGRESS:
            self.progress(event)
        else:
            self._write(event)

    @staticmethod
    def _write(event: Event) -> None:
        sys.stderr.write(json.dumps(event.to_json(), sort_keys=True) + "\n")
        sys.stderr.flush()


def reporter(*, json_logs: bool, quiet: bool = False) -> TerminalReporter | JsonLinesReporter:
    return JsonLinesReporter() if json_logs else TerminalReporter(quiet=quiet)


def warning(message: str) -> None:
    if _json_logs:
        return json_line(Kind.WARNING.value, message)
    write(sys.stderr, [("warning: ", "bold yellow"), message])


def error(exc: SparkimgError) -> None:
    """The error a command ended with: ``error:`` and ``fix:`` lines, or with ``--json-logs`` one
    JSON line with the event keys (kind ``error``) and the error's own (hint, exit code, problems)."""
    if _json_logs:
        return json_line("error", exc.message, **exc.to_json())
    write(sys.stderr, [("error: ", "bold red"), str(exc)])


def error_text(message: str, *, exit_code: int | None = None) -> None:
    """A line that ends a command without an error object (a signal)."""
    if _json_logs:
        return json_line("error", message, exit_code=exit_code)
    write(sys.stderr, [message])


def mismatch(label: str, message: str) -> None:
    """A finding that fails the command (a digest, a patch file, a blob): ``label: message``."""
    if _json_logs:
        return json_line("error", message, label=label)
    write(sys.stderr, [(f"{label}: ", "red"), message])


def line(*parts: Cell) -> None:
    """One line on stdout; plain strings are literal text, (text, style) pairs are styled."""
    write(sys.stdout, parts)


def state(text: str, style: str) -> Styled:
    """A styled word (a table cell, or part of a line)."""
    return (text, style)


def terminal() -> bool:
    """stdout is a terminal: a long identifier may be shortened to fit a person's screen. Anywhere
    else (a pipe, a file, a log) identifiers are whole: a script or a person pastes them."""
    return sys.stdout.isatty()


def ident(value: str, width: int) -> str:
    """``value`` cut to ``width`` characters on a terminal, whole anywhere else."""
    return value[:width] if terminal() else value


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Cell]], *, caption: str | None = None,
          fold: bool = False, whole: Sequence[str] = ()) -> None:
    """A table on stdout. On a terminal, columns too wide are cut with an ellipsis (or folded),
    except those named in ``whole`` (identifiers a person types again, such as a night's entry),
    which keep their width; anywhere else nothing is cut or wrapped."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    shown = Table(title=Text(title), caption=Text(caption) if caption is not None else None)
    texts = [[Text(cell) if isinstance(cell, str) else Text(cell[0], style=cell[1]) for cell in row] for row in rows]
    for i, column in enumerate(columns):
        if column in whole:
            widest = max([len(column), *(row[i].cell_len for row in texts)])
            shown.add_column(column, no_wrap=True, min_width=widest)
        else:
            shown.add_column(column, overflow="fold" if fold else "ellipsis")
    for row in texts:
        shown.add_row(*row)
    # Off a terminal rich would draw at 80 columns and cut; the table's own width is drawn instead.
    Console(highlight=False, soft_wrap=True, width=None if terminal() else _UNCUT).print(shown)


_UNCUT = 1 << 16  # columns: wider than any table's rows, so nothing is cut


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def check_report(report: CheckReport) -> None:
    """``build --check``: the verdict first, then what differs from the top down, each file with
    the layer and the input that made it."""
    if report.reused:
        line(f"  {len(report.reused)} image layer(s) an earlier check of the same key showed identical were not "
             f"rebuilt ({', '.join(report.reused)}); --recheck rebuilds them")
    if report.identical:
        line(state("identical", "green"), f": {len(report.compared)} digests compared, every one the same "
             f"({report.wall_s:.1f} s for the second build)")
        return
    line(state("DIFFERS", "bold red"), f": {sum(not c.same for c in report.compared)} of {len(report.compared)} "
         "compared digests differ between two builds of the same inputs")
    table("what differs", ["compared", "first build", "second build"],
          [[c.what, c.first, c.second] for c in report.compared if not c.same])
    # Lines, not a table: a path is what a person searches for, and a table would cut it short.
    for d in report.differences:
        line(f"  layer {d.layer} ({d.source}): {d.path}: {d.kind}" + (f" ({d.detail})" if d.detail else ""))
