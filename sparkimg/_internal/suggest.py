"""The "did you mean" of every message that names an unknown key or choice."""

from __future__ import annotations

from collections.abc import Iterable


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice ``word`` most likely misspells, if any is close enough."""
    import difflib  # only for a word that is wrong

    close = difflib.get_close_matches(word, list(choices), n=1)
    return close[0] if close else None
