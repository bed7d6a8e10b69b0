"""``run``: parse, run one handler, and turn errors into exit codes (the only place that does).

Only argparse is imported before the arguments are parsed, so ``sparkimg --version`` and
``--help`` cost a few tens of milliseconds; a handler imports what its task needs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sparkimg.cli.parser import parser
from sparkimg.errors import EngineError, SparkimgError


def run(argv: Sequence[str] | None = None) -> int:
    args = parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
    from sparkimg._internal import signals

    with signals.handled():
        code = _run(args)
        if (signum := signals.received()) is not None and code != 128 + signum:  # raised and swallowed
            return _stopped(f"stopped by {signal_name(signum)}", 128 + signum)
        return code


def _run(args: argparse.Namespace) -> int:
    from sparkimg._internal.signals import Interrupted
    from sparkimg.cli import render

    render.use_json_logs(args.json_logs)
    try:
        try:
            if args.command == "build":
                from sparkimg.cli.quick import noop_build

                answered = noop_build(args)  # a stamp that cannot be read or checked answers None
                if answered is not None:
                    return answered
            from sparkimg.cli import commands

            return commands.HANDLERS[args.command](args)
        except BrokenPipeError:
            raise  # the reader went away: ``cli.main`` exits quietly
        except OSError as exc:  # a path that is a folder, read-only, or on a full disk: said, not raised
            raise SparkimgError(f"{exc.filename or 'a file'}: {exc.strerror or exc}",
                                hint="check that the path is where you meant, writable, and that its disk has "
                                "room; nothing half-written was kept") from exc
        except Exception as exc:
            if type(exc).__module__.startswith("python_on_whales"):  # the engine went away mid-call
                raise EngineError(f"the engine stopped answering: {str(exc).strip().splitlines()[-1][:300]}",
                                  hint="check that the engine runs (`sparkimg doctor`), then run the command "
                                  "again: what it had built is kept") from exc
            raise
    except SparkimgError as exc:
        if args.debug:
            import traceback

            traceback.print_exc()
        if getattr(args, "json", False):
            from sparkimg.formats.results import ERROR

            render.print_json({"schema": ERROR, **exc.to_json()})
        render.error(exc)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        if isinstance(exc, Interrupted):
            return _stopped(f"stopped by {signal_name(exc.signum)}", exc.exit_code)
        return _stopped("interrupted", 130)


def _stopped(said: str, exit_code: int) -> int:
    """A command a signal stopped: the store work folders it leased that a cleanup cut short by the
    signal left are removed, and it says so (``exit_code``, 128 + the signal)."""
    from sparkimg.cli import render
    from sparkimg.store.content import remove_own_work

    remove_own_work()
    render.error_text(f"{said}; nothing half-written was kept", exit_code=exit_code)
    return exit_code


def signal_name(signum: int) -> str:
    import signal

    return signal.Signals(signum).name
