"""``run``: parse, run one handler, and turn errors into exit codes (the only place that does).

Only argparse is imported before the arguments are parsed, so ``sparkimg --version`` and
``--help`` cost a few tens of milliseconds; a handler imports what its task needs.
"""

from __future__ import annotations

import argparse
import json
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
            from sparkimg.cli import render
            from sparkimg.store.content import remove_own_work

            remove_own_work()

            render.error_text(f"stopped by {signal_name(signum)}; nothing half-written was kept",
                              exit_code=128 + signum)
            return 128 + signum
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

            print(json.dumps({"schema": ERROR, **exc.to_json()}, indent=2, sort_keys=True))
        render.error(exc)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        from sparkimg.store.content import remove_own_work

        remove_own_work()  # what a cleanup cut short by the signal left
        if isinstance(exc, Interrupted):
            render.error_text(f"stopped by {signal_name(exc.signum)}; nothing half-written was kept",
                              exit_code=exc.exit_code)
            return exc.exit_code
        render.error_text("interrupted; nothing half-written was kept", exit_code=130)
        return 130


def signal_name(signum: int) -> str:
    import signal

    return signal.Signals(signum).name
