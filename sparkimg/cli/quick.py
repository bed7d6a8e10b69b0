"""The no-op answer for a build command line ``cli.fast`` does not read whole (``--json-logs``,
another option): ``sparkimg build`` when its stamp holds (``api.noop_build``), given before the
pipeline is imported. When the stamp does not hold, the build goes the whole way
(``commands.cmd_build``)."""

from __future__ import annotations

import argparse

from sparkimg import api
from sparkimg.cli import render
from sparkimg.cli.fast import say
from sparkimg.events import Event


def noop_build(args: argparse.Namespace) -> int | None:
    """Exit 0 with what the stamped no-op printed, or None when the build must run. ``--check``
    always runs (it builds every layer again from scratch, whatever the stamp says), and so does
    ``--prewarm``."""
    if args.prewarm is not None or args.check:
        return None
    found = api.noop_build(args.spec, store=args.store, key=args.key, receipt=args.receipt,
                           record_host=args.record_host, sbom_format=args.sbom_format)
    if found is None:
        return None
    if not args.json_logs:
        say(found, json_output=args.json, quiet=args.quiet)
        return 0
    report = render.reporter(json_logs=True)
    for event in found.events:
        report(Event.from_json(event))
    if args.json:
        render.print_json(found.output)
    else:
        render.line(f"{found.image['reference']}: up to date, nothing built ({found.image['id']})")
    return 0
