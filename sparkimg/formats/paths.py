"""What a path written in a spec or a lock may be: one rule, read by the spec's patch targets
and the lock's fields alike. Pure string checks, POSIX paths (the container's and the lock's)."""

from __future__ import annotations

import re

# Spec names (the spec, sources, layers, patch sets), also as the lock's keys.
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


def _plain(text: str) -> bool:
    """No whitespace and no control characters: a path that cannot split a line or a command."""
    return not any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in text)


def clean_absolute(path: str) -> bool:
    """``/a/b``: absolute, normalised (no ``.``, ``..`` or empty part, no trailing ``/``), never ``/``."""
    parts = path.split("/")[1:]
    return path.startswith("/") and bool(parts) and not any(p in ("", ".", "..") for p in parts) and _plain(path)


def clean_relative(path: str) -> bool:
    """``a/b``: relative and normalised, with no ``..``: it stays under what it is relative to."""
    return bool(path) and not path.startswith("/") and not any(p in ("", ".", "..") for p in path.split("/")) \
        and _plain(path)


def bare_name(name: str) -> bool:
    """A file name, never a path: no ``/``, not hidden, not ``..``."""
    return bool(name) and "/" not in name and "\\" not in name and not name.startswith(".") and _plain(name)
