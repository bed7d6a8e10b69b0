"""A parsed document with the line of every key path in it, and its JSON form for the parse cache.

A leaf without PyYAML: ``_yamlpos`` parses YAML into a ``Located``; a build of a spec it parsed
before reads the ``Located`` back from the store instead (``remembered``), so it neither imports
PyYAML nor parses (together about a tenth of a patch-only rebuild). The cache is keyed by the
sha256 of the file's bytes, so a changed file is always parsed again, and it holds only
documents that JSON keeps exactly (string keys; strings, integers, finite floats, booleans,
null, lists and maps): anything else (a date, a non-string key) is parsed every time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import Any

Path = tuple[str | int, ...]
MAX_BYTES = 4 << 20
# The parse cache's format; part of every key, so a new format never reads an old entry.
CACHE_FORMAT = "sparkimg-parsed/v1"


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


def dotted(path: Path) -> str:
    """Render a key path the way users read it: ``layers[0].env.FOO``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text or "(top level)"


def _entry(folder: FilePath, raw: bytes) -> FilePath:
    return folder / (hashlib.sha256(CACHE_FORMAT.encode() + b"\0" + raw).hexdigest() + ".json")


def remembered(folder: FilePath, raw: bytes) -> Located | None:
    """The parse of ``raw`` remembered in ``folder``, or None (never parsed, or unreadable)."""
    try:
        entry = json.loads(_entry(folder, raw).read_bytes())
        lines = {_path(p): line for p, line in entry["lines"]}
        duplicates = [(_path(p), line) for p, line in entry["duplicates"]]
        if not all(type(n) is int for n in (*lines.values(), *(n for _, n in duplicates))):
            return None
        return Located(entry["data"], lines, duplicates)
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


def remember(folder: FilePath, raw: bytes, located: Located) -> None:
    """Keep the parse of ``raw`` in ``folder`` (atomically), when JSON holds it exactly."""
    if not _plain(located.data):
        return
    from sparkimg._internal.fs.atomic import write_atomic

    entry = {"format": CACHE_FORMAT, "data": located.data,
             "lines": [[list(p), line] for p, line in located.lines.items()],
             "duplicates": [[list(p), line] for p, line in located.duplicates]}
    # A cache: a store that cannot take the entry parses again next time.
    with contextlib.suppress(OSError):
        write_atomic(_entry(folder, raw), json.dumps(entry, allow_nan=False).encode())


def _path(parts: Any) -> Path:
    if not isinstance(parts, list) or not all(type(p) in (str, int) for p in parts):
        raise TypeError("not a key path")
    return tuple(parts)


def _plain(value: Any, depth: int = 0) -> bool:
    """True when ``json.loads(json.dumps(value)) == value`` with the same types throughout."""
    if depth > 100:
        return False
    kind = type(value)
    if kind in (str, int, bool) or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is list:
        return all(_plain(item, depth + 1) for item in value)
    if kind is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    return False
