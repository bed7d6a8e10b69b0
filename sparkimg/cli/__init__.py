"""The ``sparkimg`` command line: ``fast`` (a no-op build answered from its stamp before anything
else loads), ``parser`` (one subcommand per user task, with examples), ``commands`` (each handler
parses, calls one ``sparkimg.api`` function and renders it), ``render`` (events and tables for a
terminal, or JSON lines) and ``run`` (parse, run one handler, turn errors into exit codes)."""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """``sparkimg``: a no-op build answered from its stamp, else the full command line."""
    from sparkimg.cli.fast import answer

    answered = answer(sys.argv[1:] if argv is None else argv)
    if answered is not None:
        return answered
    from sparkimg.cli.run import run

    return run(argv)


__all__ = ["main"]
