"""Rendering for a person or a script: events as rich lines on stderr or JSON lines
(``--json-logs``), results as tables on stdout or one JSON object (``--json``).

Text from outside (compile logs, file names, engine output, error messages) is never
read as rich markup: it goes into ``Text`` objects, so ``[/usr/local/cuda]`` prints as is.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from functools import cache
from typing import Any

from rich.console import Console
from rich.text import Text

from ..errors import SparkimgError
from ..events import Event, Kind


@cache
def out() -> Console:
    return Console(highlight=False, soft_wrap=True)


@cache
def err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


class TerminalReporter:
    """Events as lines a person reads; a tool's own output lines are dropped with ``--quiet``."""

    def __init__(self, *, quiet: bool = False) -> None:
        self.quiet = quiet

    def __call__(self, event: Event) -> None:
        if event.kind is Kind.LOG:
            if not self.quiet:
                where = f"{event.layer}:{event.phase}" if event.layer else str(event.phase)
                err().print(Text.assemble((f"[{where}] ", "dim"), event.message))
        elif event.kind is Kind.WARNING:
            warning(event.message)
        else:
            err().print(Text.assemble(("sparkimg ", "cyan"), event.message))


class JsonLinesReporter:
    """One JSON object per event on stderr, for scripts and log collectors."""

    def __call__(self, event: Event) -> None:
        sys.stderr.write(json.dumps(event.to_json(), sort_keys=True) + "\n")
        sys.stderr.flush()


def reporter(*, json_logs: bool, quiet: bool = False) -> TerminalReporter | JsonLinesReporter:
    return JsonLinesReporter() if json_logs else TerminalReporter(quiet=quiet)


def warning(message: str) -> None:
    err().print(Text.assemble(("warning: ", "bold yellow"), message))


def error(exc: SparkimgError, *, json_logs: bool = False) -> None:
    if json_logs:
        sys.stderr.write(json.dumps({"error": exc.message, "hint": exc.hint, "exit_code": exc.exit_code}) + "\n")
    err().print(Text.assemble(("error: ", "bold red"), str(exc)))


def error_text(message: str) -> None:
    err().print(Text(message))


def mismatch(label: str, message: str) -> None:
    err().print(Text.assemble((f"{label}: ", "red"), message))


def line(*parts: str | tuple[str, str]) -> None:
    """One line on stdout; plain strings are literal text, (text, style) pairs are styled."""
    out().print(Text.assemble(*parts))


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str | Text]], *, caption: str | None = None,
          fold: bool = False) -> None:
    from rich.table import Table

    shown = Table(title=Text(title), caption=caption)
    for column in columns:
        shown.add_column(column, overflow="fold" if fold else "ellipsis")
    for row in rows:
        shown.add_row(*(cell if isinstance(cell, Text) else Text(cell) for cell in row))
    out().print(shown)


def state(text: str, style: str) -> Text:
    """A styled table cell."""
    return Text(text, style=style)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))
