"""The no-op answer, before anything else is imported: ``sparkimg build SPEC`` whose stamp holds
(``image.stamp``) prints what the stamped build said and exits 0, in tens of milliseconds, most
of them the interpreter's start (a warm ``docker build`` takes about 0.1 s). The command line is
read here only when it is one this module knows whole: ``[--store DIR] build SPEC`` with
``--json``, ``--quiet``, ``--key``, ``--receipt`` or ``--record-host``; anything else (another
option, ``--json-logs``, ``--check``, an abbreviation, a mistake) goes to the full parser, which
may answer from the stamp too (``cli.quick``), or builds.

Standard library only, apart from the stamp and the engine API leaf it checks with.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from sparkimg.image.stamp import Stamp

_VALUED = {"--key": "key", "--receipt": "receipt"}
_FLAGS = {"--json": "json", "--quiet": "quiet", "--record-host": "record_host"}


def asked(argv: Sequence[str]) -> dict[str, Any] | None:
    """The build's options when ``argv`` is a plain build this module reads whole; else None."""
    args = list(argv)
    found: dict[str, Any] = {"store": None, "key": None, "receipt": None, "json": False, "quiet": False,
                             "record_host": False}
    while args and args[0] != "build":
        name, _, value = args.pop(0).partition("=")
        if name != "--store" or found["store"] is not None:
            return None
        found["store"] = value or (args.pop(0) if args else None)
        if not found["store"] or found["store"].startswith("-"):
            return None
    if not args:
        return None
    args.pop(0)
    spec: str | None = None
    while args:
        token = args.pop(0)
        name, equals, value = token.partition("=")
        if name in _VALUED:
            given = value if equals else (args.pop(0) if args else "")
            if not given or given.startswith("-") or found[_VALUED[name]] is not None:
                return None
            found[_VALUED[name]] = given
        elif token in _FLAGS and not found[_FLAGS[token]]:
            found[_FLAGS[token]] = True
        elif token.startswith("-") or spec is not None:
            return None
        else:
            spec = token
    if spec is None:
        return None
    found["spec"] = spec
    return found


def say(found: Stamp, *, json_output: bool, quiet: bool) -> None:
    """What the stamped no-op said, again: its events on stderr as a terminal shows them, then its
    answer on stdout (``--json``: the JSON object it printed)."""
    from sparkimg.cli.lines import event_parts, write

    for event in found.events:
        parts = event_parts(str(event.get("kind")), str(event.get("phase")), event.get("layer"),
                            str(event.get("message")), quiet=quiet)
        if parts is not None:
            write(sys.stderr, parts)
    if json_output:
        print(found.printed)
    else:
        image = found.output.get("image") or {}
        write(sys.stdout, [f"{image.get('reference')}: up to date, nothing built ({image.get('id')})"])


def answer(argv: Sequence[str]) -> int | None:
    """0 when the stamp answered ``argv`` (a plain build), else None: parse and run it fully."""
    options = asked(argv)
    if options is None:
        return None
    from sparkimg.image.stamp import holding

    found = holding(options["spec"], store=options["store"], key=options["key"], receipt=options["receipt"],
                    record_host=options["record_host"])
    if found is None:
        return None
    say(found, json_output=options["json"], quiet=options["quiet"])
    return 0
