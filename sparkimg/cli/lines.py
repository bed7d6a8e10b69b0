"""Lines for a person: a styled prefix on a terminal (ANSI colour, unless NO_COLOR or a dumb
terminal), the text as it is. Standard library only, so the no-op answer (``cli.fast``) writes
the same lines as every other command without loading rich or the event types."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import IO

Styled = tuple[str, str]  # (text, style)
Cell = str | Styled

CODES = {"dim": "2", "bold": "1", "red": "31", "green": "32", "yellow": "33", "cyan": "36",
         "bold red": "1;31", "bold yellow": "1;33"}


def colour(stream: IO[str]) -> bool:
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def write(stream: IO[str], parts: Sequence[Cell]) -> None:
    coloured = colour(stream)
    text = "".join(p if isinstance(p, str) else (f"\033[{CODES.get(p[1], '0')}m{p[0]}\033[0m" if coloured else p[0])
                   for p in parts)
    stream.write(text + "\n")
    stream.flush()


def event_parts(kind: str, phase: str, layer: str | None, message: str, *, quiet: bool) -> list[Cell] | None:
    """How a terminal shows one event (``events.Event``'s fields, by value): a tool's own output
    line (``log``) under its layer and phase, dropped with ``--quiet``; a warning; anything else
    as a step. None: nothing to show."""
    if kind in ("log", "progress"):
        if quiet:
            return None
        return [(f"[{f'{layer}:{phase}' if layer else phase}] ", "dim"), message]
    if kind == "warning":
        return [("warning: ", "bold yellow"), message]
    return [("sparkimg ", "cyan"), message]
