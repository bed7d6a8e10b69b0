"""``sparkimg completion SHELL``: a completion script for bash, zsh or fish, written by shtab from
the parser itself, so a command or option added to ``parser.py`` completes with no script to edit.

The scripts are static (the shell completes without running Python on each Tab). shtab is imported
here only, by this one command: no other command line loads it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import shtab

from sparkimg.cli.parser import parser

# An argument whose type is not Path that still names a file says so in its metavar
# (``sbom SPEC|RECEIPT|REF``): it completes file names too.
FILE_METAVARS = frozenset({"SPEC", "RECEIPT", "FILE", "PUB", "PATH"})


def script(shell: str) -> str:
    """The completion script for ``shell`` (one of ``parser.SHELLS``), the same bytes every run."""
    root = parser()
    for action in actions(root):
        kind = path_kind(action)
        if kind is not None:
            action.complete = shtab.DIRECTORY if kind == "dir" else shtab.FILE  # type: ignore[attr-defined]
    return shtab.complete(root, shell=shell).rstrip("\n") + "\n"


def path_kind(action: argparse.Action) -> str | None:
    """``dir`` for an argument that names a folder (metavar ``DIR``), ``file`` for one that names a
    file (``type=Path``, or a file word in its metavar), None for any other (it completes no path)."""
    if action.choices is not None or action.nargs == 0:
        return None
    words = set(str(action.metavar or "").split("|"))
    if "DIR" in words:
        return "dir"
    if action.type is Path or words & FILE_METAVARS:
        return "file"
    return None


def actions(root: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """Every argument of the root and of each command."""
    for action in root._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):
                yield from actions(command)
        else:
            yield action
