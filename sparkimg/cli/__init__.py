"""The ``sparkimg`` command line: ``fast`` (a no-op build answered from its stamp before anything
else loads), ``parser`` (one subcommand per user task, with examples), ``commands`` (each handler
parses, calls one ``sparkimg.api`` function and renders it), ``render`` (events and tables for a
terminal, or JSON lines) and ``run`` (parse, run one handler, turn errors into exit codes)."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


SIGPIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away (`yes | head`)


def main(argv: Sequence[str] | None = None) -> int:
    """``sparkimg``: a no-op build answered from its stamp, else the full command line. A reader
    that goes away (``sparkimg sbom SPEC --json | head -1``) ends it quietly with 141, as it ends
    ``git`` or ``yes``: no traceback, no "disk full"; what it had done (a build signed) stands."""
    try:
        from sparkimg.cli.fast import answer

        answered = answer(sys.argv[1:] if argv is None else argv)
        if answered is not None:
            return answered
        from sparkimg.cli.run import run

        return run(argv)
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush has nowhere to fail.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return SIGPIPE_EXIT


__all__ = ["main"]
