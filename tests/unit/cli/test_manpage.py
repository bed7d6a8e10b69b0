"""``sparkimg man``: groff renders the page with every warning on and says nothing; the rendered text
names every command with each of its own options (the global ones once, in their own section) and
its example; the page is the same bytes every run."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

import pytest

from sparkimg.cli.manpage import text
from sparkimg.cli.parser import EXAMPLES, parser
from tests.support import unavailable


def _page(**env: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sparkimg.cli", "man"], capture_output=True, text=True,
                          env={**os.environ, **env}, check=True)
    assert done.stderr == ""
    return done.stdout


@pytest.fixture(scope="module")
def rendered() -> str:
    """The page as ``man`` shows it, plain text (no bold or underline), from groff with all warnings."""
    groff = shutil.which("groff")
    if groff is None:
        unavailable("groff is not installed")
    done = subprocess.run([str(groff), "-man", "-Tutf8", "-ww", "-P-cbou"], input=_page(), capture_output=True,
                          text=True, check=True)
    assert done.stderr == ""  # -ww: every warning groff has
    return done.stdout


def _sections(rendered: str) -> dict[str, str]:
    """The rendered COMMANDS section cut at each command's heading (indented three spaces)."""
    commands = rendered[rendered.index("\nCOMMANDS\n"):rendered.index("\nEXIT STATUS\n")]
    parts = re.split(r"^ {3}(\S+)\n", commands, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _flat(words: str) -> str:
    return " ".join(words.split())


def test_every_command_has_its_section_with_its_options_and_example(rendered: str) -> None:
    root = parser()
    shared = {flag for action in root._actions for flag in action.option_strings} - {"-h", "--help"}
    subcommands = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    sections = _sections(rendered)
    assert list(sections) == list(subcommands.choices)
    for name, command in subcommands.choices.items():
        section = _flat(sections[name])
        assert f"sparkimg {name}" in section
        for action in command._actions:
            for flag in set(action.option_strings) - shared - {"-h", "--help"}:
                assert re.search(rf"(^|[\s\[,]){re.escape(flag)}\b", section), (name, flag)
            if not action.option_strings:
                assert str(action.metavar or "{" + ",".join(action.choices or ()) + "}") in section, (name, action)
        for line in EXAMPLES[name].splitlines():
            assert _flat(line) in section, (name, line)
    globals_ = _flat(rendered[rendered.index("\nGLOBAL OPTIONS\n"):rendered.index("\nCOMMANDS\n")])
    assert all(flag in globals_ for flag in shared)


def test_the_page_is_the_same_bytes_every_run() -> None:
    assert _page() == _page(PYTHONHASHSEED="4242", COLUMNS="31", SOURCE_DATE_EPOCH="0")


def test_text_cannot_become_a_roff_request() -> None:
    assert text(".TH x") == "\\&.TH x"
    assert text("'br") == "\\&'br"
    assert text("a\\b --c  d\n e") == "a\\eb \\-\\-c d e"
    assert text("50 ms \u2026") == "50 ms \\[u2026]"


def test_exit_status_lists_every_code_the_error_hierarchy_sets(rendered: str) -> None:
    """Written from ``errors.exit_codes()``: a new error class with a new code appears by itself."""
    from sparkimg.errors import exit_codes

    status = _flat(rendered[rendered.index("\nEXIT STATUS\n"):rendered.index("\nSEE ALSO\n")])
    for code, meaning in {0: "Success", **exit_codes(), 130: "SIGINT", 141: "closed pipe", 143: "SIGTERM"}.items():
        assert f" {code} {_flat(meaning)}" in status or (f" {code} " in status and meaning in status), (code, status)
    assert exit_codes()[4].startswith("The resource budget cannot be met (e.g. --reserve")
