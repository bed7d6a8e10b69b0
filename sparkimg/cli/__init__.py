"""The ``sparkimg`` command line: ``parser`` (one subcommand per user task, with examples),
``commands`` (each handler parses, calls one ``sparkimg.api`` function and renders it),
``render`` (events and tables for a terminal, or JSON lines) and ``main``."""

from sparkimg.cli.main import main

__all__ = ["main"]
