"""YAML loading that remembers where each value came from, so errors can name the line.

Hostile input is refused before it costs anything: no anchors or aliases (an alias bomb
expands before any check could see it, and a spec or recipe writes every value out), no
nesting deeper than ``MAX_DEPTH``, no file larger than ``MAX_BYTES``. The document is
composed once, and its positions and values come from that one node tree.
"""

from __future__ import annotations

import yaml

from sparkimg.spec.located import MAX_BYTES, Located, Path, dotted

__all__ = ["MAX_BYTES", "MAX_DEPTH", "Located", "Path", "Refused", "dotted", "parse_located"]
MAX_DEPTH = 64


class Refused(yaml.MarkedYAMLError):
    """Input sparkimg will not load (an alias, an anchor, too deep, too large); a ``YAMLError``,
    so callers report it like a syntax error, with its line."""


class _BoundedLoader(yaml.SafeLoader):
    """The safe loader, refusing anchors and aliases and bounding how deep nodes nest."""

    depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            kind = "aliases (*name)" if isinstance(event, yaml.AliasEvent) else "anchors (&name)"
            raise Refused(problem=f"{kind} are not allowed; write each value out", problem_mark=event.start_mark)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise Refused(problem=f"nested deeper than {MAX_DEPTH} levels", problem_mark=event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1




def parse_located(text: str) -> Located:
    """Parse ``text`` with the bounded safe loader and record line numbers.

    Raises ``yaml.YAMLError`` on a syntax error or refused input (its ``problem_mark`` has the line).
    """
    if len(text) > MAX_BYTES:
        raise Refused(problem=f"larger than {MAX_BYTES >> 20} MiB; this is not a spec or recipe")
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        located = Located(None if node is None else loader.construct_document(node))
    except RecursionError:
        raise Refused(problem="nested too deeply to read") from None
    except (ValueError, OverflowError) as exc:  # a date that is no date, an integer past Python's limit
        raise Refused(problem=f"a value YAML cannot read: {exc}") from None
    finally:
        loader.dispose()
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

