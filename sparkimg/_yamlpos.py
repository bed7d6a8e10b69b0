"""YAML loading that remembers where each value came from, so errors can name the line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

Path = tuple[str | int, ...]


@dataclass
class Located:
    """A loaded document plus the 1-based line of every key path in it."""

    data: Any
    lines: dict[Path, int] = field(default_factory=dict)
    duplicates: list[tuple[Path, int]] = field(default_factory=list)

    def line(self, path: Path) -> int:
        """The line of ``path``, or of its nearest ancestor that has one."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), 1)


def load(text: str) -> Located:
    """Parse ``text`` with the safe loader and record line numbers.

    Raises ``yaml.YAMLError`` on a syntax error (its ``problem_mark`` has the line).
    """
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    data = yaml.safe_load(text)
    located = Located(data)
    if node is not None:
        _walk(node, (), located)
    return located


def _walk(node: yaml.Node, path: Path, out: Located) -> None:
    out.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = (*path, key)
            if key in seen:
                out.duplicates.append((child, key_node.start_mark.line + 1))
            seen.add(key)
            out.lines[child] = key_node.start_mark.line + 1
            _walk(value_node, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), out)


def dotted(path: Path) -> str:
    """Render a key path the way users read it: ``layers[0].env.FOO``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text or "(top level)"
