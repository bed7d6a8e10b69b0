"""The problem collector every validator shares: ``file:line: field: message``, all at once.

Kept apart from the spec's sections so any YAML or JSON format loaded with line positions
(``_yamlpos``, ``_located``), a recipe as well as a spec, reports problems the same way: the file, the
line, the dotted field, and how to fix it, with "did you mean" for a misspelt key and
``<operator: ...>`` placeholders collected rather than accepted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sparkimg._internal.suggest import closest
from sparkimg.spec import located as _located

PLACEHOLDER = re.compile(r"^<operator[:\s]\s*(.+?)\s*>$")
# Where a value sits in a document: keys and list indexes from the top, e.g. ("layers", 0, "env").
KeyPath = _located.Path


def type_name(value: Any) -> str:
    """The YAML-ish name of a value's type, for "must be X, not Y"."""
    return "null" if value is None else type(value).__name__


class Checker:
    """Collects problems as ``file:line: field: message``; never stops at the first."""

    def __init__(self, display: str, located: _located.Located) -> None:
        self.display = display
        self.located = located
        self.problems: list[str] = []
        self.placeholders: list[str] = []
        self.warnings: list[str] = []

    def problem(self, path: KeyPath, message: str) -> None:
        line = self.located.line(path)
        self.problems.append(f"{self.display}:{line}: {_located.dotted(path)}: {message}")

    def warn(self, path: KeyPath, message: str) -> None:
        """Something valid that the operator should know (it does not stop anything)."""
        line = self.located.line(path)
        self.warnings.append(f"{self.display}:{line}: {_located.dotted(path)}: {message}")

    def duplicates(self) -> None:
        """Record every key the document gives twice (YAML itself keeps the last silently)."""
        for dup_path, line in self.located.duplicates:
            self.problems.append(f"{self.display}:{line}: {_located.dotted(dup_path)}: duplicate key; keep one of them")

    def keys(self, value: Mapping[str, Any], allowed: tuple[str, ...], path: KeyPath) -> None:
        for key in value:
            if key not in allowed:
                close = closest(str(key), allowed)
                hint = f"did you mean '{close}'?" if close else f"allowed: {', '.join(allowed)}"
                self.problem((*path, str(key)), f"unknown key; {hint}")

    def mapping(self, value: Any, path: KeyPath, what: str) -> dict[str, Any] | None:
        if value is None:
            return None
        if not isinstance(value, dict):
            self.problem(path, f"must be a mapping ({what}), not {type_name(value)}")
            return None
        return value

    def string(
        self, value: Mapping[str, Any], key: str, path: KeyPath, *, required: bool,
        hint: str = "",
    ) -> str | None:
        if key not in value or value[key] is None:
            if required:
                self.problem((*path, key), f"is required{'; ' + hint if hint else ''}")
            return None
        item = value[key]
        if not isinstance(item, str) or not item.strip():
            quote = "; quote it so YAML keeps it as text" if isinstance(item, (int, float)) else ""
            self.problem((*path, key), f"must be a non-empty string, not {type_name(item)}{quote}")
            return None
        match = PLACEHOLDER.match(item)
        if match:
            line = self.located.line((*path, key))
            self.placeholders.append(
                f"{self.display}:{line}: {_located.dotted((*path, key))}: {match.group(1)}"
            )
            return None
        return item

    def report(self, *, allow_placeholders: bool) -> list[str]:
        """Every problem, then (unless allowed) the placeholders the operator must fill in."""
        problems = list(self.problems)
        if self.placeholders and not allow_placeholders:
            problems.append(
                f"{self.display}: {len(self.placeholders)} value(s) must be supplied by the operator "
                "(replace each '<operator: ...>' placeholder):"
            )
            problems.extend(f"  {p}" for p in self.placeholders)
        return problems
